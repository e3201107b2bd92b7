//! The production backends for a bench run: a fresh PostgreSQL database
//! (created by the owner role, migrated by `countersign migrate`, served as
//! the service role) and a Redis key prefix of the run's own; and their
//! baselines, measured in the same run: `pgbench` single-row inserts and
//! `redis-benchmark` XADD.

use std::process::Command;

use anyhow::{Context, bail};
use clap::Args;
use sqlx::{Connection, PgConnection};

#[derive(Debug, Clone, Args)]
pub struct ProductionArgs {
    /// Run the server on PostgreSQL + Redis instead of the embedded default.
    /// `tests/services/postgres.sh` and `tests/services/redis.sh` start
    /// throwaway servers and print the variables below.
    #[arg(long, global = true)]
    pub production: bool,
    /// The schema owner's URL (any database of the cluster; the run creates
    /// its own database with it, and the pgbench baseline runs as it).
    #[arg(long, global = true, env = "COUNTERSIGN_TEST_PG_OWNER_URL")]
    pub pg_owner_url: Option<String>,
    /// The service role's URL (its database is replaced by the run's).
    #[arg(long, global = true, env = "COUNTERSIGN_TEST_PG_APP_URL")]
    pub pg_app_url: Option<String>,
    /// The Redis the queue runs on.
    #[arg(long, global = true, env = "COUNTERSIGN_TEST_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Clients of the pgbench baseline.
    #[arg(long, global = true, default_value = "32")]
    pub pgbench_clients: u32,
    /// Clients of the redis-benchmark baseline.
    #[arg(long, global = true, default_value = "50")]
    pub redis_benchmark_clients: u32,
    /// Requests of the redis-benchmark baseline.
    #[arg(long, global = true, default_value = "200000")]
    pub redis_benchmark_requests: u64,
    /// Leave the run's database and Redis keys (or the embedded server's
    /// data directory) in place afterwards (their names are printed), to look
    /// at what the run wrote: per-proposal
    /// `created_at`, `review_started_at`, `decided_at` and each decision's
    /// reviewer.
    #[arg(long, global = true)]
    pub keep: bool,
}

/// Where a production run's server lives.
#[derive(Debug, Clone)]
pub struct Production {
    pub database: String,
    /// The owner's URL as given (another database of the cluster), to drop ours from.
    pub cluster_owner_url: String,
    pub owner_url: String,
    pub app_url: String,
    pub redis_url: String,
    pub redis_prefix: String,
    /// `--keep`: `clean_up` leaves both in place.
    pub keep: bool,
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    format!("{}/{database}{query}", &base[..path])
}

