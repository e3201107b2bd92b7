//! `serve`'s flags: the same names as ever, each the last word on its key
//! (they override the file and the environment). Values are checked where
//! the file's are, so a bad one is named with its flag.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// A TOML configuration file (see README.md for its keys).
    #[arg(long, env = "COUNTERSIGN_CONFIG")]
    pub config: Option<PathBuf>,
    /// listen: address the gRPC API listens on (port 0 picks a free one).
    #[arg(long)]
    pub listen: Option<String>,
    /// role: what this process runs.
    #[arg(long, value_parser = ["all", "api", "worker"])]
    pub role: Option<String>,
    /// data_dir: where the embedded database lives, with its key files
    /// (with PostgreSQL, where the key files live).
    #[arg(long)]
    pub data_dir: Option<String>,
    /// log.format: `text` or `json`.
    #[arg(long, value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// metrics.listen: address of `GET /metrics` (port 0 picks a free one).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// console.listen: address of the browser console (port 0 picks a free
    /// one).
    #[arg(long)]
    pub console_listen: Option<String>,
    /// shutdown.grace: how long in-flight work may finish after SIGTERM.
    #[arg(long)]
    pub shutdown_grace: Option<String>,
    /// database.url: `sqlite://…` or `postgres://…`.
    #[arg(long)]
    pub database_url: Option<String>,
    /// database.pool: PostgreSQL connections this process opens at most.
    #[arg(long)]
    pub database_pool: Option<String>,
    /// database.sqlite_synchronous: `full` (default; every commit synced) or
    /// `normal` (an OS crash or power loss can drop the last commits).
    #[arg(long)]
    pub sqlite_synchronous: Option<String>,
    /// redis.url: the Redis Streams review queue (needs a postgres:// database).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// redis.prefix: every Redis key starts with it.
    #[arg(long)]
    pub redis_prefix: Option<String>,
    /// review.workers: reviewer workers in this process (default one per core).
    #[arg(long)]
    pub reviewers: Option<String>,
    /// review.express_workers: workers that take only tenants nobody is reviewing (default 1 on Redis, 0 embedded).
    #[arg(long)]
    pub express_reviewers: Option<String>,
    /// review.deadline: from REVIEWING to decision; past it TIMED_OUT.
    #[arg(long)]
    pub review_deadline: Option<String>,
    /// review.attempts: attempts before REJECTED "review failed".
    #[arg(long)]
    pub review_attempts: Option<String>,
    /// review.lease: how long a worker holds a proposal.
    #[arg(long)]
    pub review_lease: Option<String>,
    /// api.rate_limit_per_second: sustained requests per second per tenant.
    #[arg(long)]
    pub rate_limit_per_second: Option<String>,
    /// api.rate_limit_burst: requests a tenant may burst above the rate.
    #[arg(long)]
    pub rate_limit_burst: Option<String>,
    /// api.request_timeout: deadline for ordinary calls.
    #[arg(long)]
    pub request_timeout: Option<String>,
    /// api.credential_cache_ttl: how long a credential read is reused (`0s` = never).
    #[arg(long)]
    pub credential_cache_ttl: Option<String>,
    /// watch.heartbeat: an idle `Watch` stream gets a heartbeat this often.
    #[arg(long)]
    pub watch_heartbeat: Option<String>,
    /// watch.buffer: notifications queued per watcher before it is cut off.
    #[arg(long)]
    pub watch_buffer: Option<String>,
    /// watch.retention: how long events are kept to resume from.
    #[arg(long)]
    pub event_retention: Option<String>,
    /// watch.max_streams_per_key: `Watch` streams one API key may hold open.
    #[arg(long)]
    pub watch_max_streams_per_key: Option<String>,
    /// watch.max_streams_per_tenant: `Watch` streams one tenant may hold open.
    #[arg(long)]
    pub watch_max_streams_per_tenant: Option<String>,
    /// suppression.capacity: rejections kept to answer identical retries.
    #[arg(long)]
    pub suppression_capacity: Option<String>,
    /// suppression.max_bytes: about how many bytes those rejections may hold.
    #[arg(long)]
    pub suppression_max_bytes: Option<String>,
    /// suppression.ttl: how long a rejection answers identical retries.
    #[arg(long)]
    pub suppression_ttl: Option<String>,
    /// outbox.poll: how often the publisher looks for other processes' submissions.
    #[arg(long)]
    pub outbox_poll: Option<String>,
    /// outbox.sweep: how often workers re-publish proposals missing from Redis.
    #[arg(long)]
    pub outbox_sweep: Option<String>,
    /// audit.checkpoint_every: how often every grown log gets a signed checkpoint.
    #[arg(long)]
    pub checkpoint_every: Option<String>,
    /// audit.signing_key: the checkpoint signing seed, 64 hex (a secret:
    /// prefer the environment or the file).
    #[arg(long)]
    pub signing_key: Option<String>,
    /// audit.signing_key_file: a file holding the seed.
    #[arg(long)]
    pub signing_key_file: Option<String>,
}

