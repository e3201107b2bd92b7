//! `serve`'s configuration: built-in defaults < a TOML file (`--config`,
//! `COUNTERSIGN_CONFIG`) < the environment < command-line flags. Every key
//! has one place in [`Config`]; an unknown key is an error naming it and
//! where it came from (see `sources`).

mod duration;
mod flags;
mod positive;
mod print;
mod sources;

use std::{
    net::SocketAddr,
    num::{NonZeroU32, NonZeroUsize},
    path::PathBuf,
    time::Duration,
};

use serde::{Deserialize, Serialize};

pub use flags::ServeArgs;
pub use print::to_masked_toml;
pub use sources::{load, load_file_and_env};

/// What this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// API and reviewers.
    #[default]
    All,
    /// The gRPC API only.
    Api,
    /// Reviewer workers only (gRPC health on `listen`).
    Worker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The gRPC port (port 0 picks a free one).
    pub listen: SocketAddr,
    pub role: Role,
    /// Where the embedded database lives (unset: `countersign-data`); its key
    /// files live beside it. With PostgreSQL, where the first admin key and
    /// the signing key file live (required there).
    pub data_dir: Option<PathBuf>,
    pub log: LogSection,
    pub metrics: MetricsSection,
    pub console: ConsoleSection,
    pub shutdown: ShutdownSection,
    pub database: DatabaseSection,
    pub redis: RedisSection,
    pub review: ReviewSection,
    pub api: ApiSection,
    pub watch: WatchSection,
    pub suppression: SuppressionSection,
    pub outbox: OutboxSection,
    pub audit: AuditSection,
    pub model: ModelSection,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub format: LogFormat,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `GET /metrics` (Prometheus text format).
    pub listen: SocketAddr,
}

/// The browser console (served by the `all` and `api` roles).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSection {
    /// Serve it at all.
    pub enabled: bool,
    /// Its address (port 0 picks a free one).
    pub listen: SocketAddr,
    /// How long a sign-in lasts.
    #[serde(with = "duration")]
    pub session_ttl: Duration,
    /// Every session cookie is `Secure`: set it when browsers reach the
    /// console over TLS.
    pub secure_cookie: bool,
    /// A sign-in that arrives with `X-Forwarded-Proto: https` gets a `Secure`
    /// cookie: set it only behind a TLS-terminating proxy that sets that
    /// header itself.
    pub trust_forwarded_proto: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSection {
    /// How long in-flight work may take to finish after SIGTERM.
    #[serde(with = "duration")]
    pub grace: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSection {
    /// `sqlite://…` or `postgres://…`; unset = a SQLite file in `data_dir`.
    pub url: Option<String>,
    /// PostgreSQL connections this process opens at most.
    pub pool: u32,
    /// How the embedded SQLite database commits.
    pub sqlite_synchronous: SqliteSynchronous,
}

/// SQLite's `synchronous` for the embedded database (WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSynchronous {
    /// Every commit is synced before it is answered (group commit shares one
    /// sync among a batch's callers): an answered OK survives power loss.
    #[default]
    Full,
    /// Synced at WAL checkpoints only: an OS crash or power loss can drop the
    /// last commits that were answered OK (a process crash cannot).
    Normal,
}