impl ProductionArgs {
    /// Runs `scenario` on the backends the flags choose: with `--production`,
    /// on a fresh database and Redis prefix ([`ProductionArgs::prepare`]),
    /// dropped afterwards whatever the outcome.
    pub async fn run<F, Fut, T>(&self, run: &crate::BenchArgs, scenario: F) -> anyhow::Result<T>
    where
        F: FnOnce(Option<Production>) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let production = self.prepare(run).await?;
        let result = scenario(production.clone()).await;
        if let Some(p) = &production {
            p.clean_up().await;
        }
        result
    }

    /// A fresh database, migrated by the run's `countersign` binary, and a
    /// fresh Redis prefix; `None` for the embedded default.
    pub async fn prepare(&self, run: &crate::BenchArgs) -> anyhow::Result<Option<Production>> {
        if !self.production {
            return Ok(None);
        }
        let need = |value: &Option<String>, what: &str| {
            value.clone().with_context(|| {
                format!("--production needs {what} (eval \"$(tests/services/postgres.sh)\"; eval \"$(tests/services/redis.sh)\")")
            })
        };
        let owner = need(&self.pg_owner_url, "--pg-owner-url")?;
        let app = need(&self.pg_app_url, "--pg-app-url")?;
        let redis_url = need(&self.redis_url, "--redis-url")?;
        let suffix = format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let database = format!("cs_bench_{suffix}");
        let mut conn = PgConnection::connect(&owner)
            .await
            .context("reaching PostgreSQL as the owner")?;
        sqlx::query(&format!("CREATE DATABASE {database}"))
            .execute(&mut conn)
            .await
            .context("creating the bench database")?;
        conn.close().await.ok();
        let production = Production {
            owner_url: with_database(&owner, &database),
            cluster_owner_url: owner,
            app_url: with_database(&app, &database),
            database,
            redis_url,
            redis_prefix: format!("cs-bench-{suffix}"),
            keep: self.keep,
        };
        let output = Command::new(run.server_binary()?)
            .arg("migrate")
            .env("COUNTERSIGN_MIGRATE_DATABASE_URL", &production.owner_url)
            .env("COUNTERSIGN_DATABASE_URL", &production.app_url)
            .output()?;
        if !output.status.success() {
            production.clean_up().await;
            bail!(
                "countersign migrate: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(Some(production))
    }
}

impl Production {
    /// Drops the run's database and Redis keys (unless `--keep`).
    pub async fn clean_up(&self) {
        if self.keep {
            eprintln!(
                "kept: database {} (as {}), Redis keys {}:*",
                self.database, self.owner_url, self.redis_prefix
            );
            return;
        }
        if let Ok(mut conn) = PgConnection::connect(&self.cluster_owner_url).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.database
            ))
            .execute(&mut conn)
            .await;
        }
        let _ = Command::new("redis-cli")
            .args(["-u", &self.redis_url, "--scan", "--pattern"])
            .arg(format!("{}:*", self.redis_prefix))
            .output()
            .map(|out| {
                for key in String::from_utf8_lossy(&out.stdout).lines() {
                    let _ = Command::new("redis-cli")
                        .args(["-u", &self.redis_url, "DEL", key])
                        .output();
                }
            });
    }

    /// `pgbench`: single-row inserts (one per transaction) by `clients` for
    /// `seconds`, as the owner on the run's database; transactions per second,
    /// and PostgreSQL's CPU milliseconds per transaction over the same run (none
    /// when no time was seen: the reading failed).
    pub async fn pgbench_tps(
        &self,
        clients: u32,
        seconds: u64,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        let mut conn = PgConnection::connect(&self.owner_url).await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_baseline \
             (id bigserial PRIMARY KEY, tenant text NOT NULL, body text NOT NULL)",
        )
        .execute(&mut conn)
        .await?;
        let script = tempfile::NamedTempFile::new()?;
        std::fs::write(
            script.path(),
            "INSERT INTO bench_baseline (tenant, body) VALUES ('bench', repeat('x', 200));\n",
        )?;
        let cpu_before = crate::server::cpu_of_processes("postgres");
        let output = Command::new(pgbench_binary())
            .args([
                "-n",
                "-c",
                &clients.to_string(),
                "-j",
                &clients.min(4).to_string(),
            ])
            .args(["-T", &seconds.max(1).to_string(), "-f"])
            .arg(script.path())
            .arg(&self.owner_url)
            .output()
            .context("running pgbench (install postgresql-client)")?;
        // Its backends have ended: their time is in the postmaster's once it
        // has reaped them, which may be a moment after pgbench exits.
        let mut cpu_ms = 0.0;
        for _ in 0..40 {
            cpu_ms = (crate::server::cpu_of_processes("postgres") - cpu_before) * 1000.0;
            if cpu_ms > 0.0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        sqlx::query("DROP TABLE bench_baseline")
            .execute(&mut conn)
            .await?;
        let text = String::from_utf8_lossy(&output.stdout);
        let tps = parse_pgbench_tps(&text).with_context(|| {
            format!(
                "pgbench printed no tps: {text}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        // No time seen at all is a reading that failed, not a free insert.
        let per_tx = (cpu_ms > 0.0).then(|| cpu_ms / (tps * seconds.max(1) as f64).max(1.0));
        Ok((tps, per_tx))
    }

    /// `redis-benchmark`: XADD by `clients`; requests per second.
    pub fn redis_xadd_rate(&self, clients: u32, requests: u64) -> anyhow::Result<f64> {
        let url = self.redis_url.trim_start_matches("redis://");
        let authority = url.split('/').next().unwrap_or(url);
        let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
        let host = host.rsplit('@').next().unwrap_or(host);
        let key = format!("{}:baseline", self.redis_prefix);
        let output = Command::new("redis-benchmark")
            .args(["-h", host, "-p", port, "-c", &clients.to_string()])
            .args([
                "-n",
                &requests.to_string(),
                "-q",
                "XADD",
                &key,
                "*",
                "f",
                "v",
            ])
            .output()
            .context("running redis-benchmark (install redis-tools)")?;
        let _ = Command::new("redis-cli")
            .args(["-u", &self.redis_url, "DEL", &key])
            .output();
        let text = String::from_utf8_lossy(&output.stdout);
        parse_redis_benchmark_rate(&text)
            .with_context(|| format!("redis-benchmark printed no rate: {text}"))
    }
}

pub(crate) fn pgbench_binary() -> String {
    if Command::new("pgbench").arg("--version").output().is_ok() {
        return "pgbench".into();
    }
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dirs| {
            dirs.flatten()
                .map(|d| d.path().join("bin/pgbench"))
                .find(|p| p.exists())
        })
        .map_or_else(|| "pgbench".into(), |p| p.display().to_string())
}

/// `tps = 15712.3 (without initial connection time)` → 15712.3.
pub(crate) fn parse_pgbench_tps(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `XADD …: 105263.16 requests per second, p50=0.247 msec` → 105263.16
/// (the last figure printed: redis-benchmark rewrites its progress line).
fn parse_redis_benchmark_rate(text: &str) -> Option<f64> {
    text.split(['\r', '\n'])
        .filter_map(|line| {
            let (before, _) = line.split_once(" requests per second")?;
            before.rsplit([' ', ':']).next()?.parse().ok()
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced_and_its_options_kept() {
        assert_eq!(
            with_database(
                "postgres://app@127.0.0.1:54329/countersign?sslmode=disable",
                "cs_x"
            ),
            "postgres://app@127.0.0.1:54329/cs_x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://app@h:1", "cs_x"),
            "postgres://app@h:1/cs_x"
        );
    }

    #[test]
    fn pgbench_and_redis_benchmark_figures_are_read_from_their_output() {
        let pgbench = "number of failed transactions: 0 (0.000%)\nlatency average = 2.1 ms\n\
                       initial connection time = 12.3 ms\ntps = 15712.345 (without initial connection time)\n";
        assert_eq!(parse_pgbench_tps(pgbench), Some(15712.345));
        let redis = "XADD k * f v: rps=0.0 (overall: -nan) avg_msec=-nan\r\
                     XADD k * f v: 104712.05 requests per second, p50=0.247 msec\n";
        assert_eq!(parse_redis_benchmark_rate(redis), Some(104712.05));
        assert_eq!(
            parse_pgbench_tps("pgbench: error: connection refused"),
            None
        );
    }
}