impl ServeArgs {
    /// The flags given, as (flag, key, value).
    pub fn given(&self) -> Vec<(&'static str, &'static str, String)> {
        let all: [(&'static str, &'static str, &Option<String>); 34] = [
            ("--listen", "listen", &self.listen),
            ("--role", "role", &self.role),
            ("--data-dir", "data_dir", &self.data_dir),
            ("--log-format", "log.format", &self.log_format),
            ("--metrics-listen", "metrics.listen", &self.metrics_listen),
            ("--console-listen", "console.listen", &self.console_listen),
            ("--shutdown-grace", "shutdown.grace", &self.shutdown_grace),
            ("--database-url", "database.url", &self.database_url),
            ("--database-pool", "database.pool", &self.database_pool),
            (
                "--sqlite-synchronous",
                "database.sqlite_synchronous",
                &self.sqlite_synchronous,
            ),
            ("--redis-url", "redis.url", &self.redis_url),
            ("--redis-prefix", "redis.prefix", &self.redis_prefix),
            ("--reviewers", "review.workers", &self.reviewers),
            (
                "--express-reviewers",
                "review.express_workers",
                &self.express_reviewers,
            ),
            (
                "--review-deadline",
                "review.deadline",
                &self.review_deadline,
            ),
            (
                "--review-attempts",
                "review.attempts",
                &self.review_attempts,
            ),
            ("--review-lease", "review.lease", &self.review_lease),
            (
                "--rate-limit-per-second",
                "api.rate_limit_per_second",
                &self.rate_limit_per_second,
            ),
            (
                "--rate-limit-burst",
                "api.rate_limit_burst",
                &self.rate_limit_burst,
            ),
            (
                "--request-timeout",
                "api.request_timeout",
                &self.request_timeout,
            ),
            (
                "--credential-cache-ttl",
                "api.credential_cache_ttl",
                &self.credential_cache_ttl,
            ),
            (
                "--watch-heartbeat",
                "watch.heartbeat",
                &self.watch_heartbeat,
            ),
            ("--watch-buffer", "watch.buffer", &self.watch_buffer),
            (
                "--event-retention",
                "watch.retention",
                &self.event_retention,
            ),
            (
                "--watch-max-streams-per-key",
                "watch.max_streams_per_key",
                &self.watch_max_streams_per_key,
            ),
            (
                "--watch-max-streams-per-tenant",
                "watch.max_streams_per_tenant",
                &self.watch_max_streams_per_tenant,
            ),
            (
                "--suppression-capacity",
                "suppression.capacity",
                &self.suppression_capacity,
            ),
            (
                "--suppression-max-bytes",
                "suppression.max_bytes",
                &self.suppression_max_bytes,
            ),
            (
                "--suppression-ttl",
                "suppression.ttl",
                &self.suppression_ttl,
            ),
            ("--outbox-poll", "outbox.poll", &self.outbox_poll),
            ("--outbox-sweep", "outbox.sweep", &self.outbox_sweep),
            (
                "--checkpoint-every",
                "audit.checkpoint_every",
                &self.checkpoint_every,
            ),
            ("--signing-key", "audit.signing_key", &self.signing_key),
            (
                "--signing-key-file",
                "audit.signing_key_file",
                &self.signing_key_file,
            ),
        ];
        all.into_iter()
            .filter_map(|(flag, key, value)| value.clone().map(|v| (flag, key, v)))
            .collect()
    }
}
