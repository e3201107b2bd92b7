//! Signed receipts on approvals: bound to the approved spec, the tenant and
//! the proposal, verified under the checkpoint key; nothing else carries one.

use std::time::Duration;

use countersign_domain::{
    Role,
    receipt::{DEFAULT_RECEIPT_TTL_MS, Expected},
};
use countersign_proto::{
    convert::{receipt_from_proto, spec_from_proto},
    v1::{self, ProposalState},
};
use countersign_test_support::app::test_signing_key;

use crate::escalation_support::{Backend, on_both_backends};
use crate::helpers::{TestApp, valid_spec};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn an_approval_carries_a_receipt_for_exactly_its_spec_and_a_rejection_none() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let spec = valid_spec();
    let digest = spec_from_proto(spec.clone()).unwrap().digest();
    let id = app.submit_id(&key, spec).await;
    let approved = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(approved.state, ProposalState::Approved as i32);
    let decision = approved.decision.unwrap();
    let receipt = receipt_from_proto(decision.receipt.clone().expect("an approval's receipt"));
    let public = test_signing_key().public_hex();
    let expected = Expected {
        tenant: "acme",
        spec_digest: &digest,
        proposal_id: Some(&id),
    };
    let decided_at = countersign_proto::convert::millis(decision.decided_at.as_ref().unwrap());
    assert_eq!(receipt.decided_at, decided_at);
    assert_eq!(receipt.expires_at, decided_at + DEFAULT_RECEIPT_TTL_MS);
    assert_eq!(receipt.verify(&public, &expected, decided_at + 1), Ok(()));
    assert!(
        receipt
            .verify(&public, &expected, receipt.expires_at)
            .is_err()
    );
    let other = Expected {
        tenant: "other",
        ..expected
    };
    assert!(receipt.verify(&public, &other, decided_at + 1).is_err());

    // The same receipt from GetProposal, and for an agent credential, which
    // runs operations on it.
    let fetched = app.get(&key, &id).await.unwrap().decision.unwrap().receipt;
    assert_eq!(fetched, decision.receipt);
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let seen_by_agent = app.get(&agent, &id).await.unwrap().decision.unwrap();
    assert_eq!(seen_by_agent.receipt, decision.receipt);
    assert!(seen_by_agent.reason.is_empty(), "agents stay terse");

    let mut doomed = valid_spec();
    doomed.target = "node-unknown".into();
    let id = app.submit_id(&key, doomed).await;
    let rejected = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(rejected.state, ProposalState::Rejected as i32);
    assert_eq!(rejected.decision.unwrap().receipt, None);
}

/// The next notification of `id` whose event is `kind`.
async fn next_of(
    stream: &mut tonic::Streaming<v1::Notification>,
    id: &str,
    kind: v1::EventKind,
) -> v1::Notification {
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("a notification in time")
            .expect("the stream stays healthy")
            .expect("the stream stays open");
        if n.event == kind as i32 && n.proposal.as_ref().is_some_and(|p| p.id == id) {
            return n;
        }
    }
}

#[tokio::test]
async fn an_approvals_notification_carries_its_receipt_live_and_replayed_for_every_watcher() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let mut live = app.watch(&key, v1::WatchRequest::default()).await.unwrap();
    let mut live_agent = app
        .watch(&agent, v1::WatchRequest::default())
        .await
        .unwrap();

    let spec = valid_spec();
    let digest = spec_from_proto(spec.clone()).unwrap().digest();
    let id = app.submit_id(&key, spec).await;
    let approved = app.await_decision(&key, &id, WAIT).await.unwrap();
    let receipt = approved.decision.unwrap().receipt.expect("a receipt");

    let mut replay = app
        .watch(
            &key,
            v1::WatchRequest {
                after_cursor: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let expected = Expected {
        tenant: "acme",
        spec_digest: &digest,
        proposal_id: Some(&id),
    };
    for stream in [&mut live, &mut live_agent, &mut replay] {
        let n = next_of(stream, &id, v1::EventKind::Approved).await;
        let decision = n.proposal.unwrap().decision.unwrap();
        let shown = decision.receipt.expect("the approval's receipt");
        assert_eq!(shown, receipt, "the receipt GetProposal shows");
        let shown = receipt_from_proto(shown);
        assert_eq!(
            shown.verify(
                &test_signing_key().public_hex(),
                &expected,
                shown.decided_at
            ),
            Ok(())
        );
    }

    // A rejection's notification carries none.
    let mut doomed = valid_spec();
    doomed.target = "node-unknown".into();
    let id = app.submit_id(&key, doomed).await;
    let n = next_of(&mut live, &id, v1::EventKind::Rejected).await;
    assert_eq!(n.proposal.unwrap().decision.unwrap().receipt, None);
}

on_both_backends!(a_tenants_receipt_lifetime_is_its_policy);

async fn a_tenants_receipt_lifetime_is_its_policy(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    app.seed_reference("acme").await;
    // Set before the tenant's first call, so no cached policy is in the way.
    let mut policy = app.store.get_tenant("acme").await.unwrap().unwrap().policy;
    policy.receipt_ttl_ms = 60_000;
    app.store.set_tenant_policy("acme", policy).await.unwrap();
    let key = app.key("acme", Role::Coordinator).await;
    let mut live = app.watch(&key, v1::WatchRequest::default()).await.unwrap();

    let id = app.submit_id(&key, valid_spec()).await;
    let approved = app.await_decision(&key, &id, WAIT).await.unwrap();
    let receipt = receipt_from_proto(approved.decision.unwrap().receipt.unwrap());
    assert_eq!(receipt.expires_at, receipt.decided_at + 60_000);
    let fetched = app.get(&key, &id).await.unwrap().decision.unwrap().receipt;
    assert_eq!(fetched.map(receipt_from_proto), Some(receipt.clone()));
    let n = next_of(&mut live, &id, v1::EventKind::Approved).await;
    let watched = n.proposal.unwrap().decision.unwrap().receipt.unwrap();
    assert_eq!(receipt_from_proto(watched), receipt);
}
