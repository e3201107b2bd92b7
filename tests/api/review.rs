//! Proposals reviewed end to end against the five gates.

use std::time::Duration;

use countersign_domain::Role;
use countersign_proto::v1::{self, DecisionOutcome, ProposalState};
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_covered_proposal_on_an_online_target_is_approved_citing_its_sop() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    let p = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32);
    let d = p.decision.unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Approve as i32);
    assert_eq!((d.sop_id.as_str(), d.sop_version), ("SOP-007", 1));
    assert_eq!(d.rollback_path, "systemctl start nginx");
    let gates: Vec<_> = d
        .gates
        .iter()
        .map(|g| (g.gate.as_str(), g.passed))
        .collect();
    assert_eq!(
        gates,
        [
            ("sop", true),
            ("target_state", true),
            ("no_parallel_operation", true),
            ("rollback", true),
            ("blast_radius", true)
        ]
    );
    assert!(d.missing_gates.is_empty());
    assert!(
        d.summary.starts_with("Decision: approve\n"),
        "{}",
        d.summary
    );
    assert!(d.reviewer.starts_with("test/"), "{}", d.reviewer);
    let events: Vec<_> = app
        .proposal_events("acme", &id)
        .await
        .into_iter()
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(events, ["SUBMITTED", "REVIEW_STARTED", "APPROVED"]);
}

#[tokio::test]
async fn a_rejection_lists_every_missing_gate_with_its_reason() {
    let app = TestApp::spawn_reviewing(2).await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.blast_radius = v1::BlastRadius::Cluster as i32;
    let id = app.submit_id(&key, spec).await;
    let p = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Rejected as i32);
    let d = p.decision.unwrap();
    assert_eq!(
        d.missing_gates,
        [
            "sop",
            "target_state",
            "no_parallel_operation",
            "rollback",
            "blast_radius"
        ]
    );
    assert!(
        d.reason.contains("no SOP for action host_restart_service"),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("target node-01 is unknown"),
        "{}",
        d.reason
    );
    assert!(d.summary.starts_with("Decision: reject\n"), "{}", d.summary);
}

#[tokio::test]
async fn an_overlapping_operation_is_told_to_wait_for_the_approved_one() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let first = app.submit_id(&key, valid_spec()).await;
    app.await_decision(&key, &first, WAIT).await.unwrap();
    let second = app.submit_id(&key, valid_spec()).await;
    let d = app
        .await_decision(&key, &second, WAIT)
        .await
        .unwrap()
        .decision
        .unwrap();
    assert_eq!(d.missing_gates, ["no_parallel_operation"]);
    assert!(
        d.reason.contains(&format!("wait for {first}")),
        "{}",
        d.reason
    );
    // Another device in the same cluster is a different single-device scope.
    let mut other = valid_spec();
    other.target = "node-02".into();
    let third = app.submit_id(&key, other).await;
    let p = app.await_decision(&key, &third, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32);
}

#[tokio::test]
async fn an_agent_credential_sees_only_the_terse_message() {
    let app = TestApp::spawn_reviewing(1).await;
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let human = app.key("acme", Role::Oncall).await;
    let id = app.submit_id(&agent, valid_spec()).await;
    for p in [
        app.await_decision(&agent, &id, WAIT).await.unwrap(),
        app.get(&agent, &id).await.unwrap(),
    ] {
        let d = p.decision.unwrap();
        assert_eq!(p.state, ProposalState::Rejected as i32);
        assert!(
            d.reason.is_empty()
                && d.gates.is_empty()
                && d.missing_gates.is_empty()
                && d.summary.is_empty(),
            "{d:?}"
        );
        assert!(d.agent_message.contains("Do not retry"), "{d:?}");
        assert!(!d.agent_message.contains("SOP"), "{d:?}");
    }
    let d = app.get(&human, &id).await.unwrap().decision.unwrap();
    assert!(d.reason.contains("no SOP"), "{d:?}");
    assert_eq!(d.gates.len(), 5);
}

