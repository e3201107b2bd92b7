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
        route_id: None,
        votes: Vec::new(),
        model: None,
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
            copies: None,
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
        copies: None,
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

/// The copies a store keeps beside `record`, as the store writes them.
fn copies_of(record: &AuditRecord, tide: time_index::Tide) -> StoredCopies {
    StoredCopies {
        log: LogColumns {
            tenant: record.tenant.clone(),
            proposal_id: record.proposal_id.clone(),
            decided_at: record.decided_at,
            action: record.action.clone(),
            target: record.target.clone(),
            operator: record.operator.clone(),
            submitted_by: record.submitted_by.clone(),
            outcome: record.outcome.as_str().into(),
            blast_radius: record.blast_radius.as_str().into(),
            sop_id: record.sop_id.clone(),
            decided_max: tide.decided_max,
            lateness_max: tide.lateness_max,
        },
        decision: Some(DecisionColumns {
            tenant: record.tenant.clone(),
            outcome: record.outcome.as_str().into(),
            reason: record.reason.clone(),
            agent_message: record.agent_message.clone(),
            sop_id: record.sop_id.clone(),
            sop_version: record.sop_version.map(i64::from),
            rollback_path: record.rollback_path.clone(),
            gates_json: serde_json::to_string(&record.gates).unwrap(),
            missing_gates_json: serde_json::to_string(&record.missing_gates).unwrap(),
            reviewer: record.reviewer.clone(),
            decided_at: record.decided_at,
            summary: record.summary.clone(),
            review_latency_ms: record.review_latency_ms as i64,
            route_id: record.route_id.clone(),
            votes_json: (!record.votes.is_empty())
                .then(|| serde_json::to_string(&record.votes).unwrap()),
            model_json: record
                .model
                .as_ref()
                .map(|m| serde_json::to_string(m).unwrap()),
        }),
        proposal: Some(ProposalColumns {
            tenant: record.tenant.clone(),
            state: match record.outcome {
                DecisionOutcome::Approve => "approved",
                DecisionOutcome::Reject => "rejected",
                DecisionOutcome::TimedOut => "timed_out",
            }
            .into(),
            action: record.action.clone(),
            target: record.target.clone(),
            operator: record.operator.clone(),
            submitted_by: record.submitted_by.clone(),
            blast_radius: record.blast_radius.as_str().into(),
        }),
    }
}

/// A chained log of `n` entries with their copies.
fn stored_log(n: u64) -> Vec<StoredEntry> {
    let mut tide = time_index::Tide::before_first();
    log(n)
        .into_iter()
        .map(|(sequence, digest, record)| {
            let parsed: AuditRecord = serde_json::from_str(&record).unwrap();
            tide = tide.next(parsed.decided_at);
            StoredEntry {
                sequence,
                digest,
                copies: Some(copies_of(&parsed, tide)),
                record,
            }
        })
        .collect()
}

fn verify_stored(entries: &[StoredEntry]) -> Verification {
    let mut verifier = Verifier::new();
    for entry in entries {
        verifier.push_checked(
            entry.sequence,
            &entry.digest,
            Ok(entry.leaf()),
            entry.check_copies(),
        );
    }
    verifier.finish()
}

#[test]
fn copies_that_say_what_their_records_say_verify() {
    let entries = stored_log(30);
    let v = verify_stored(&entries);
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.entries_checked, 30);
}

