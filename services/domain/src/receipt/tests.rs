use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::{
    BlastRadius, OperationClass, ProposalSpec, ProposalState,
    decision::GateResult,
    gates::{GATES, Verdict},
    review::{ReviewStamp, decide},
};

const DECIDED_AT: Millis = 1_700_000_000_000;

fn spec(target: &str) -> ProposalSpec {
    ProposalSpec {
        action: "restart_service".into(),
        class: OperationClass::Write,
        target: target.into(),
        parameters: serde_json::Map::new(),
        reason: "r".into(),
        blast_radius: BlastRadius::SingleDevice,
        operator: "op".into(),
        context_summary: String::new(),
        incident_id: String::new(),
        labels: BTreeMap::new(),
        rollback_plan: String::new(),
        force_approve_no_sop: false,
        idempotency_key: "k-1".into(),
    }
}

fn decided(approve: bool) -> Proposal {
    let spec = spec("web-1");
    let verdict = Verdict {
        gates: GATES
            .iter()
            .map(|g| GateResult {
                gate: (*g).into(),
                passed: approve,
                detail: "d".into(),
            })
            .collect(),
        sop: None,
        rollback_path: None,
    };
    let stamp = ReviewStamp {
        reviewer: "w".into(),
        decided_at: DECIDED_AT,
        latency_ms: 1,
    };
    let decision = decide(&verdict, &(&spec).into(), stamp);
    Proposal {
        id: "p-1".into(),
        tenant: "acme".into(),
        spec,
        state: if approve {
            ProposalState::Approved
        } else {
            ProposalState::Rejected
        },
        submitted_by: "bot".into(),
        submitted_by_person: None,
        created_at: DECIDED_AT - 10,
        updated_at: DECIDED_AT,
        decision: Some(decision),
        suppressed_retries: 0,
        cancel_reason: None,
    }
}

fn key() -> SigningKey {
    SigningKey::from_seed([7; 32])
}

fn expected(p: &Proposal) -> (String, String) {
    (p.tenant.clone(), p.spec.digest())
}

#[test]
fn an_approval_has_a_receipt_that_verifies_and_nothing_else_has_one() {
    let p = decided(true);
    let r = Receipt::issue(&key(), &p, DEFAULT_RECEIPT_TTL_MS).unwrap();
    assert_eq!(r.expires_at, DECIDED_AT + DEFAULT_RECEIPT_TTL_MS);
    assert_eq!(r.outcome, "approve");
    let (tenant, digest) = expected(&p);
    let want = Expected {
        tenant: &tenant,
        spec_digest: &digest,
        proposal_id: Some("p-1"),
    };
    assert_eq!(r.verify(&key().public_hex(), &want, DECIDED_AT + 1), Ok(()));
    // Deterministic: the same receipt each time the decision is shown.
    assert_eq!(Receipt::issue(&key(), &p, DEFAULT_RECEIPT_TTL_MS), Some(r));
    assert_eq!(
        Receipt::issue(&key(), &decided(false), DEFAULT_RECEIPT_TTL_MS),
        None
    );
}

#[test]
fn the_signed_bytes_are_the_documented_lines() {
    assert_eq!(
        receipt_message("acme", "p-1", "ab", "approve", 5, 9),
        b"countersign-receipt/v1\nacme\np-1\nab\napprove\n5\n9\n".to_vec()
    );
}

#[test]
fn another_tenant_spec_proposal_or_a_past_expiry_never_verifies() {
    let p = decided(true);
    let r = Receipt::issue(&key(), &p, 1000).unwrap();
    let public = key().public_hex();
    let (tenant, digest) = expected(&p);
    let ok = Expected {
        tenant: &tenant,
        spec_digest: &digest,
        proposal_id: None,
    };
    let other_digest = spec("web-2").digest();
    let cases = [
        (
            Expected {
                tenant: "other",
                ..ok
            },
            DECIDED_AT,
        ),
        (
            Expected {
                spec_digest: &other_digest,
                ..ok
            },
            DECIDED_AT,
        ),
        (
            Expected {
                proposal_id: Some("p-2"),
                ..ok
            },
            DECIDED_AT,
        ),
        (ok, DECIDED_AT + 1000),
    ];
    for (want, now) in cases {
        assert!(r.verify(&public, &want, now).is_err(), "{want:?} at {now}");
    }
    let other_key = SigningKey::from_seed([8; 32]).public_hex();
    assert!(matches!(
        r.verify(&other_key, &ok, DECIDED_AT),
        Err(ReceiptError::Signature(_))
    ));
    // The idempotency key is not part of what was approved.
    let mut retried = p.spec.clone();
    retried.idempotency_key = "k-2".into();
    assert_eq!(retried.digest(), digest);
}

proptest! {
    /// Any change to a signed field, or a flipped bit of the signature,
    /// fails verification.
    #[test]
    fn a_changed_byte_never_verifies(field in 0usize..7, bit in 0u8..8, at in 0usize..64) {
        let p = decided(true);
        let mut r = Receipt::issue(&key(), &p, DEFAULT_RECEIPT_TTL_MS).unwrap();
        let flip = |s: &mut String| {
            let mut bytes = s.clone().into_bytes();
            let i = at % bytes.len().max(1);
            if bytes.is_empty() { bytes.push(b'x'); } else { bytes[i] ^= 1 << (bit % 7); }
            *s = String::from_utf8_lossy(&bytes).into_owned();
        };
        match field {
            0 => flip(&mut r.tenant),
            1 => flip(&mut r.proposal_id),
            2 => flip(&mut r.spec_digest),
            3 => flip(&mut r.outcome),
            4 => r.decided_at += 1,
            5 => r.expires_at += 1 + i64::from(bit),
            // The signature's bytes, not its hex text: a letter's case is
            // the same byte.
            _ => {
                let mut bytes = hex::decode(&r.signature).unwrap();
                bytes[at % 64] ^= 1 << bit;
                r.signature = hex::encode(bytes);
            }
        }
        // Verified against the receipt's own claims, so only the signature
        // can refuse it.
        let want = Expected { tenant: &r.tenant, spec_digest: &r.spec_digest, proposal_id: None };
        prop_assert!(r.verify(&key().public_hex(), &want, DECIDED_AT).is_err());
    }
}
