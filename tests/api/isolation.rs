use countersign_domain::Role;
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

#[tokio::test]
async fn another_tenants_proposal_is_not_found_exactly_like_a_missing_one() {
    let app = TestApp::spawn().await;
    let a = app.key("tenant-a", Role::Admin).await;
    let b = app.key("tenant-b", Role::Admin).await;
    let id = app.submit_id(&a, valid_spec()).await;

    let foreign_get = assert_code(app.get(&b, &id).await, Code::NotFound);
    let missing_get = assert_code(
        app.get(&b, "01ZZZZZZZZZZZZZZZZZZZZZZZZ").await,
        Code::NotFound,
    );
    assert_eq!(
        foreign_get.message().replace(&id, "ID"),
        missing_get
            .message()
            .replace("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID")
    );

    let foreign_cancel = assert_code(app.cancel(&b, &id).await, Code::NotFound);
    let missing_cancel = assert_code(
        app.cancel(&b, "01ZZZZZZZZZZZZZZZZZZZZZZZZ").await,
        Code::NotFound,
    );
    assert_eq!(
        foreign_cancel.message().replace(&id, "ID"),
        missing_cancel
            .message()
            .replace("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID")
    );

    // Tenant A's proposal is untouched.
    let mine = app.get(&a, &id).await.unwrap();
    assert_eq!(
        mine.state,
        countersign_proto::v1::ProposalState::Pending as i32
    );
    assert_eq!(mine.tenant, "tenant-a");
}

#[tokio::test]
async fn an_idempotency_key_does_not_leak_across_tenants() {
    let app = TestApp::spawn().await;
    let a = app.key("tenant-a", Role::Coordinator).await;
    let b = app.key("tenant-b", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.idempotency_key = "shared-key".into();
    let from_a = app.submit(&a, spec.clone()).await.unwrap();
    spec.reason = "a different reason".into();
    let from_b = app.submit(&b, spec).await.unwrap();
    assert!(!from_b.deduplicated);
    assert_ne!(from_a.proposal.unwrap().id, from_b.proposal.unwrap().id);
}
