//! The decision log: auditors list, filter and page it, verify its hash chain
//! and checkpoints; tampering under the store is named by sequence.

use std::{collections::BTreeSet, time::Duration};

use countersign_domain::Role;
use countersign_proto::{
    convert::audit::checkpoint_from_proto,
    v1::{
        self, GetCheckpointRequest, GetDecisionRequest, ListDecisionsRequest, VerifyFailure,
        VerifyLogRequest, audit_service_client::AuditServiceClient,
    },
};
use tonic::{Code, service::interceptor::InterceptedService, transport::Channel};

use crate::helpers::{TestApp, assert_code, test_signing_key, valid_spec};

/// Which entries a filter should return.
type Matches = Box<dyn Fn(&v1::AuditEntry) -> bool>;

type Audit = AuditServiceClient<InterceptedService<Channel, countersign::client::BearerAuth>>;

async fn audit(app: &TestApp, key: &str) -> Audit {
    AuditServiceClient::with_interceptor(
        app.channel().await,
        countersign::client::BearerAuth::new(key).unwrap(),
    )
}

/// Submits `n` proposals (every third to an unknown target, so rejected; the
/// rest spread over operators) and waits until all are decided and logged.
async fn decide(app: &TestApp, coordinator: &str, auditor: &str, n: usize) -> Vec<String> {
    // Rejections are the point here: no operator's breaker may open.
    let mut policy = app.store.get_tenant("acme").await.unwrap().unwrap().policy;
    policy.breaker_threshold = 0;
    app.store.set_tenant_policy("acme", policy).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let mut spec = valid_spec();
        spec.operator = format!("op-{}", i % 4);
        spec.target = if i % 3 == 0 {
            format!("ghost-{i}")
        } else {
            format!("node-0{}", 1 + i % 3)
        };
        ids.push(app.submit_id(coordinator, spec).await);
    }
    for id in &ids {
        app.await_decision(coordinator, id, Duration::from_secs(20))
            .await
            .unwrap();
    }
    // The sequencer appends in commit order, and two reviewers may commit
    // the last submission before an earlier one: every decision is waited for.
    for id in &ids {
        wait_for_log(app, auditor, id).await;
    }
    ids
}

/// Waits until the sequencer has appended `id`'s decision.
async fn wait_for_log(app: &TestApp, auditor: &str, id: &str) {
    let mut client = audit(app, auditor).await;
    for _ in 0..200 {
        let found = client
            .get_decision(GetDecisionRequest {
                proposal_id: id.into(),
            })
            .await;
        if found.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("decision of {id} never reached the log");
}

async fn all_pages(client: &mut Audit, mut request: ListDecisionsRequest) -> Vec<v1::AuditEntry> {
    let mut entries = Vec::new();
    loop {
        let page = client
            .list_decisions(request.clone())
            .await
            .unwrap()
            .into_inner();
        let size = if request.page_size == 0 {
            100
        } else {
            request.page_size
        };
        assert!(page.entries.len() <= size as usize);
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            return entries;
        }
        request.page_token = page.next_page_token;
    }
}

async fn verify(client: &mut Audit, checkpoint: Option<v1::Checkpoint>) -> v1::VerifyLogResponse {
    client
        .verify_log(VerifyLogRequest { checkpoint })
        .await
        .unwrap()
        .into_inner()
}

fn assert_fails_at(report: &v1::VerifyLogResponse, sequence: u64, failure: VerifyFailure) {
    assert_eq!(
        (report.ok, report.first_invalid_sequence, report.failure),
        (false, sequence, failure as i32),
        "{report:?}"
    );
}

async fn checkpoint(client: &mut Audit, refresh: bool) -> v1::Checkpoint {
    client
        .get_checkpoint(GetCheckpointRequest { refresh })
        .await
        .unwrap()
        .into_inner()
}

async fn logged_app(n: usize) -> (TestApp, String) {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    let auditor = app.key("acme", Role::Auditor).await;
    decide(&app, &coordinator, &auditor, n).await;
    (app, auditor)
}

/// Drops the append-only triggers, as someone with the database file could.
async fn tamper(app: &TestApp, statements: &[&str]) {
    let db = app.raw_db().await;
    for statement in [
        "DROP TRIGGER audit_log_is_append_only_update",
        "DROP TRIGGER audit_log_is_append_only_delete",
    ]
    .iter()
    .chain(statements)
    {
        sqlx::query(statement).execute(&db).await.unwrap();
    }
}

