use countersign_domain::Role;
use countersign_proto::v1::{CancelProposalRequest, ProposalState};
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

#[tokio::test]
async fn a_pending_proposal_can_be_cancelled_once() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;

    let cancelled = app.cancel(&key, &id).await.unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled as i32);
    assert_eq!(cancelled.cancel_reason, "no longer needed");
    assert_eq!(
        app.get(&key, &id).await.unwrap().state,
        ProposalState::Cancelled as i32
    );

    let again = assert_code(app.cancel(&key, &id).await, Code::FailedPrecondition);
    assert!(again.message().contains("cancelled"), "{again:?}");
}

#[tokio::test]
async fn cancel_needs_an_id_and_a_bounded_reason() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut client = app.client(&key).await;
    let status = assert_code(
        client
            .cancel_proposal(CancelProposalRequest {
                id: String::new(),
                reason: String::new(),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("id:"), "{status:?}");
    let id = app.submit_id(&key, valid_spec()).await;
    let status = assert_code(
        client
            .cancel_proposal(CancelProposalRequest {
                id: id.clone(),
                reason: "x".repeat(4097),
            })
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().starts_with("reason:"), "{status:?}");
    assert_eq!(
        app.get(&key, &id).await.unwrap().state,
        ProposalState::Pending as i32
    );
}

#[tokio::test]
async fn a_coordinator_cancels_only_what_its_own_key_submitted() {
    let app = TestApp::spawn().await;
    // Two coordinator keys with the same label: ownership is by key.
    let mine = app.key("acme", Role::Coordinator).await;
    let theirs = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&mine, valid_spec()).await;

    let denied = assert_code(app.cancel(&theirs, &id).await, Code::PermissionDenied);
    assert!(
        denied
            .message()
            .contains("a coordinator may cancel only the proposals its own key submitted"),
        "{denied:?}"
    );
    assert_eq!(
        app.get(&theirs, &id).await.unwrap().state,
        ProposalState::Pending as i32,
        "visible to it, and unchanged"
    );
    let cancelled = app.cancel(&mine, &id).await.unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled as i32);
    assert_code(app.cancel(&theirs, &id).await, Code::PermissionDenied);
}
