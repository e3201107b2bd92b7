use super::*;

fn record(n: u64) -> AuditRecord {
    AuditRecord {
        tenant: "acme".into(),
        proposal_id: format!("P{n:04}"),
        action: "host_restart_service".into(),
        target: format!("node-{n}"),
        operator: "user_42".into(),
        submitted_by: "key-1".into(),
        blast_radius: BlastRadius::SingleDevice,
        outcome: if n.is_multiple_of(3) {
            DecisionOutcome::Reject
        } else {
            DecisionOutcome::Approve
        },
        reason: format!("reason {n}"),
        agent_message: String::new(),
        sop_id: Some("SOP-007".into()),
        sop_version: Some(2),
        rollback_path: Some("restart again".into()),
        gates: vec![GateResult {
            gate: "sop".into(),
            passed: true,
            detail: "SOP-007 v2".into(),
        }],
        missing_gates: vec![],
        reviewer: "host/0".into(),
        decided_at: 1_700_000_000_000 + n as i64,
        summary: "Decision: approve".into(),
        review_latency_ms: 3,
    }
}

/// `(sequence, stored digest, canonical record)` rows as a store holds them.
fn log(n: u64) -> Vec<(u64, String, String)> {
    let mut head = EMPTY_HEAD;
    (1..=n)
        .map(|s| {
            let r = record(s);
            head = chain(&head, &r.leaf_hash());
            (s, hex::encode(head), r.canonical_json())
        })
        .collect()
}

fn verify(rows: &[(u64, String, String)], mut verifier: Verifier) -> Verification {
    for (sequence, digest, json) in rows {
        let stored = StoredEntry {
            sequence: *sequence,
            digest: digest.clone(),
            record: json.clone(),
        };
        verifier.push(*sequence, digest, Ok(stored.leaf()));
        if !verifier.wants_more() {
            break;
        }
    }
    verifier.finish()
}

fn failure(v: &Verification) -> (u64, FailureKind) {
    let f = v.failure.as_ref().expect("a failure");
    (f.sequence, f.kind)
}

#[test]
fn an_untouched_log_verifies_and_reports_its_head() {
    let rows = log(50);
    let v = verify(&rows, Verifier::new());
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.entries_checked, 50);
    assert_eq!(v.head_digest, rows[49].1);
    assert_eq!(
        verify(&[], Verifier::new()).head_digest,
        hex::encode(EMPTY_HEAD)
    );
}

#[test]
fn the_canonical_form_is_stable_through_a_round_trip_and_is_what_is_hashed() {
    let r = record(7);
    let parsed: AuditRecord = serde_json::from_str(&r.canonical_json()).unwrap();
    assert_eq!(parsed.canonical_json(), r.canonical_json());
    assert_eq!(parsed.leaf_hash(), r.leaf_hash());
    let stored = StoredEntry {
        sequence: 7,
        digest: String::new(),
        record: r.canonical_json(),
    };
    assert_eq!(stored.leaf(), r.leaf_hash());
}

#[test]
fn leaves_and_links_are_domain_separated() {
    let leaf = leaf_hash(b"x");
    let mut plain = Sha256::new();
    plain.update(b"x");
    let plain: Hash = plain.finalize().into();
    assert_ne!(leaf, plain);
    assert_ne!(
        chain(&EMPTY_HEAD, &leaf),
        leaf_hash(&[EMPTY_HEAD, leaf].concat())
    );
}

#[test]
fn a_flipped_byte_is_named_as_altered_at_its_sequence() {
    let mut rows = log(20);
    rows[11].2 = rows[11].2.replacen("reason 12", "reason 13", 1);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (12, FailureKind::Altered)
    );
    let mut rows = log(20);
    let flipped = if rows[4].1.starts_with('0') { "1" } else { "0" };
    rows[4].1.replace_range(0..1, flipped);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (5, FailureKind::Altered)
    );
    let mut rows = log(20);
    rows[19].2.push('}');
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (20, FailureKind::Altered)
    );
}

#[test]
fn a_deleted_row_is_named_as_missing() {
    let mut rows = log(20);
    rows.remove(7);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (8, FailureKind::Missing)
    );
    let mut rows = log(20);
    rows.remove(0);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (1, FailureKind::Missing)
    );
}

#[test]
fn two_swapped_rows_are_named_as_reordered() {
    // The rows' contents change places; their sequence numbers stay.
    let mut rows = log(20);
    let (a, b) = (rows[9].clone(), rows[10].clone());
    rows[9] = (10, b.1, b.2);
    rows[10] = (11, a.1, a.2);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (10, FailureKind::Reordered)
    );
    // Read in the wrong order (sequence numbers swapped with them).
    let mut rows = log(20);
    rows.swap(3, 4);
    assert_eq!(
        failure(&verify(&rows, Verifier::new())),
        (4, FailureKind::Reordered)
    );
}

#[test]
fn a_truncated_tail_fails_only_against_a_checkpoint() {
    let rows = log(30);
    let at = |size: usize| Verifier::against(size as u64, &rows[size - 1].1);
    assert!(verify(&rows[..25], Verifier::new()).ok());
    assert_eq!(
        failure(&verify(&rows[..25], at(30))),
        (26, FailureKind::Truncated)
    );
    assert!(verify(&rows, at(30)).ok());
    assert!(
        verify(&rows, at(10)).ok(),
        "a longer log extends the checkpoint"
    );
}

#[test]
fn a_rewritten_history_fails_against_the_checkpoint() {
    let honest = log(10);
    // A forger recomputes every digest after changing entry 3.
    let mut head = EMPTY_HEAD;
    let forged: Vec<_> = (1..=10)
        .map(|s| {
            let mut r = record(s);
            if s == 3 {
                r.outcome = DecisionOutcome::Approve;
                r.reason = "forged".into();
            }
            head = chain(&head, &r.leaf_hash());
            (s, hex::encode(head), r.canonical_json())
        })
        .collect();
    assert!(
        verify(&forged, Verifier::new()).ok(),
        "a chain alone cannot tell"
    );
    let v = verify(&forged, Verifier::against(10, &honest[9].1));
    assert_eq!(failure(&v), (10, FailureKind::CheckpointMismatch));
}

#[test]
fn a_checkpoint_signature_verifies_and_fails_after_one_changed_byte() {
    let key = SigningKey::from_seed([7; 32]);
    let checkpoint = key.sign("acme", 10, &"ab".repeat(32), 1_700_000_000_000);
    assert_eq!(checkpoint.verify(&key.public_hex()), Ok(()));

    let mut changed = checkpoint.clone();
    changed.size = 11;
    assert_eq!(
        changed.verify(&key.public_hex()),
        Err(CheckpointError::Invalid)
    );
    let mut changed = checkpoint.clone();
    changed.head_digest.replace_range(0..1, "c");
    assert_eq!(
        changed.verify(&key.public_hex()),
        Err(CheckpointError::Invalid)
    );
    let mut changed = checkpoint.clone();
    let flipped = if changed.signature.starts_with('0') {
        "1"
    } else {
        "0"
    };
    changed.signature.replace_range(0..1, flipped);
    assert_eq!(
        changed.verify(&key.public_hex()),
        Err(CheckpointError::Invalid)
    );

    let other = SigningKey::from_seed([8; 32]);
    assert_eq!(
        checkpoint.verify(&other.public_hex()),
        Err(CheckpointError::Invalid)
    );
    assert_eq!(checkpoint.verify("zz"), Err(CheckpointError::BadPublicKey));
    assert!(format!("{key:?}").contains(&key.public_hex()));
    assert!(SigningKey::from_seed_hex("abc").is_err());
}