#[tokio::test]
async fn every_decision_enters_the_log_once_newest_first_with_contiguous_sequences() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    let auditor = app.key("acme", Role::Auditor).await;
    let ids = decide(&app, &coordinator, &auditor, 30).await;

    let mut client = audit(&app, &auditor).await;
    let entries = all_pages(
        &mut client,
        ListDecisionsRequest {
            page_size: 7,
            ..Default::default()
        },
    )
    .await;
    let sequences: Vec<u64> = entries.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=30).rev().collect::<Vec<u64>>());
    let logged: BTreeSet<&str> = entries.iter().map(|e| e.proposal_id.as_str()).collect();
    assert_eq!(logged, ids.iter().map(String::as_str).collect());
    for entry in &entries {
        let decision = entry.decision.as_ref().unwrap();
        assert_eq!(
            (decision.sequence, &decision.digest),
            (entry.sequence, &entry.digest)
        );
        assert_eq!(entry.tenant, "acme");
        assert!(
            !decision.summary.is_empty(),
            "auditors see the full decision"
        );
    }
    let rejected = entries
        .iter()
        .filter(|e| e.decision.as_ref().unwrap().outcome == v1::DecisionOutcome::Reject as i32)
        .count();
    assert!(rejected >= 10, "unknown targets are rejected: {rejected}");

    let one = client
        .get_decision(GetDecisionRequest {
            proposal_id: ids[4].clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.proposal_id, ids[4]);

    let report = verify(&mut client, None).await;
    assert!(report.ok, "{report:?}");
    assert_eq!(report.entries_checked, 30);
    assert_eq!(report.head_digest, entries[0].digest);
}

#[tokio::test]
async fn filters_narrow_the_log_and_combine() {
    let (app, auditor) = logged_app(24).await;
    let mut client = audit(&app, &auditor).await;
    let everything = all_pages(&mut client, ListDecisionsRequest::default()).await;
    assert_eq!(everything.len(), 24);
    let outcome = |e: &v1::AuditEntry| e.decision.as_ref().unwrap().outcome;

    let cases: Vec<(ListDecisionsRequest, Matches)> = vec![
        (
            ListDecisionsRequest {
                target: "node-02".into(),
                ..Default::default()
            },
            Box::new(|e| e.target == "node-02"),
        ),
        (
            ListDecisionsRequest {
                operator: "op-1".into(),
                outcome: v1::DecisionOutcome::Reject as i32,
                ..Default::default()
            },
            Box::new(move |e| {
                e.operator == "op-1" && outcome(e) == v1::DecisionOutcome::Reject as i32
            }),
        ),
        (
            ListDecisionsRequest {
                action: "host_restart_service".into(),
                blast_radius: v1::BlastRadius::SingleDevice as i32,
                ..Default::default()
            },
            Box::new(|_| true),
        ),
        (
            ListDecisionsRequest {
                sop_id: "SOP-007".into(),
                ..Default::default()
            },
            Box::new(|e| e.decision.as_ref().unwrap().sop_id == "SOP-007"),
        ),
        (
            ListDecisionsRequest {
                submitted_by: "coordinator-of-acme".into(),
                ..Default::default()
            },
            Box::new(|_| true),
        ),
        (
            ListDecisionsRequest {
                action: "no_such_action".into(),
                ..Default::default()
            },
            Box::new(|_| false),
        ),
    ];
    for (request, expected) in cases {
        let want: Vec<u64> = everything
            .iter()
            .filter(|e| expected(e))
            .map(|e| e.sequence)
            .collect();
        let got: Vec<u64> = all_pages(
            &mut client,
            ListDecisionsRequest {
                page_size: 5,
                ..request.clone()
            },
        )
        .await
        .iter()
        .map(|e| e.sequence)
        .collect();
        assert_eq!(got, want, "{request:?}");
    }

    // A time range: the middle third by decision time.
    let times: Vec<i64> = everything
        .iter()
        .map(|e| {
            countersign_proto::convert::millis(
                e.decision.as_ref().unwrap().decided_at.as_ref().unwrap(),
            )
        })
        .collect();
    let (from, until) = (times[16], times[7]);
    let got = all_pages(
        &mut client,
        ListDecisionsRequest {
            decided_from: Some(countersign_proto::convert::timestamp(from)),
            decided_until: Some(countersign_proto::convert::timestamp(until)),
            ..Default::default()
        },
    )
    .await;
    let want = times.iter().filter(|&&t| t >= from && t < until).count();
    assert_eq!(got.len(), want);
    assert!(!got.is_empty());
}

