//! `TestApp`: one running server with its own database, and typed calls.

use std::{net::SocketAddr, sync::Arc};

use countersign::client::BearerAuth;
use countersign_api::{ApiConfig, Application};
use countersign_domain::Role;
use countersign_proto::{
    convert::json_to_struct,
    v1::{
        self, CancelProposalRequest, GetProposalRequest, Proposal, ProposalSpec, SubmitRequest,
        SubmitResponse, proposal_service_client::ProposalServiceClient,
    },
};
use countersign_store::{DynStore, NewApiKey, SqliteStore, Store};
use tokio::sync::oneshot;
use tonic::{
    Status,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

pub type Client = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

pub struct TestApp {
    pub addr: SocketAddr,
    pub store: DynStore,
    shutdown: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    /// Starts the server on `127.0.0.1:0` after `configure` adjusts its config.
    pub async fn spawn_with(configure: impl FnOnce(&mut ApiConfig)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("countersign.db").display());
        let store = SqliteStore::connect(&url).await.expect("open store");
        store.migrate().await.expect("migrate");
        let store: DynStore = Arc::new(store);
        let mut config = ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..ApiConfig::default()
        };
        configure(&mut config);
        let app = Application::build(config, store.clone())
            .await
            .expect("bind");
        let addr = app.local_addr();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async move {
            let _ = rx.await;
        }));
        TestApp {
            addr,
            store,
            shutdown: Some(tx),
            _dir: dir,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.endpoint())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    /// Mints a key for `role` in `tenant`, creating the tenant if needed.
    pub async fn key(&self, tenant: &str, role: Role) -> String {
        self.mint(tenant, role, false).await
    }

    async fn mint(&self, tenant: &str, role: Role, agent: bool) -> String {
        if self.store.get_tenant(tenant).await.unwrap().is_none() {
            self.store.create_tenant(tenant).await.unwrap();
        }
        let (_, key) = self
            .store
            .create_api_key(NewApiKey {
                tenant: tenant.into(),
                name: format!("{role}-of-{tenant}"),
                role,
                agent,
            })
            .await
            .unwrap();
        key
    }

    /// A client that sends `authorization` exactly as given (or not at all).
    pub async fn raw_client(&self, authorization: Option<&str>) -> Client {
        let header = authorization.unwrap_or("").parse().unwrap();
        let auth = BearerAuth::raw(header, authorization.is_some());
        ProposalServiceClient::with_interceptor(self.channel().await, auth)
    }

    pub async fn client(&self, key: &str) -> Client {
        self.raw_client(Some(&format!("Bearer {key}"))).await
    }

    pub async fn submit(&self, key: &str, spec: ProposalSpec) -> Result<SubmitResponse, Status> {
        self.client(key)
            .await
            .submit(SubmitRequest { spec: Some(spec) })
            .await
            .map(|r| r.into_inner())
    }

    pub async fn get(&self, key: &str, id: &str) -> Result<Proposal, Status> {
        self.client(key)
            .await
            .get_proposal(GetProposalRequest { id: id.into() })
            .await
            .map(|r| r.into_inner())
    }

    pub async fn cancel(&self, key: &str, id: &str) -> Result<Proposal, Status> {
        self.client(key)
            .await
            .cancel_proposal(CancelProposalRequest {
                id: id.into(),
                reason: "no longer needed".into(),
            })
            .await
            .map(|r| r.into_inner())
    }
}

/// A spec that passes every validation rule.
pub fn valid_spec() -> ProposalSpec {
    ProposalSpec {
        action: "host_restart_service".into(),
        class: v1::OperationClass::Write as i32,
        target: "node-01".into(),
        parameters: Some(json_to_struct(
            serde_json::json!({"service": "nginx"}).as_object().unwrap(),
        )),
        reason: "User reported 502; nginx error log shows OOM".into(),
        blast_radius: v1::BlastRadius::SingleDevice as i32,
        operator: "user_42".into(),
        context_summary: "coordinator summary".into(),
        incident_id: "INC-7".into(),
        labels: [("env".to_owned(), "production".to_owned())].into(),
        rollback_plan: "systemctl start nginx".into(),
        force_approve_no_sop: false,
        idempotency_key: String::new(),
    }
}

pub fn assert_code<T: std::fmt::Debug>(result: Result<T, Status>, code: tonic::Code) -> Status {
    match result {
        Ok(value) => panic!("expected {code:?}, got OK: {value:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            status
        }
    }
}
