use countersign_domain::Role;
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

#[tokio::test]
async fn the_same_key_and_spec_return_the_same_proposal() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.idempotency_key = "restart-nginx-inc-7".into();
    let first = app.submit(&key, spec.clone()).await.unwrap();
    assert!(!first.deduplicated);
    let second = app.submit(&key, spec).await.unwrap();
    assert!(second.deduplicated);
    assert_eq!(first.proposal.unwrap().id, second.proposal.unwrap().id);
}

#[tokio::test]
async fn the_same_key_with_another_spec_already_exists() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.idempotency_key = "k".into();
    let first = app
        .submit(&key, spec.clone())
        .await
        .unwrap()
        .proposal
        .unwrap();
    spec.target = "node-02".into();
    let status = assert_code(app.submit(&key, spec).await, Code::AlreadyExists);
    assert!(status.message().contains("idempotency_key"), "{status:?}");
    assert!(status.message().contains(&first.id), "{status:?}");
}

#[tokio::test]
async fn without_a_key_every_submission_is_a_new_proposal() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let a = app.submit(&key, valid_spec()).await.unwrap();
    let b = app.submit(&key, valid_spec()).await.unwrap();
    assert!(!a.deduplicated && !b.deduplicated);
    assert_ne!(a.proposal.unwrap().id, b.proposal.unwrap().id);
}

#[tokio::test]
async fn a_key_is_honoured_before_a_cached_rejection_answers() {
    let app = crate::suppression::app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = crate::suppression::doomed();
    spec.idempotency_key = "restart-nginx-inc-9".into();
    // Rejected, and cached: the same call without the key is suppressed.
    let first = crate::suppression::rejected(&app, &key, spec.clone()).await;

    // The key with another spec (the same call to the cache): a conflict.
    let mut reworded = spec.clone();
    reworded.reason = "reworded, with the same key".into();
    let status = assert_code(app.submit(&key, reworded).await, Code::AlreadyExists);
    assert!(status.message().contains("idempotency_key"), "{status:?}");
    assert!(status.message().contains(&first), "{status:?}");

    // The key with its own spec: that proposal, deduplicated, not suppressed.
    let again = app.submit(&key, spec).await.unwrap();
    assert!(again.deduplicated && !again.suppressed, "{again:?}");
    let p = again.proposal.unwrap();
    assert_eq!(p.id, first);
    assert_eq!(
        p.state,
        countersign_proto::v1::ProposalState::Rejected as i32
    );
}