impl From<SqliteSynchronous> for countersign_store::Synchronous {
    fn from(value: SqliteSynchronous) -> Self {
        match value {
            SqliteSynchronous::Full => countersign_store::Synchronous::Full,
            SqliteSynchronous::Normal => countersign_store::Synchronous::Normal,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSection {
    /// The Redis Streams review queue; needs a `postgres://` database.
    pub url: Option<String>,
    /// Every Redis key starts with it.
    pub prefix: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewSection {
    /// Reviewer workers in this process (unset: one per core).
    pub workers: Option<usize>,
    /// Express workers besides them, which take only tenants nobody is
    /// reviewing (0: none; unset: 1 on the Redis queue, 0 on the embedded
    /// one, whose single writer they would only compete for).
    pub express_workers: Option<usize>,
    /// From REVIEWING to decision; past it a proposal is TIMED_OUT.
    #[serde(with = "duration")]
    pub deadline: Duration,
    /// Review attempts before a proposal is REJECTED "review failed".
    pub attempts: u32,
    /// How long a worker holds a proposal before another may reclaim it.
    #[serde(with = "duration")]
    pub lease: Duration,
    /// A `Submit` that waits for its decision is reviewed inside the
    /// transaction that stores it, where the store can (the embedded one);
    /// what the gates do not decide alone is queued for the workers.
    pub at_submission: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    pub rate_limit_per_second: NonZeroU32,
    pub rate_limit_burst: NonZeroU32,
    #[serde(with = "duration")]
    pub request_timeout: Duration,
    #[serde(with = "duration")]
    pub credential_cache_ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchSection {
    #[serde(with = "duration")]
    pub heartbeat: Duration,
    /// Notifications queued for one watcher before it is cut off.
    pub buffer: usize,
    /// How long events are kept for watchers to resume from.
    #[serde(with = "duration")]
    pub retention: Duration,
    /// Streams one API key may hold open in this process.
    pub max_streams_per_key: NonZeroUsize,
    /// Streams one tenant's keys may hold open in this process.
    pub max_streams_per_tenant: NonZeroUsize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SuppressionSection {
    /// Rejections the cache holds at most.
    pub capacity: u64,
    /// About how many bytes they may hold in all (each counts at least
    /// `max_bytes / capacity`).
    pub max_bytes: u64,
    #[serde(with = "duration")]
    pub ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxSection {
    #[serde(with = "duration")]
    pub poll: Duration,
    #[serde(with = "duration")]
    pub sweep: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    #[serde(with = "duration")]
    pub checkpoint_every: Duration,
    /// The Ed25519 seed (64 hex characters) that signs checkpoints: a secret.
    pub signing_key: Option<String>,
    /// A file holding the seed; unset = `signing.key` beside an SQLite
    /// database (with PostgreSQL, in `data_dir`).
    pub signing_key_file: Option<PathBuf>,
}

/// The model endpoints tenants' profiles may name. Set in the TOML file
/// (`[[model.endpoints]]`); none by default, and then no tenant can turn the
/// model reviewer on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    pub endpoints: Vec<ModelEndpointSection>,
}

/// One OpenAI-compatible endpoint. Its key is read at start from the
/// variable `api_key_env` names or the file `api_key_file` names (neither:
/// no key), never from this file, and is never printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEndpointSection {
    /// What tenants' profiles call it.
    pub name: String,
    /// The server, e.g. `http://127.0.0.1:8081` (requests go to
    /// `/v1/chat/completions` under it).
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// For one request, its whole answer included.
    #[serde(with = "duration", default = "model_timeout")]
    pub timeout: Duration,
    /// Requests in flight at most.
    #[serde(default = "model_concurrency")]
    pub max_concurrency: NonZeroUsize,
    /// Ask for a JSON object (`response_format`); turn off for a server
    /// that refuses the field.
    #[serde(default = "yes")]
    pub json_mode: bool,
}

fn model_timeout() -> Duration {
    secs(60)
}

fn model_concurrency() -> NonZeroUsize {
    NonZeroUsize::new(8).expect("non-zero")
}

fn yes() -> bool {
    true
}

impl ModelSection {
    /// The endpoints as the model client takes them; an endpoint with both a
    /// key variable and a key file is refused.
    pub fn endpoints(&self) -> anyhow::Result<Vec<countersign_model::EndpointConfig>> {
        use countersign_model::ApiKey;
        self.endpoints
            .iter()
            .map(|e| {
                let api_key = match (&e.api_key_env, &e.api_key_file) {
                    (Some(_), Some(_)) => anyhow::bail!(
                        "model endpoint `{}`: set api_key_env or api_key_file, not both",
                        e.name
                    ),
                    (Some(var), None) => ApiKey::Env(var.clone()),
                    (None, Some(path)) => ApiKey::File(path.clone()),
                    (None, None) => ApiKey::None,
                };
                Ok(countersign_model::EndpointConfig {
                    name: e.name.clone(),
                    base_url: e.base_url.clone(),
                    model: e.model.clone(),
                    api_key,
                    timeout: e.timeout,
                    max_concurrency: e.max_concurrency.get(),
                    json_mode: e.json_mode,
                })
            })
            .collect()
    }
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            role: Role::All,
            data_dir: None,
            log: LogSection::default(),
            metrics: MetricsSection::default(),
            console: ConsoleSection::default(),
            shutdown: ShutdownSection::default(),
            database: DatabaseSection::default(),
            redis: RedisSection::default(),
            review: ReviewSection::default(),
            api: ApiSection::default(),
            watch: WatchSection::default(),
            suppression: SuppressionSection::default(),
            outbox: OutboxSection::default(),
            audit: AuditSection::default(),
            model: ModelSection::default(),
        }
    }
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
        }
    }
}

impl Default for ConsoleSection {
    fn default() -> Self {
        let defaults = countersign_api::console::ConsoleConfig::default();
        ConsoleSection {
            enabled: true,
            listen: defaults.listen,
            session_ttl: defaults.session_ttl,
            secure_cookie: defaults.secure_cookie,
            trust_forwarded_proto: defaults.trust_forwarded_proto,
        }
    }
}

impl ConsoleSection {
    /// The console's settings, or `None` when it is off.
    pub fn console(&self) -> Option<countersign_api::console::ConsoleConfig> {
        self.enabled
            .then_some(countersign_api::console::ConsoleConfig {
                listen: self.listen,
                session_ttl: self.session_ttl,
                secure_cookie: self.secure_cookie,
                trust_forwarded_proto: self.trust_forwarded_proto,
            })
    }
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection { grace: secs(30) }
    }
}

