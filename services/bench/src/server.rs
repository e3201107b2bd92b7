//! The server under test: the `countersign` binary, `serve` on a free port
//! with a fresh data directory, in a process of its own, observed through
//! `/proc`.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context, bail};

use crate::{BenchArgs, production::Production};

pub struct Server {
    /// The `countersign` binary it runs.
    binary: PathBuf,
    child: Child,
    pub endpoint: String,
    /// Where the server answers `GET /metrics` (`host:port`).
    pub metrics: String,
    pub data_dir: tempfile::TempDir,
    reviewers: Option<usize>,
    /// PostgreSQL + Redis, or (none) the embedded default.
    pub production: Option<Production>,
    /// A configuration file `serve` reads (`--config`), for what only the
    /// file sets (`[[model.endpoints]]`).
    config: Option<PathBuf>,
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
    binary: &Path,
    data_dir: &Path,
    reviewers: Option<usize>,
    production: Option<&Production>,
    config: Option<&Path>,
) -> anyhow::Result<(Child, String, String)> {
    let mut command = Command::new(binary);
    backends(&mut command, production);
    command.arg("serve");
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--console-listen", "127.0.0.1:0"])
        .args([
            "--rate-limit-per-second",
            "1000000",
            "--rate-limit-burst",
            "1000000",
        ])
        // One load generator holds every watcher on one key: the per-key
        // and per-tenant stream caps would refuse `watch-fanout`'s.
        .args(["--watch-max-streams-per-key", "100000"])
        .args(["--watch-max-streams-per-tenant", "100000"])
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
    let mut stdout = BufReader::new(child.stdout.take().context("server stdout")?);
    stdout.read_line(&mut line)?;
    let mut metrics_line = String::new();
    stdout.read_line(&mut metrics_line)?;
    // The rest of its stdout is read and dropped: a closed pipe would fail
    // the server's next line.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = line
        .trim()
        .strip_prefix("countersign listening on ")
        .with_context(|| format!("unexpected first line from the server: {line:?}"))?
        .to_owned();
    let metrics = metrics_line
        .trim()
        .strip_prefix("countersign metrics on ")
        .with_context(|| format!("unexpected second line from the server: {metrics_line:?}"))?
        .to_owned();
    Ok((child, format!("http://{addr}"), metrics))
}

/// CPU seconds (user + system) and memory of a process, from `/proc`; on the
/// production backends also the CPU seconds of the PostgreSQL and Redis
/// servers (every process of theirs on this machine).
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_seconds: f64,
    /// This process's own CPU seconds (its ended threads' too: the trickles
    /// run on threads of their own): the load generator shares the cores.
    pub generator_cpu_seconds: f64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub postgres_cpu_seconds: Option<f64>,
    pub redis_cpu_seconds: Option<f64>,
}

/// One process's line of `/proc/<pid>/stat`: (pid, parent, command name,
/// its own CPU ticks, the ticks of the children it has reaped).
fn stat_of(pid: &str) -> Option<(u32, u32, String, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    // After `(comm)`: state, ppid, …; utime, stime, cutime, cstime are the
    // 12th to 15th.
    Some((
        pid.parse().ok()?,
        fields.get(1)?.parse().ok()?,
        comm,
        tick(11)? + tick(12)?,
        tick(13)? + tick(14)?,
    ))
}

/// One process's own CPU seconds, user and system (0 when it is gone).
pub fn cpu_seconds_of(pid: u32) -> f64 {
    stat_of(&pid.to_string()).map_or(0.0, |(_, _, _, own, _)| own as f64 / 100.0) // USER_HZ
}

/// CPU seconds of every process named `comm` on this machine, with what its
/// tree's root has reaped: PostgreSQL's backends come and go, and the ticks
/// of one that ended are counted in the postmaster's children time.
pub fn cpu_of_processes(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let stats: Vec<_> = dir
        .flatten()
        .filter_map(|e| stat_of(e.file_name().to_str()?))
        .filter(|(_, _, name, _, _)| name == comm)
        .collect();
    let ours: std::collections::HashSet<u32> = stats.iter().map(|s| s.0).collect();
    let ticks: u64 = stats
        .iter()
        .map(|(_, parent, _, own, reaped)| own + if ours.contains(parent) { 0 } else { *reaped })
        .sum();
    ticks as f64 / 100.0 // USER_HZ on Linux
}

fn countersign(
    binary: &Path,
    data_dir: &Path,
    production: Option<&Production>,
    args: &[&str],
) -> anyhow::Result<String> {
    let mut command = Command::new(binary);
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
    /// Starts `countersign serve` with the run's reviewer workers on a fresh
    /// data directory (the first start creates tenant `default` and its admin key).
    pub fn start(args: &BenchArgs) -> anyhow::Result<Server> {
        Server::start_on(args, None)
    }

    /// [`Server::start`] on the given backends (a fresh database: the first
    /// start bootstraps tenant `default` there too).
    pub fn start_on(args: &BenchArgs, production: Option<Production>) -> anyhow::Result<Server> {
        Server::start_configured(args, production, None)
    }

    /// [`Server::start_on`] with `serve --config <config>`.
    pub fn start_configured(
        args: &BenchArgs,
        production: Option<Production>,
        config: Option<PathBuf>,
    ) -> anyhow::Result<Server> {
        let binary = args.server_binary()?;
        let reviewers = args.reviewers;
        let mut data_dir = tempfile::tempdir()?;
        if args.production.keep && production.is_none() {
            data_dir.disable_cleanup(true);
            eprintln!(
                "kept: the embedded server's data in {}",
                data_dir.path().display()
            );
        }
        let (child, endpoint, metrics) = spawn(
            &binary,
            data_dir.path(),
            reviewers,
            production.as_ref(),
            config.as_deref(),
        )?;
        Ok(Server {
            binary,
            child,
            endpoint,
            metrics,
            data_dir,
            reviewers,
            production,
            config,
        })
    }

    /// Stops the server (its data directory stays); [`Server::resume`] starts it again.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same data directory.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        let (child, endpoint, metrics) = spawn(
            &self.binary,
            self.data_dir.path(),
            self.reviewers,
            self.production.as_ref(),
            self.config.as_deref(),
        )?;
        self.child = child;
        self.endpoint = endpoint;
        self.metrics = metrics;
        Ok(())
    }

    /// Runs an admin command against the server's database.
    pub fn admin(&self, args: &[&str]) -> anyhow::Result<String> {
        countersign(
            &self.binary,
            self.data_dir.path(),
            self.production.as_ref(),
            args,
        )
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn usage(&self) -> Usage {
        let pid = self.child.id();
        let cpu_seconds = cpu_seconds_of(pid);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or_default()
        };
        let production = self.production.is_some();
        Usage {
            cpu_seconds,
            generator_cpu_seconds: cpu_seconds_of(std::process::id()),
            rss_kib: kib("VmRSS:"),
            peak_rss_kib: kib("VmHWM:"),
            postgres_cpu_seconds: production.then(|| cpu_of_processes("postgres")),
            redis_cpu_seconds: production.then(|| cpu_of_processes("redis-server")),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that has ended still counts: its time is in its parent's
    /// reaped ticks (as a PostgreSQL backend's is in the postmaster's).
    #[test]
    fn the_cpu_of_a_process_tree_includes_the_children_it_has_reaped() {
        let ours = stat_of(&std::process::id().to_string())
            .expect("own stat")
            .2;
        let before = cpu_of_processes(&ours);
        let status = Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let spent = cpu_of_processes(&ours) - before;
        assert!(spent >= 0.05, "{spent} s counted for a busy child");
    }
}
