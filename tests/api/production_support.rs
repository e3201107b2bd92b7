//! For the production tests: a fresh PostgreSQL database per test (created by
//! the owner role, migrated by `countersign migrate`, used as the service
//! role), a random Redis key prefix or a `redis-server` of the test's own, and
//! `countersign serve` processes on them.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use countersign::client::BearerAuth;
use countersign_domain::Role;
use countersign_proto::v1::{
    AwaitDecisionRequest, Proposal, ProposalSpec, SubmitRequest,
    proposal_service_client::ProposalServiceClient,
};
use countersign_store::{DynStore, NewApiKey};
pub use countersign_test_support::{
    env_var as env_url, fixtures::wire_spec_on as spec, random_name,
};
use countersign_test_support::{fixtures::seed_reference, postgres::TestDatabase};
use tonic::{service::interceptor::InterceptedService, transport::Channel};

const BIN: &str = env!("CARGO_BIN_EXE_countersign");

pub type Client = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

/// A database of its own, migrated by the binary, dropped at the end.
pub struct Database(TestDatabase);

impl std::ops::Deref for Database {
    type Target = TestDatabase;

    fn deref(&self) -> &TestDatabase {
        &self.0
    }
}

impl Database {
    pub async fn migrated() -> Database {
        let db = TestDatabase::create().await;
        let output = Command::new(BIN)
            .arg("migrate")
            .env("COUNTERSIGN_MIGRATE_DATABASE_URL", &db.owner_url)
            .env("COUNTERSIGN_DATABASE_URL", &db.app_url)
            .output()
            .expect("run countersign migrate");
        assert!(
            output.status.success(),
            "countersign migrate: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Database(db)
    }

    /// Terminal events per proposal of the database: exactly one each, or the
    /// ids that have another count.
    pub async fn terminal_event_counts(&self) -> Vec<(String, i64)> {
        let mut conn = self.superuser_connection().await;
        sqlx::query_as(
            "SELECT proposal_id, count(*) FROM events
             WHERE kind IN ('APPROVED', 'REJECTED', 'CANCELLED', 'TIMED_OUT')
             GROUP BY proposal_id ORDER BY proposal_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

/// Seeds tenant `acme` (SOP-007 and ONLINE production targets) and returns a
/// coordinator key.
pub async fn seed(store: &DynStore) -> String {
    seed_tenant(store, "acme").await
}

/// A key of `role` for `tenant`.
pub async fn key_for(store: &DynStore, tenant: &str, role: Role) -> String {
    let (_, key) = store
        .create_api_key(NewApiKey {
            tenant: tenant.into(),
            name: random_name("key-"),
            role,
            agent: false,
            person: None,
        })
        .await
        .unwrap();
    key
}

/// [`seed`] for any tenant.
pub async fn seed_tenant(store: &DynStore, tenant: &str) -> String {
    seed_reference(&**store, tenant).await;
    key_for(store, tenant, Role::Coordinator).await
}

/// A free loopback port (nothing listens on it once this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `redis-server` of the test's own, without persistence: killing it
/// loses every key, as a restart without persistence would.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// A server on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_on(free_port())
    }

    pub fn start_on(port: u16) -> RedisServer {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed?)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            port,
            child: Some(child),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: every key is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How many proposals of `tenant` the queue holds an entry for.
    pub fn queued(&self, prefix: &str, tenant: &str) -> u64 {
        redis_count(&self.url(), "HLEN", &format!("{prefix}:ids:{tenant}"))
    }
}

/// `redis-cli -u URL COMMAND KEY` as a number (0 when it is not one).
pub fn redis_count(url: &str, command: &str, key: &str) -> u64 {
    let output = Command::new("redis-cli")
        .args(["-u", url, command, key])
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a `serve` process runs on.
pub struct Backend<'a> {
    pub database_url: &'a str,
    pub redis_url: Option<&'a str>,
    pub redis_prefix: &'a str,
}

/// A `countersign serve` process, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://…` for roles with the API.
    pub endpoint: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Server {
    /// SIGKILL: no shutdown, whatever it held stays held until reclaimed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `countersign serve --role ROLE` in `dir` (its log in `dir/ROLE.log`);
/// for roles with the API, waits for the address it listens on.
pub fn serve(dir: &Path, role: &str, backend: &Backend<'_>) -> Server {
    serve_as(dir, role, role, backend, &[])
}

/// [`serve`] for one of several processes of a role: `name` names its log
/// (`dir/NAME.log`) and data directory; `extra` are more `serve` flags.
pub fn serve_as(
    dir: &Path,
    name: &str,
    role: &str,
    backend: &Backend<'_>,
    extra: &[&str],
) -> Server {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--role",
            role,
            "--listen",
            "127.0.0.1:0",
            "--reviewers",
            "2",
        ])
        .args(extra)
        .current_dir(dir)
        .env_remove("COUNTERSIGN_REDIS_URL")
        .env("COUNTERSIGN_DATA_DIR", dir.join(format!("{name}-data")))
        .env("COUNTERSIGN_DATABASE_URL", backend.database_url)
        .env("COUNTERSIGN_REDIS_PREFIX", backend.redis_prefix)
        .env("COUNTERSIGN_DATABASE_POOL", "4")
        .env("COUNTERSIGN_OUTBOX_SWEEP", "300ms")
        .env("COUNTERSIGN_CREDENTIAL_CACHE_TTL", "0s")
        .env("COUNTERSIGN_METRICS_LISTEN", "127.0.0.1:0")
        .env("COUNTERSIGN_CONSOLE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log);
    if let Some(url) = backend.redis_url {
        command.env("COUNTERSIGN_REDIS_URL", url);
    }
    let mut child = command.spawn().expect("start countersign serve");
    let stdout = child.stdout.take().unwrap();
    if role == "worker" {
        return Server {
            child,
            endpoint: None,
        };
    }
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let Some(addr) = line.trim().strip_prefix("countersign listening on ") else {
        let _ = child.kill();
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        panic!("serve --role {role} ({name}) did not start: {line:?}\n{log}");
    };
    Server {
        endpoint: Some(format!("http://{addr}")),
        child,
    }
}

pub async fn channel(server: &Server) -> Channel {
    let endpoint = server.endpoint.clone().expect("a server with the API");
    Channel::from_shared(endpoint)
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

pub async fn client(server: &Server, key: &str) -> Client {
    ProposalServiceClient::with_interceptor(channel(server).await, BearerAuth::new(key).unwrap())
}

pub async fn submit(client: &mut Client, spec: ProposalSpec) -> String {
    client
        .submit(SubmitRequest {
            spec: Some(spec),
            ..Default::default()
        })
        .await
        .expect("Submit answers OK")
        .into_inner()
        .proposal
        .expect("a proposal")
        .id
}

/// Waits (up to `within`) for the proposal's decision.
pub async fn await_decision(client: &mut Client, id: &str, within: Duration) -> Proposal {
    let mut request = tonic::Request::new(AwaitDecisionRequest { id: id.into() });
    request.set_timeout(within);
    client
        .await_decision(request)
        .await
        .unwrap_or_else(|status| panic!("no decision for {id} within {within:?}: {status}"))
        .into_inner()
}

pub async fn get(client: &mut Client, id: &str) -> Proposal {
    client
        .get_proposal(countersign_proto::v1::GetProposalRequest { id: id.into() })
        .await
        .expect("GetProposal")
        .into_inner()
}
