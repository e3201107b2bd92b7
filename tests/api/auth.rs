use std::time::Duration;

use countersign_domain::Role;
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

const ONE_ANSWER: &str = "missing or invalid API key";

async fn refused(app: &TestApp, authorization: Option<&str>) {
    let mut client = app.raw_client(authorization).await;
    let status = assert_code(
        client
            .get_proposal(countersign_proto::v1::GetProposalRequest { id: "x".into() })
            .await,
        Code::Unauthenticated,
    );
    assert_eq!(status.message(), ONE_ANSWER, "{authorization:?}");
}

#[tokio::test]
async fn a_call_without_a_key_is_unauthenticated() {
    let app = TestApp::spawn().await;
    refused(&app, None).await;
}

#[tokio::test]
async fn malformed_unknown_and_forged_keys_get_the_same_answer() {
    let app = TestApp::spawn().await;
    let real = app.key("acme", Role::Coordinator).await;
    let mut forged = real.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let unknown = format!("cs_{}_{}", "0".repeat(16), "a".repeat(64));
    for header in [
        "Bearer ".to_owned(),
        "Bearer not-a-key".to_owned(),
        format!("Basic {real}"),
        real.clone(),
        format!("Bearer {unknown}"),
        format!("Bearer {forged}"),
    ] {
        refused(&app, Some(&header)).await;
    }
}

#[tokio::test]
async fn a_revoked_key_is_refused_like_any_other() {
    let app = TestApp::spawn_with(|c| c.credential_cache_ttl = Duration::ZERO).await;
    let key = app.key("acme", Role::Coordinator).await;
    app.submit(&key, valid_spec())
        .await
        .expect("works before revocation");
    let id = countersign_domain::api_key::parse(&key).unwrap().id;
    app.store.revoke_api_key(&id).await.unwrap();
    let status = assert_code(app.submit(&key, valid_spec()).await, Code::Unauthenticated);
    assert_eq!(status.message(), ONE_ANSWER);
}

#[tokio::test]
async fn a_cached_credential_is_refused_once_its_cache_entry_expires() {
    let ttl = Duration::from_millis(300);
    let app = TestApp::spawn_with(|c| c.credential_cache_ttl = ttl).await;
    let key = app.key("acme", Role::Coordinator).await;
    app.submit(&key, valid_spec()).await.expect("cached now");
    let id = countersign_domain::api_key::parse(&key).unwrap().id;
    app.store.revoke_api_key(&id).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let status = assert_code(app.submit(&key, valid_spec()).await, Code::Unauthenticated);
    assert_eq!(status.message(), ONE_ANSWER);
}

#[tokio::test]
async fn the_submitter_is_the_credential_not_a_request_field() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.operator = "someone-else".into();
    let proposal = app.submit(&key, spec).await.unwrap().proposal.unwrap();
    assert_eq!(proposal.submitted_by, "coordinator-of-acme");
    assert_eq!(proposal.tenant, "acme");
    assert_eq!(proposal.spec.unwrap().operator, "someone-else");
}