/// A copy changed under the store (a filter column, the decision row, the
/// proposal's state, the running time values) is a mismatch named by its
/// sequence and column, though every link of the chain holds.
#[test]
fn a_copy_that_disagrees_with_its_record_is_named_with_its_column() {
    type Change = fn(&mut StoredCopies);
    let changes: [(&str, Change); 12] = [
        ("audit_log.outcome", |c| c.log.outcome = "approve".into()),
        ("audit_log.operator", |c| c.log.operator = "someone".into()),
        ("audit_log.sop_id", |c| c.log.sop_id = None),
        ("audit_log.decided_at", |c| c.log.decided_at += 1),
        ("audit_log.decided_max", |c| c.log.decided_max += 1),
        ("audit_log.lateness_max", |c| c.log.lateness_max += 5),
        ("decisions.outcome", |c| {
            c.decision.as_mut().unwrap().outcome = "approve".into()
        }),
        ("decisions.reason", |c| {
            c.decision.as_mut().unwrap().reason = "fine".into()
        }),
        ("decisions.gates_json", |c| {
            c.decision.as_mut().unwrap().gates_json = "not json".into()
        }),
        ("decisions.proposal_id", |c| c.decision = None),
        ("proposals.state", |c| {
            c.proposal.as_mut().unwrap().state = "approved".into()
        }),
        ("proposals.id", |c| c.proposal = None),
    ];
    for (column, change) in changes {
        // Entry 9 is a rejection (every third entry).
        let mut entries = stored_log(20);
        change(entries[8].copies.as_mut().unwrap());
        let v = verify_stored(&entries);
        let f = v
            .failure
            .as_ref()
            .unwrap_or_else(|| panic!("{column}: {v:?}"));
        assert_eq!(
            (f.sequence, f.kind, f.column),
            (9, FailureKind::Mismatch, Some(column)),
            "{v:?}"
        );
        assert!(f.detail.contains(column), "{f:?}");
        assert_eq!(v.entries_checked, 9, "stops at the entry");
    }
}

/// A record changed with its copies is altered (the chain shows it first);
/// copies are checked only where the link holds.
#[test]
fn an_altered_record_is_altered_not_a_mismatch() {
    let mut entries = stored_log(10);
    entries[3].record = entries[3].record.replacen("reason 4", "reason 5", 1);
    entries[3].copies.as_mut().unwrap().log.outcome = "reject".into();
    let v = verify_stored(&entries);
    assert_eq!(failure(&v), (4, FailureKind::Altered));
}

/// A decision that was never escalated has no route and no votes: its
/// record's canonical JSON holds neither key, so every record written
/// before routes existed hashes as it did, and such a JSON still parses.
#[test]
fn a_record_never_escalated_has_the_fields_it_always_had() {
    let r = record(7);
    let json = r.canonical_json();
    assert!(
        !json.contains("route_id") && !json.contains("votes"),
        "{json}"
    );
    let keys: Vec<String> =
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)
            .unwrap()
            .keys()
            .cloned()
            .collect();
    assert_eq!(keys.len(), 19, "{keys:?}");
    let back: AuditRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
}

/// An escalated decision's record: its route and two votes.
fn escalated(n: u64) -> AuditRecord {
    use crate::escalation::{Verdict, Vote};
    let vote = |person: &str, comment: &str, at: i64| Vote {
        person: person.into(),
        key_id: format!("key-{person}"),
        verdict: Verdict::Approve,
        comment: comment.into(),
        at,
    };
    AuditRecord {
        route_id: Some("db-changes".into()),
        votes: vec![
            vote("ann@example.com", "looks right", 10),
            vote("bob@example.com", "ok", 11),
        ],
        ..record(n)
    }
}

/// A log whose entry 5 is an escalated decision with its votes, stored
/// with its copies.
fn log_with_votes() -> Vec<StoredEntry> {
    log_with(8, 5, escalated)
}

/// A log of `n` entries whose entry `at` is `special`'s record, stored with
/// its copies.
fn log_with(n: u64, at: u64, special: fn(u64) -> AuditRecord) -> Vec<StoredEntry> {
    let mut head = EMPTY_HEAD;
    let mut tide = time_index::Tide::before_first();
    (1..=n)
        .map(|n| {
            let r = if n == at { special(n) } else { record(n) };
            head = chain(&head, &r.leaf_hash());
            tide = tide.next(r.decided_at);
            StoredEntry {
                sequence: n,
                digest: hex::encode(head),
                record: r.canonical_json(),
                copies: Some(copies_of(&r, tide)),
            }
        })
        .collect()
}

