//! `TestApp` is built by the composition root `serve` runs
//! (`countersign::app`): what `serve` does on a first start happens here too,
//! the worker role serves health alone, and the production backends (the
//! store's outbox feeding the Redis queue) run behind the same root.

use std::time::Duration;

use countersign::{
    app::{App, Settings},
    config::Role as ServeRole,
};
use countersign_domain::Role;
use countersign_proto::v1::ProposalState;
use countersign_test_support::{
    app::{TestApp, test_config, test_reviewers},
    postgres::TestDatabase,
    redis,
};
use tokio_util::sync::CancellationToken;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::helpers::valid_spec;

#[tokio::test]
async fn a_first_start_creates_the_default_tenant_and_writes_its_admin_key_which_the_api_accepts() {
    let app = TestApp::spawn().await;
    let tenants = app.store.list_tenants().await.unwrap();
    assert!(tenants.iter().any(|t| t.name == "default"), "{tenants:?}");
    let admin_key = std::fs::read_to_string(app.data_dir().join("admin.key")).unwrap();
    let id = app.submit_id(admin_key.trim(), valid_spec()).await;
    assert_eq!(
        app.get(admin_key.trim(), &id).await.unwrap().state,
        ProposalState::Pending as i32
    );
}

#[tokio::test]
async fn the_worker_role_serves_health_alone_and_stops_when_drained() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.role = ServeRole::Worker;
    config.review.workers = Some(1);
    let shutdown = CancellationToken::new();
    let app = App::build(Settings::new(config), &shutdown).await.unwrap();
    let endpoint = format!("http://{}", app.local_addr());
    let draining = shutdown.child_token();
    let running = tokio::spawn(app.run_until_stopped(draining.clone()));
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    let proposals =
        countersign_proto::v1::proposal_service_client::ProposalServiceClient::new(channel)
            .get_proposal(countersign_proto::v1::GetProposalRequest { id: "p".into() })
            .await;
    assert_eq!(proposals.unwrap_err().code(), tonic::Code::Unimplemented);
    draining.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn on_postgresql_and_redis_a_submission_is_reviewed_through_the_outbox() {
    let db = TestDatabase::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.database.url = Some(db.app_url.clone());
    config.database.pool = 4;
    config.redis.url = Some(redis::url());
    config.redis.prefix = redis::prefix();
    config.outbox.poll = Duration::from_millis(20);
    let app = TestApp::from_config(config, dir, Some(test_reviewers(1)), |_| {}).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    let decided = app
        .await_decision(&key, &id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(decided.state, ProposalState::Approved as i32, "{decided:?}");
}