#[tokio::test]
async fn pages_never_repeat_or_skip_an_entry_while_decisions_are_added() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    let auditor = app.key("acme", Role::Auditor).await;
    decide(&app, &coordinator, &auditor, 20).await;
    let mut client = audit(&app, &auditor).await;

    let mut request = ListDecisionsRequest {
        page_size: 4,
        ..Default::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = client
            .list_decisions(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entries.iter().map(|e| e.sequence));
        // More decisions land between pages.
        decide(&app, &coordinator, &auditor, 2).await;
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    assert_eq!(seen, (1..=20).rev().collect::<Vec<u64>>());
}

#[tokio::test]
async fn a_flipped_byte_is_named_by_sequence() {
    let (app, auditor) = logged_app(12).await;
    tamper(
        &app,
        &["UPDATE audit_log SET record = replace(record, '\"decided_at\":', '\"decided_at\":1') WHERE sequence = 7"],
    )
    .await;
    let report = verify(&mut audit(&app, &auditor).await, None).await;
    assert!(!report.ok);
    assert_eq!(
        (report.first_invalid_sequence, report.failure),
        (7, VerifyFailure::Altered as i32),
        "{report:?}"
    );
    assert_eq!(
        report.entries_checked, 8,
        "stops after the entry that proves it"
    );
}

#[tokio::test]
async fn a_deleted_row_is_named_as_missing() {
    let (app, auditor) = logged_app(12).await;
    tamper(&app, &["DELETE FROM audit_log WHERE sequence = 5"]).await;
    let report = verify(&mut audit(&app, &auditor).await, None).await;
    assert_fails_at(&report, 5, VerifyFailure::Missing);
}

#[tokio::test]
async fn two_swapped_rows_are_named_as_reordered() {
    let (app, auditor) = logged_app(12).await;
    tamper(
        &app,
        &[
            "UPDATE audit_log SET sequence = -9 WHERE sequence = 9",
            "UPDATE audit_log SET sequence = 9 WHERE sequence = 10",
            "UPDATE audit_log SET sequence = 10 WHERE sequence = -9",
        ],
    )
    .await;
    let report = verify(&mut audit(&app, &auditor).await, None).await;
    assert_fails_at(&report, 9, VerifyFailure::Reordered);
}

#[tokio::test]
async fn a_truncated_tail_is_caught_against_a_checkpoint() {
    let (app, auditor) = logged_app(12).await;
    let mut client = audit(&app, &auditor).await;
    let checkpoint = checkpoint(&mut client, true).await;
    assert_eq!(checkpoint.size, 12);
    assert!(verify(&mut client, Some(checkpoint.clone())).await.ok);

    tamper(&app, &["DELETE FROM audit_log WHERE sequence > 9"]).await;
    assert!(
        verify(&mut client, None).await.ok,
        "a chain alone cannot see a cut tail"
    );
    let report = verify(&mut client, Some(checkpoint)).await;
    assert_fails_at(&report, 10, VerifyFailure::Truncated);
}

#[tokio::test]
async fn a_checkpoint_verifies_under_the_service_key_and_fails_after_one_changed_byte() {
    let (app, auditor) = logged_app(6).await;
    let mut client = audit(&app, &auditor).await;
    let checkpoint = checkpoint(&mut client, false).await;
    let key = test_signing_key().public_hex();
    assert_eq!(checkpoint.public_key, key);
    let signed = checkpoint_from_proto(checkpoint.clone());
    assert_eq!(signed.verify(&key), Ok(()));
    let report = verify(&mut client, None).await;
    assert_eq!((signed.size, &signed.head_digest), (6, &report.head_digest));

    let mut changed = checkpoint.clone();
    changed.head_digest.replace_range(
        0..1,
        if changed.head_digest.starts_with('a') {
            "b"
        } else {
            "a"
        },
    );
    assert!(checkpoint_from_proto(changed.clone()).verify(&key).is_err());
    let report = verify(&mut client, Some(changed)).await;
    assert_eq!(
        (report.ok, report.failure),
        (false, VerifyFailure::BadSignature as i32),
        "{report:?}"
    );

    let mut foreign = checkpoint;
    foreign.tenant = "other".into();
    assert_code(
        client
            .verify_log(VerifyLogRequest {
                checkpoint: Some(foreign),
            })
            .await,
        Code::InvalidArgument,
    );
}