/// The votes are in the chained record: the log with them verifies, and
/// one changed byte of a vote (its comment, its person) fails verification
/// at that entry. A changed copy of the votes or the route in the decision
/// row is a mismatch named by its column.
#[test]
fn the_chain_covers_an_escalated_decisions_route_and_votes() {
    let entries = log_with_votes();
    assert!(
        entries[4]
            .record
            .contains(r#""votes":[{"person":"ann@example.com""#)
    );
    let v = verify_stored(&entries);
    assert!(v.ok(), "{v:?}");

    for (from, to) in [
        ("looks right", "looks wrong"),
        ("bob@example.com", "bob@example.org"),
    ] {
        let mut entries = log_with_votes();
        entries[4].record = entries[4].record.replacen(from, to, 1);
        assert_eq!(
            failure(&verify_stored(&entries)),
            (5, FailureKind::Altered),
            "{to}"
        );
    }

    type Change = fn(&mut DecisionColumns);
    let changes: [(&str, Change); 3] = [
        ("decisions.votes_json", |d| {
            d.votes_json = d.votes_json.as_ref().map(|j| j.replacen("ok", "no", 1))
        }),
        ("decisions.votes_json", |d| d.votes_json = None),
        ("decisions.route_id", |d| d.route_id = Some("other".into())),
    ];
    for (column, change) in changes {
        let mut entries = log_with_votes();
        change(
            entries[4]
                .copies
                .as_mut()
                .unwrap()
                .decision
                .as_mut()
                .unwrap(),
        );
        let v = verify_stored(&entries);
        let f = v
            .failure
            .as_ref()
            .unwrap_or_else(|| panic!("{column}: {v:?}"));
        assert_eq!(
            (f.sequence, f.kind, f.column),
            (5, FailureKind::Mismatch, Some(column))
        );
    }
}

/// A decision a model reviewed: its review in the record.
fn model_reviewed(n: u64) -> AuditRecord {
    use crate::model::TokenUsage;
    AuditRecord {
        model: Some(ModelReview {
            profile_id: "db-changes".into(),
            endpoint: "local".into(),
            model: "qwen2.5-7b-instruct".into(),
            verdict: "approve".into(),
            latency_ms: 840,
            usage: TokenUsage {
                prompt: 812,
                completion: 9,
                cached_prompt: 768,
            },
        }),
        ..record(n)
    }
}

/// The model's review is in the chained record: the log with it verifies;
/// one changed byte of it (the model, the verdict, a token count) fails
/// verification at that entry; a changed or dropped copy in the decision
/// row is a mismatch named by its column, and so is a copy where the
/// record has none.
#[test]
fn the_chain_covers_a_decisions_model_review() {
    let with_review = |at: u64| log_with(6, at, model_reviewed);
    let entries = with_review(4);
    assert!(
        entries[3]
            .record
            .contains(r#""model":{"profile_id":"db-changes""#),
        "{}",
        entries[3].record
    );
    assert!(!entries[2].record.contains("model"), "none where none ran");
    assert!(verify_stored(&entries).ok());

    for (from, to) in [
        ("qwen2.5-7b-instruct", "qwen2.5-7b-instruct-x"),
        (r#""verdict":"approve""#, r#""verdict":"reject""#),
        (r#""cached_prompt":768"#, r#""cached_prompt":0"#),
        (r#""latency_ms":840"#, r#""latency_ms":84"#),
    ] {
        let mut entries = with_review(4);
        entries[3].record = entries[3].record.replacen(from, to, 1);
        assert_eq!(
            failure(&verify_stored(&entries)),
            (4, FailureKind::Altered),
            "{to}"
        );
    }

    type Change = fn(&mut DecisionColumns);
    let changes: [(u64, Change); 3] = [
        (4, |d| {
            d.model_json = d.model_json.as_ref().map(|j| j.replacen("840", "84", 1))
        }),
        (4, |d| d.model_json = None),
        (3, |d| d.model_json = Some(r#"{"profile_id":"x"}"#.into())),
    ];
    for (at, change) in changes {
        let mut entries = with_review(4);
        let i = at as usize - 1;
        change(
            entries[i]
                .copies
                .as_mut()
                .unwrap()
                .decision
                .as_mut()
                .unwrap(),
        );
        let v = verify_stored(&entries);
        let f = v.failure.as_ref().unwrap_or_else(|| panic!("{at}: {v:?}"));
        assert_eq!(
            (f.sequence, f.kind, f.column),
            (at, FailureKind::Mismatch, Some("decisions.model_json"))
        );
    }
}
