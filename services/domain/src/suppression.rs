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
/// a unit separator.
pub fn fingerprint(tenant: &str, spec: &ProposalSpec) -> String {
    let mut text = serde_json::to_string(tenant).expect("a string serializes");
    text.push('\u{1f}');
    text.push_str(&serde_json::to_string(&GateSpec::from(spec)).expect("a gate spec serializes"));
    text.push('\u{1f}');
    canonical_object(&spec.parameters, &mut text);
    text.push('\u{1f}');
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// An object as JSON with every object's keys sorted, whatever the map's own order.
fn canonical_object(map: &serde_json::Map<String, serde_json::Value>, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        out.push(':');
        canonical(&map[key], out);
    }
    out.push('}');
}

/// JSON with every object's keys sorted, whatever the map's own order.
fn canonical(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => canonical_object(map, out),
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
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