#[tokio::test]
async fn the_database_refuses_to_change_decisions_log_entries_checkpoints_or_sop_versions() {
    let (app, auditor) = logged_app(3).await;
    checkpoint(&mut audit(&app, &auditor).await, true).await;
    let db = app.raw_db().await;
    for statement in [
        "UPDATE decisions SET reason = 'nothing to see'",
        "DELETE FROM decisions",
        "UPDATE audit_log SET record = '{}'",
        "DELETE FROM audit_log",
        "UPDATE audit_checkpoints SET size = 0",
        "DELETE FROM audit_checkpoints",
        "UPDATE sop_versions SET rollback_path = 'none'",
        "DELETE FROM sop_versions",
    ] {
        let error = sqlx::query(statement).execute(&db).await.unwrap_err();
        assert!(
            error.to_string().contains("append-only"),
            "{statement}: {error}"
        );
    }
}

#[tokio::test]
async fn the_log_is_for_auditors_and_admins_of_its_own_tenant_only() {
    let (app, auditor) = logged_app(4).await;
    let admin = app.key("acme", Role::Admin).await;
    assert_eq!(
        all_pages(
            &mut audit(&app, &admin).await,
            ListDecisionsRequest::default()
        )
        .await
        .len(),
        4
    );
    for role in [Role::Coordinator, Role::Oncall] {
        let key = app.key("acme", role).await;
        assert_code(
            audit(&app, &key)
                .await
                .list_decisions(ListDecisionsRequest::default())
                .await,
            Code::PermissionDenied,
        );
        assert_code(
            audit(&app, &key)
                .await
                .verify_log(VerifyLogRequest::default())
                .await,
            Code::PermissionDenied,
        );
    }

    let theirs = all_pages(
        &mut audit(&app, &auditor).await,
        ListDecisionsRequest::default(),
    )
    .await;
    let other = app.key("globex", Role::Auditor).await;
    let mut other = audit(&app, &other).await;
    assert!(
        all_pages(&mut other, ListDecisionsRequest::default())
            .await
            .is_empty()
    );
    assert_code(
        other
            .get_decision(GetDecisionRequest {
                proposal_id: theirs[0].proposal_id.clone(),
            })
            .await,
        Code::NotFound,
    );
    let report = verify(&mut other, None).await;
    assert_eq!((report.ok, report.entries_checked), (true, 0));
}