impl Default for DatabaseSection {
    fn default() -> Self {
        DatabaseSection {
            url: None,
            pool: 16,
            sqlite_synchronous: SqliteSynchronous::Full,
        }
    }
}

impl Default for RedisSection {
    fn default() -> Self {
        RedisSection {
            url: None,
            prefix: "countersign".into(),
        }
    }
}

impl Default for ReviewSection {
    fn default() -> Self {
        ReviewSection {
            workers: None,
            express_workers: None,
            deadline: secs(60),
            attempts: 3,
            lease: secs(30),
            at_submission: true,
        }
    }
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            rate_limit_per_second: NonZeroU32::new(5_000).expect("non-zero"),
            rate_limit_burst: NonZeroU32::new(10_000).expect("non-zero"),
            request_timeout: secs(30),
            credential_cache_ttl: secs(1),
        }
    }
}

impl Default for WatchSection {
    fn default() -> Self {
        WatchSection {
            heartbeat: secs(15),
            buffer: 1024,
            retention: secs(7 * 24 * 3600),
            max_streams_per_key: NonZeroUsize::new(64).expect("non-zero"),
            max_streams_per_tenant: NonZeroUsize::new(1024).expect("non-zero"),
        }
    }
}

impl Default for SuppressionSection {
    fn default() -> Self {
        SuppressionSection {
            capacity: 10_000,
            max_bytes: 64 * 1024 * 1024,
            ttl: secs(600),
        }
    }
}

impl Default for OutboxSection {
    fn default() -> Self {
        OutboxSection {
            poll: Duration::from_millis(200),
            sweep: secs(5),
        }
    }
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            checkpoint_every: secs(600),
            signing_key: None,
            signing_key_file: None,
        }
    }
}

impl Config {
    /// The database URL: the configured one, else a SQLite file in `data_dir`.
    pub fn database_url(&self) -> String {
        self.store_args().database_url()
    }

    /// The database settings in the form `migrate` and `admin` use.
    pub fn store_args(&self) -> crate::settings::StoreArgs {
        crate::settings::StoreArgs {
            database_url: self.database.url.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    pub fn signing_args(&self) -> crate::signing::SigningArgs {
        crate::signing::SigningArgs {
            key: self.audit.signing_key.clone(),
            signing_key_file: self.audit.signing_key_file.clone(),
        }
    }

    /// The data directory: the configured one, else `countersign-data`.
    pub fn data_dir(&self) -> PathBuf {
        self.store_args().data_dir()
    }
}