#[tokio::test]
async fn await_ends_with_deadline_exceeded_and_the_proposal_stays_pending() {
    let app = TestApp::spawn().await; // no reviewers
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    assert_code(
        app.await_decision(&key, &id, Duration::from_millis(300))
            .await,
        Code::DeadlineExceeded,
    );
    let p = app.get(&key, &id).await.unwrap();
    assert_eq!(p.state, ProposalState::Pending as i32);
    assert!(p.decision.is_none());
}

#[tokio::test]
async fn await_of_a_cancelled_proposal_returns_it_without_a_decision() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    let waiter = tokio::time::timeout(WAIT, app.await_decision(&key, &id, WAIT));
    let (awaited, _) = tokio::join!(waiter, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.cancel(&key, &id).await.unwrap()
    });
    let p = awaited.unwrap().unwrap();
    assert_eq!(p.state, ProposalState::Cancelled as i32);
    assert!(p.decision.is_none());
}

#[tokio::test]
async fn force_approve_no_sop_needs_the_tenants_permission() {
    let app = TestApp::spawn_reviewing(1).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.action = "clear_cache".into();
    spec.force_approve_no_sop = true;
    let id = app.submit_id(&key, spec.clone()).await;
    let d = app
        .await_decision(&key, &id, WAIT)
        .await
        .unwrap()
        .decision
        .unwrap();
    assert_eq!(d.missing_gates, ["sop", "blast_radius"]);
    assert!(
        d.reason.contains("not allowed for this tenant"),
        "{}",
        d.reason
    );

    let mut policy = app.store.get_tenant("acme").await.unwrap().unwrap().policy;
    policy.allow_force_approve_no_sop = true;
    policy.parallel_window_ms = 0;
    app.store.set_tenant_policy("acme", policy).await.unwrap();
    // The API reads policy through its credential cache (1 s): once it sees the
    // change, the earlier rejection no longer answers this identical call.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let id = app.submit_id(&key, spec).await;
    let p = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
    let d = p.decision.unwrap();
    assert!(
        d.gates[0].detail.contains("force_approve_no_sop stands in"),
        "{:?}",
        d.gates[0]
    );
    assert_eq!(d.rollback_path, "systemctl start nginx");
}

#[tokio::test]
async fn a_cluster_proposal_on_a_target_without_a_cluster_label_fails_no_parallel_operation() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    app.store
        .put_sop(
            "acme",
            countersign_domain::reference::SopInput {
                id: "SOP-020".into(),
                action: "drain_node".into(),
                title: "Drain a node".into(),
                covers: "a node to be taken out".into(),
                rollback_path: "uncordon the node".into(),
                max_blast_radius: countersign_domain::BlastRadius::Cluster,
                selector: [("env".to_owned(), "production".to_owned())].into(),
            },
        )
        .await
        .unwrap();
    app.store
        .put_target(
            "acme",
            "node-05",
            countersign_domain::TargetStatus::Online,
            [("env".to_owned(), "production".to_owned())].into(),
        )
        .await
        .unwrap();
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.action = "drain_node".into();
    spec.target = "node-05".into();
    spec.blast_radius = v1::BlastRadius::Cluster as i32;
    let id = app.submit_id(&key, spec.clone()).await;
    let p = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Rejected as i32, "{:?}", p.decision);
    let d = p.decision.unwrap();
    assert_eq!(d.missing_gates, ["no_parallel_operation"]);
    let gate = d
        .gates
        .iter()
        .find(|g| g.gate == "no_parallel_operation")
        .unwrap();
    assert_eq!(
        gate.detail,
        "target has no cluster label: the operation's scope is unknown"
    );

    // The same on a target in a cluster is approved.
    spec.target = "node-03".into();
    let id = app.submit_id(&key, spec).await;
    let p = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
}
