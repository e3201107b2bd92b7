//! Retry-loop suppression and the operator breaker: the pure parts.
//!
//! A rejected proposal's *fingerprint* identifies the same call made again:
//! the tenant, everything the gates read of the spec ([`GateSpec`], whole)
//! and the parameters (keys sorted). The reason and the spec's other free
//! text are not in it, so rewording a rejected call does not get it
//! reviewed again; anything a gate reads is, so a call changed where the
//! gates look is reviewed. [`Breaker`] counts an operator's rejections in a
//! sliding window.

use std::collections::VecDeque;

use sha2::{Digest, Sha256};

use crate::{
    Decision, DecisionOutcome, Millis, ProposalSpec,
    breaker::BreakerRule,
    gates::{self, GateSpec},
    model::Failure,
};

/// SHA-256 (hex) of what makes two submissions "the same call". The same on
/// every replica and release that hashes the same [`GateSpec`] (a shared
/// cache keys on it): JSON of the tenant, of the gates' view (its fields in
/// declaration order) and of the parameters (keys sorted), each followed by
/// a unit separator. The JSON is written straight into the hash: a retry's
/// fingerprint allocates nothing but the gates' view and the hex.
pub fn fingerprint(tenant: &str, spec: &ProposalSpec) -> String {
    let mut hash = Hashing::new();
    serde_json::to_writer(&mut hash, tenant).expect("a string serializes");
    hash.put(UNIT_SEPARATOR);
    serde_json::to_writer(&mut hash, &GateSpec::from(spec)).expect("a gate spec serializes");
    hash.put(UNIT_SEPARATOR);
    canonical_object(&spec.parameters, &mut hash);
    hash.put(UNIT_SEPARATOR);
    hash.finish_hex()
}

/// U+001F, which ends each part of a fingerprint's text.
const UNIT_SEPARATOR: &[u8] = b"\x1f";

/// A SHA-256 that JSON is written into, through a buffer on the stack: the
/// serializer's many small writes reach the hash as a few long ones.
struct Hashing {
    sha: Sha256,
    buf: [u8; 512],
    len: usize,
}

impl Hashing {
    fn new() -> Self {
        Hashing {
            sha: Sha256::new(),
            buf: [0; 512],
            len: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buf.len() {
            self.sha.update(&self.buf[..self.len]);
            self.len = 0;
            if bytes.len() > self.buf.len() {
                self.sha.update(bytes);
                return;
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// The digest in lowercase hex.
    fn finish_hex(mut self) -> String {
        self.sha.update(&self.buf[..self.len]);
        let mut hex = [0u8; 64];
        hex::encode_to_slice(self.sha.finalize(), &mut hex).expect("64 digits for 32 bytes");
        String::from_utf8(hex.to_vec()).expect("hex digits are ASCII")
    }
}

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.put(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An object as JSON with every object's keys sorted, whatever the map's own
/// order (a map that iterates in key order already is written as it stands).
fn canonical_object(map: &serde_json::Map<String, serde_json::Value>, out: &mut Hashing) {
    if map.keys().is_sorted() {
        canonical_entries(map.iter(), out);
    } else {
        let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
        entries.sort_by_key(|&(key, _)| key);
        canonical_entries(entries.into_iter(), out);
    }
}

fn canonical_entries<'a>(
    entries: impl Iterator<Item = (&'a String, &'a serde_json::Value)>,
    out: &mut Hashing,
) {
    out.put(b"{");
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.put(b",");
        }
        serde_json::to_writer(&mut *out, key).expect("a string serializes");
        out.put(b":");
        canonical(value, out);
    }
    out.put(b"}");
}

/// JSON with every object's keys sorted, whatever the map's own order.
fn canonical(value: &serde_json::Value, out: &mut Hashing) {
    match value {
        serde_json::Value::Object(map) => canonical_object(map, out),
        serde_json::Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                canonical(item, out);
            }
            out.put(b"]");
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a scalar serializes"),
    }
}

/// Whether a rejection may answer identical retries. Not when the only thing
/// missing is the parallel-operation gate (the caller was told to wait for
/// another operation, and one who waited must be reviewed), and not when the
/// review itself failed (no verdict on the proposal at all), nor when the
/// model gave none (a timeout, a provider error, an answer that is not a
/// completion, a spent budget: the model is asked again). A model's reject
/// or unsure is a verdict, and a reworded retry is answered from the cache.
pub fn suppresses_retries(decision: &Decision) -> bool {
    decision.outcome == DecisionOutcome::Reject
        && !decision.missing_gates.iter().any(|g| g == gates::REVIEW)
        && !decision
            .gates
            .iter()
            .any(|g| g.gate == gates::MODEL && !g.passed && Failure::named(&g.detail).is_some())
        && decision
            .missing_gates
            .iter()
            .any(|g| g != gates::NO_PARALLEL_OPERATION)
}

/// An operator's recent rejections. Open as [`BreakerRule::is_open`] says.
#[derive(Debug, Clone, Default)]
pub struct Breaker {
    rejections: VecDeque<Millis>,
    reset_at: Millis,
}

impl Breaker {
    pub fn record_rejection(&mut self, at: Millis, window: Millis) {
        self.rejections.push_back(at);
        self.expire(at, window);
    }

    pub fn reset(&mut self, at: Millis) {
        self.reset_at = self.reset_at.max(at);
        self.rejections.retain(|&t| t > at);
    }

    pub fn is_open(&self, now: Millis, threshold: u32, window: Millis) -> bool {
        let rule = BreakerRule {
            threshold,
            window_ms: window,
        };
        rule.is_open(self.rejections.iter().copied(), self.reset_at, now)
    }

    /// Nothing left to remember: the entry can go.
    pub fn is_idle(&self, now: Millis, window: Millis) -> bool {
        self.rejections.iter().all(|&t| now - t >= window)
    }

    fn expire(&mut self, now: Millis, window: Millis) {
        while self.rejections.front().is_some_and(|&t| now - t >= window) {
            self.rejections.pop_front();
        }
    }
}

#[cfg(test)]
mod tests;
