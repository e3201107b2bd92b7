use countersign_domain::Role;
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

#[tokio::test]
async fn oncall_and_auditor_may_read_but_not_submit() {
    let app = TestApp::spawn().await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&coordinator, valid_spec()).await;
    for role in [Role::Oncall, Role::Auditor] {
        let key = app.key("acme", role).await;
        let status = assert_code(app.submit(&key, valid_spec()).await, Code::PermissionDenied);
        assert!(status.message().contains(role.as_str()), "{status:?}");
        assert_eq!(app.get(&key, &id).await.unwrap().id, id);
    }
    // An auditor may not cancel, and the refused cancel changed nothing.
    let auditor = app.key("acme", Role::Auditor).await;
    assert_code(app.cancel(&auditor, &id).await, Code::PermissionDenied);
    let state = app.get(&coordinator, &id).await.unwrap().state;
    assert_eq!(state, countersign_proto::v1::ProposalState::Pending as i32);
}

#[tokio::test]
async fn oncall_and_admins_cancel_any_proposal_of_their_tenant() {
    let app = TestApp::spawn().await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    for role in [Role::Oncall, Role::Admin] {
        let key = app.key("acme", role).await;
        let id = app.submit_id(&coordinator, valid_spec()).await;
        let cancelled = app.cancel(&key, &id).await.unwrap();
        assert_eq!(
            cancelled.state,
            countersign_proto::v1::ProposalState::Cancelled as i32,
            "{role}"
        );
        // Another tenant's on-call or admin does not see it at all.
        let foreign = app.key("globex", role).await;
        let other = app.submit_id(&coordinator, valid_spec()).await;
        assert_code(app.cancel(&foreign, &other).await, Code::NotFound);
    }
}

#[tokio::test]
async fn coordinators_and_admins_submit_and_cancel() {
    let app = TestApp::spawn().await;
    for role in [Role::Coordinator, Role::Admin] {
        let key = app.key("acme", role).await;
        let id = app.submit_id(&key, valid_spec()).await;
        let cancelled = app.cancel(&key, &id).await.unwrap();
        assert_eq!(
            cancelled.state,
            countersign_proto::v1::ProposalState::Cancelled as i32
        );
    }
}

#[tokio::test]
async fn an_admin_proposal_is_pending_review_like_any_other() {
    let app = TestApp::spawn().await;
    let admin = app.key("acme", Role::Admin).await;
    let proposal = app
        .submit(&admin, valid_spec())
        .await
        .unwrap()
        .proposal
        .unwrap();
    assert_eq!(
        proposal.state,
        countersign_proto::v1::ProposalState::Pending as i32
    );
    assert!(proposal.decision.is_none());
}
