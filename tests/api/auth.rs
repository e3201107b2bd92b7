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

#[tokio::test]
async fn two_authorization_headers_are_refused_like_a_malformed_key() {
    let app = TestApp::spawn().await;
    let real = app.key("acme", Role::Coordinator).await;
    let other = app.key("acme", Role::Admin).await;
    let unknown = format!("cs_{}_{}", "0".repeat(16), "a".repeat(64));
    for (first, second) in [
        (real.clone(), real.clone()),
        (real.clone(), other.clone()),
        (real.clone(), unknown.clone()),
        (unknown, real.clone()),
    ] {
        let twice = move |mut request: tonic::Request<()>| {
            for key in [&first, &second] {
                request
                    .metadata_mut()
                    .append("authorization", format!("Bearer {key}").parse().unwrap());
            }
            Ok(request)
        };
        let mut client =
            countersign_proto::v1::proposal_service_client::ProposalServiceClient::with_interceptor(
                app.channel().await,
                twice,
            );
        let status = assert_code(
            client
                .get_proposal(countersign_proto::v1::GetProposalRequest { id: "x".into() })
                .await,
            Code::Unauthenticated,
        );
        assert_eq!(status.message(), ONE_ANSWER);
    }
    // One header of the same key is served.
    let status = assert_code(app.get(&real, "x").await, Code::NotFound);
    assert!(status.message().contains('x'), "{status:?}");
}

#[tokio::test]
async fn refused_credentials_past_the_limit_are_resource_exhausted_and_valid_keys_still_work() {
    use std::num::NonZeroU32;
    let app = TestApp::spawn_with(|c| {
        c.refused_credentials = countersign_api::RateLimit {
            per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
        }
    })
    .await;
    let valid = app.key("acme", Role::Coordinator).await;
    let unknown = format!("Bearer cs_{}_{}", "0".repeat(16), "a".repeat(64));
    let client = app.raw_client(Some(&unknown)).await;
    let call = || {
        let mut client = client.clone();
        async move {
            client
                .get_proposal(countersign_proto::v1::GetProposalRequest { id: "x".into() })
                .await
        }
    };
    // The burst is answered as any refusal is.
    for _ in 0..3 {
        let status = assert_code(call().await, Code::Unauthenticated);
        assert_eq!(status.message(), ONE_ANSWER);
    }
    // Past it (one more a second), refusals are told to slow down.
    let mut exhausted = None;
    for _ in 0..100 {
        match call().await {
            Err(status) if status.code() == Code::ResourceExhausted => {
                exhausted = Some(status);
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::Unauthenticated, "{status:?}"),
            Ok(answer) => panic!("an unknown key was served: {answer:?}"),
        }
    }
    let status = exhausted.expect("refusals past the limit are RESOURCE_EXHAUSTED");
    assert!(
        status.message().contains("refused credentials"),
        "{status:?}"
    );
    // A valid key from the same address is served all along.
    app.submit(&valid, valid_spec())
        .await
        .expect("a valid key is not held to the refusals");
    let status = assert_code(app.get(&valid, "x").await, Code::NotFound);
    assert!(status.message().contains('x'), "{status:?}");
}

#[tokio::test]
async fn only_the_public_rpcs_in_the_table_go_without_a_credential() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    // A method the health service does not have is no public RPC: it needs a
    // credential like any path not in the table.
    for path in [
        "/grpc.health.v1.Health/Nope",
        "/countersign.v1.ProposalService/Nope",
    ] {
        let refused =
            crate::service::raw_call(app.channel().await, "not-a-key", path, vec![]).await;
        assert_eq!(refused.code(), Code::Unauthenticated, "{path}: {refused:?}");
        assert_eq!(refused.message(), ONE_ANSWER);
        let unknown = crate::service::raw_call(app.channel().await, &key, path, vec![]).await;
        assert_eq!(unknown.code(), Code::Unimplemented, "{path}: {unknown:?}");
    }
}
