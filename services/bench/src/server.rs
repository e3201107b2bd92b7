//! The server under test: this very binary, `serve` on a free port with a
//! fresh data directory, observed through `/proc`.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use anyhow::{Context, bail};

use crate::production::Production;

pub struct Server {
    child: Child,
    pub endpoint: String,
    pub data_dir: tempfile::TempDir,
    reviewers: Option<usize>,
    /// PostgreSQL + Redis, or (none) the embedded default.
    pub production: Option<Production>,
}

/// Points `command` at the run's backends: the production ones, or the
/// embedded default (whatever the environment says).
fn backends(command: &mut Command, production: Option<&Production>) {
    match production {
        Some(p) => command
            .env("COUNTERSIGN_DATABASE_URL", &p.app_url)
            .env("COUNTERSIGN_REDIS_URL", &p.redis_url)
            .env("COUNTERSIGN_REDIS_PREFIX", &p.redis_prefix),
        None => command
            .env_remove("COUNTERSIGN_DATABASE_URL")
            .env_remove("COUNTERSIGN_REDIS_URL"),
    };
}

/// `countersign serve` on a free port; its child and endpoint.
fn spawn(
    data_dir: &Path,
    reviewers: Option<usize>,
    production: Option<&Production>,
) -> anyhow::Result<(Child, String)> {
    let mut command = Command::new(std::env::current_exe()?);
    backends(&mut command, production);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args([
            "--rate-limit-per-second",
            "1000000",
            "--rate-limit-burst",
            "1000000",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        // The server's own log filter; `warn` unless the caller asks for more.
        .env(
            "RUST_LOG",
            std::env::var("COUNTERSIGN_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(n) = reviewers {
        command.args(["--reviewers", &n.to_string()]);
    }
    let mut child = command.spawn().context("starting countersign serve")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("server stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("countersign listening on ")
        .with_context(|| format!("unexpected first line from the server: {line:?}"))?
        .to_owned();
    Ok((child, format!("http://{addr}")))
}

/// CPU seconds (user + system) and memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_seconds: f64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
}

fn countersign(
    data_dir: &Path,
    production: Option<&Production>,
    args: &[&str],
) -> anyhow::Result<String> {
    let mut command = Command::new(std::env::current_exe()?);
    backends(&mut command, production);
    let output = command
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()?;
    if !output.status.success() {
        bail!(
            "countersign {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

impl Server {
    /// Starts `countersign serve` with `reviewers` workers on a fresh data
    /// directory (the first start creates tenant `default` and its admin key).
    pub fn start(reviewers: Option<usize>) -> anyhow::Result<Server> {
        Server::start_on(reviewers, None)
    }

    /// [`Server::start`] on the given backends (a fresh database: the first
    /// start bootstraps tenant `default` there too).
    pub fn start_on(
        reviewers: Option<usize>,
        production: Option<Production>,
    ) -> anyhow::Result<Server> {
        let data_dir = tempfile::tempdir()?;
        let (child, endpoint) = spawn(data_dir.path(), reviewers, production.as_ref())?;
        Ok(Server {
            child,
            endpoint,
            data_dir,
            reviewers,
            production,
        })
    }

    /// Stops the server (its data directory stays); [`Server::resume`] starts it again.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same data directory.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        let (child, endpoint) = spawn(
            self.data_dir.path(),
            self.reviewers,
            self.production.as_ref(),
        )?;
        self.child = child;
        self.endpoint = endpoint;
        Ok(())
    }

    /// Runs an admin command against the server's database.
    pub fn admin(&self, args: &[&str]) -> anyhow::Result<String> {
        countersign(self.data_dir.path(), self.production.as_ref(), args)
    }

    pub fn usage(&self) -> Usage {
        let pid = self.child.id();
        let ticks = 100.0; // USER_HZ on Linux
        let cpu_seconds = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                // Fields after the `(comm)`; utime and stime are the 12th and 13th of them.
                let rest = stat.rsplit_once(')')?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let utime: f64 = fields.get(11)?.parse().ok()?;
                let stime: f64 = fields.get(12)?.parse().ok()?;
                Some((utime + stime) / ticks)
            })
            .unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or_default()
        };
        Usage {
            cpu_seconds,
            rss_kib: kib("VmRSS:"),
            peak_rss_kib: kib("VmHWM:"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
