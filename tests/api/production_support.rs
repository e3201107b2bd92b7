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
use countersign_domain::{BlastRadius, Role, TargetStatus, reference::SopInput};
use countersign_proto::v1::{
    AwaitDecisionRequest, Proposal, ProposalSpec, SubmitRequest,
    proposal_service_client::ProposalServiceClient,
};
use countersign_store::{NewApiKey, PostgresStore, Store};
use sqlx::{Connection, PgConnection};
use tonic::{service::interceptor::InterceptedService, transport::Channel};

const BIN: &str = env!("CARGO_BIN_EXE_countersign");

pub type Client = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

pub fn env_url(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: start the test servers with `eval \"$(tests/services/postgres.sh)\"; \
             eval \"$(tests/services/redis.sh)\"` (tests/run does)"
        )
    })
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{database}{query}", &base[..path_start])
}

pub fn random_name(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// A database of its own, migrated by the binary, dropped at the end.
pub struct Database {
    pub name: String,
    pub app_url: String,
    owner_url: String,
}

impl Database {
    pub async fn migrated() -> Database {
        let owner = env_url("COUNTERSIGN_TEST_PG_OWNER_URL");
        let name = random_name("cs_");
        let mut conn = PgConnection::connect(&owner)
            .await
            .expect("reach PostgreSQL");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("the owner role creates a database");
        conn.close().await.ok();
        let db = Database {
            app_url: with_database(&env_url("COUNTERSIGN_TEST_PG_APP_URL"), &name),
            owner_url: with_database(&owner, &name),
            name,
        };
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
        db
    }

    /// The store as the service role sees it, to seed tenants, keys and
    /// reference data as `countersign admin` would.
    pub async fn store(&self) -> PostgresStore {
        PostgresStore::connect_with(&self.app_url, 2).await.unwrap()
    }

    /// A superuser connection (past row-level security) to count what was written.
    pub async fn superuser(&self) -> PgConnection {
        let url = with_database(&env_url("COUNTERSIGN_TEST_PG_SUPERUSER_URL"), &self.name);
        PgConnection::connect(&url).await.unwrap()
    }

    /// Terminal events per proposal of the database: exactly one each, or the
    /// ids that have another count.
    pub async fn terminal_event_counts(&self) -> Vec<(String, i64)> {
        let mut conn = self.superuser().await;
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

impl Drop for Database {
    fn drop(&mut self) {
        let owner = env_url("COUNTERSIGN_TEST_PG_OWNER_URL");
        let name = self.name.clone();
        // On a thread of its own: the test's runtime may be gone already.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut conn) = PgConnection::connect(&owner).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Seeds tenant `acme` (SOP-007 and an ONLINE `node-01`) and returns a
/// coordinator key.
pub async fn seed(store: &PostgresStore) -> String {
    seed_tenant(store, "acme").await
}

/// A key of `role` for `tenant`.
pub async fn key_for(store: &PostgresStore, tenant: &str, role: Role) -> String {
    let (_, key) = store
        .create_api_key(NewApiKey {
            tenant: tenant.into(),
            name: random_name("key-"),
            role,
            agent: false,
        })
        .await
        .unwrap();
    key
}

/// [`seed`] for any tenant.
pub async fn seed_tenant(store: &PostgresStore, tenant: &str) -> String {
    store.create_tenant(tenant).await.unwrap();
    store
        .put_sop(
            tenant,
            SopInput {
                id: "SOP-007".into(),
                action: "host_restart_service".into(),
                title: "Restart a systemd service".into(),
                covers: "a service that is down or leaking memory".into(),
                rollback_path: "systemctl start nginx".into(),
                max_blast_radius: BlastRadius::SingleDevice,
                selector: [("env".to_owned(), "production".to_owned())].into(),
            },
        )
        .await
        .unwrap();
    store
        .put_target(
            tenant,
            "node-01",
            TargetStatus::Online,
            [("env".to_owned(), "production".to_owned())].into(),
        )
        .await
        .unwrap();
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

/// A write proposal on `target` (only `node-01` is known: others are rejected).
pub fn spec(target: &str) -> ProposalSpec {
    let mut spec = crate::helpers::valid_spec();
    spec.target = target.into();
    spec.reason = format!("restart nginx on {target}");
    // One operator per target: the rejections here must not open a breaker.
    spec.operator = format!("op-{target}");
    spec
}

pub async fn submit(client: &mut Client, spec: ProposalSpec) -> String {
    client
        .submit(SubmitRequest { spec: Some(spec) })
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