#[tokio::test]
async fn bad_paging_input_is_refused_with_the_field_named() {
    let (app, auditor) = logged_app(1).await;
    let mut client = audit(&app, &auditor).await;
    let status = assert_code(
        client
            .list_decisions(ListDecisionsRequest {
                page_size: 1001,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().contains("page_size"), "{status:?}");
    let status = assert_code(
        client
            .list_decisions(ListDecisionsRequest {
                page_token: "not-a-token".into(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().contains("page_token"), "{status:?}");
    let status = assert_code(
        client.get_decision(GetDecisionRequest::default()).await,
        Code::InvalidArgument,
    );
    assert!(status.message().contains("proposal_id"), "{status:?}");
}

/// An agent credential sees the terse view of every decision, whatever its
/// role: the log's reads give it no reason, gate details, missing gates,
/// summary or record JSON (which holds them all), as `AwaitDecision` gives it none.
#[tokio::test]
async fn an_agent_credential_reading_the_log_sees_only_the_terse_view() {
    let (app, auditor) = logged_app(6).await;
    let people = all_pages(
        &mut audit(&app, &auditor).await,
        ListDecisionsRequest::default(),
    )
    .await;
    let rejected = people
        .iter()
        .find(|e| e.decision.as_ref().unwrap().outcome == v1::DecisionOutcome::Reject as i32)
        .expect("an unknown target is rejected");
    let full = rejected.decision.as_ref().unwrap();
    assert!(
        !full.reason.is_empty() && !full.missing_gates.is_empty() && !full.gates.is_empty(),
        "people see the reason: {full:?}"
    );
    assert!(rejected.record_json.contains(&full.reason));

    for role in [Role::Auditor, Role::Admin] {
        let agent = app.agent_key("acme", role).await;
        let mut client = audit(&app, &agent).await;
        let listed = all_pages(&mut client, ListDecisionsRequest::default()).await;
        let got = client
            .get_decision(GetDecisionRequest {
                proposal_id: rejected.proposal_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(listed.len(), people.len(), "{role}");
        for entry in listed.iter().chain([&got]) {
            let d = entry.decision.as_ref().unwrap();
            assert!(
                d.reason.is_empty()
                    && d.gates.is_empty()
                    && d.missing_gates.is_empty()
                    && d.summary.is_empty(),
                "{role}: {d:?}"
            );
            assert_eq!(entry.record_json, "", "{role}: the record holds the reason");
        }
        let terse = got.decision.unwrap();
        assert_eq!(terse.outcome, v1::DecisionOutcome::Reject as i32);
        assert_eq!(terse.agent_message, full.agent_message);
        assert!(terse.agent_message.contains("Do not retry"), "{terse:?}");
        assert_eq!(
            (got.sequence, &got.digest),
            (rejected.sequence, &rejected.digest)
        );
    }
}

/// The chain covers the record; the store keeps copies of its fields that
/// queries filter on and callers are answered from. A copy changed under
/// the store (the chain untouched) is named by sequence and column.
#[tokio::test]
async fn a_flipped_filter_column_is_a_mismatch_named_by_sequence_and_column() {
    let (app, auditor) = logged_app(9).await;
    let mut client = audit(&app, &auditor).await;
    let rejected = all_pages(
        &mut client,
        ListDecisionsRequest {
            outcome: v1::DecisionOutcome::Reject as i32,
            ..Default::default()
        },
    )
    .await;
    let victim = rejected.last().expect("a rejection").sequence;
    tamper(
        &app,
        &[&format!(
            "UPDATE audit_log SET outcome = 'approve' WHERE sequence = {victim}"
        )],
    )
    .await;
    let approved = all_pages(
        &mut client,
        ListDecisionsRequest {
            outcome: v1::DecisionOutcome::Approve as i32,
            ..Default::default()
        },
    )
    .await;
    assert!(
        approved.iter().any(|e| e.sequence == victim),
        "the flipped column is what the filter reads"
    );
    let report = verify(&mut client, None).await;
    assert_fails_at(&report, victim, VerifyFailure::Mismatch);
    assert_eq!(report.column, "audit_log.outcome", "{report:?}");
    assert!(report.detail.contains("audit_log.outcome"), "{report:?}");
}

/// A decision row and its proposal's state flipped to approved make
/// `AwaitDecision` answer APPROVED; the log names the entry they disagree with.
#[tokio::test]
async fn a_flipped_decision_row_is_a_mismatch_though_the_chain_holds() {
    let (app, auditor) = logged_app(9).await;
    let mut client = audit(&app, &auditor).await;
    let rejected = all_pages(
        &mut client,
        ListDecisionsRequest {
            outcome: v1::DecisionOutcome::Reject as i32,
            ..Default::default()
        },
    )
    .await;
    let victim = rejected.last().expect("a rejection");
    let db = app.raw_db().await;
    for statement in [
        "DROP TRIGGER decisions_are_append_only_update".to_owned(),
        format!(
            "UPDATE decisions SET outcome = 'approve' WHERE proposal_id = '{}'",
            victim.proposal_id
        ),
        format!(
            "UPDATE proposals SET state = 'approved' WHERE id = '{}'",
            victim.proposal_id
        ),
    ] {
        sqlx::query(&statement).execute(&db).await.unwrap();
    }
    let coordinator = app.key("acme", Role::Coordinator).await;
    let answered = app
        .await_decision(&coordinator, &victim.proposal_id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answered.state, v1::ProposalState::Approved as i32);

    let report = verify(&mut client, None).await;
    assert_fails_at(&report, victim.sequence, VerifyFailure::Mismatch);
    assert_eq!(report.column, "decisions.outcome", "{report:?}");

    // The decision row alone put back: the proposal's state still disagrees.
    sqlx::query(&format!(
        "UPDATE decisions SET outcome = 'reject' WHERE proposal_id = '{}'",
        victim.proposal_id
    ))
    .execute(&db)
    .await
    .unwrap();
    let report = verify(&mut client, None).await;
    assert_fails_at(&report, victim.sequence, VerifyFailure::Mismatch);
    assert_eq!(report.column, "proposals.state", "{report:?}");
}

/// A refresh signs a checkpoint only when the log grew since the newest one;
/// otherwise that one answers, and nothing is stored.
#[tokio::test]
async fn a_refresh_of_an_unchanged_log_answers_the_newest_checkpoint_and_stores_none() {
    let (app, auditor) = logged_app(3).await;
    let mut client = audit(&app, &auditor).await;
    let first = checkpoint(&mut client, true).await;
    assert_eq!(first.size, 3);
    for _ in 0..3 {
        assert_eq!(checkpoint(&mut client, true).await, first);
    }
    let db = app.raw_db().await;
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_checkpoints")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stored, 1);

    let coordinator = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.target = "ghost-new".into();
    let id = app.submit_id(&coordinator, spec).await;
    app.await_decision(&coordinator, &id, Duration::from_secs(20))
        .await
        .unwrap();
    wait_for_log(&app, &auditor, &id).await;
    let grown = checkpoint(&mut client, true).await;
    assert_eq!(grown.size, 4);
    assert_ne!(grown.signature, first.signature);
    assert_eq!(checkpoint(&mut client, false).await, grown);
}
