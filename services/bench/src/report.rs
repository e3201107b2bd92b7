//! Figures of one run: a table for people, JSON for the record.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// From a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |us: u64| us as f64 / 1000.0;
        Percentiles {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerUsage {
    pub cpu_seconds: f64,
    pub cpu_cores_used: f64,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// On the production backends, over the same window: PostgreSQL's and
    /// Redis's CPU seconds (every process of theirs on the machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_cpu_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cpu_seconds: Option<f64>,
    /// The load generator's own CPU seconds over the same window, where the
    /// scenario reads it: it runs on the same cores as the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator_cpu_seconds: Option<f64>,
}

impl ServerUsage {
    /// Adds `other`'s CPU seconds (the server's, and the backends' and the
    /// generator's where both windows read them) to these: two windows
    /// summed, `wall` long together. Memory is the later window's.
    pub fn absorb(&mut self, other: ServerUsage, wall: std::time::Duration) {
        let sum = |mine: Option<f64>, theirs: Option<f64>| Some(mine? + theirs?);
        self.cpu_seconds += other.cpu_seconds;
        self.cpu_cores_used = self.cpu_seconds / wall.as_secs_f64().max(1e-9);
        self.rss_mib = other.rss_mib;
        self.peak_rss_mib = other.peak_rss_mib;
        self.postgres_cpu_seconds = sum(self.postgres_cpu_seconds, other.postgres_cpu_seconds);
        self.redis_cpu_seconds = sum(self.redis_cpu_seconds, other.redis_cpu_seconds);
        self.generator_cpu_seconds = sum(self.generator_cpu_seconds, other.generator_cpu_seconds);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn here() -> Machine {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib: (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub started_at: String,
    pub machine: Machine,
    pub params: serde_json::Value,
    pub duration_s: f64,
    /// Operations completed per second (decisions for submit-decide).
    pub throughput_per_s: f64,
    pub latencies: BTreeMap<String, Percentiles>,
    pub outcomes: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub server: ServerUsage,
    /// Limits of this machine measured in the same run.
    pub baselines: BTreeMap<String, f64>,
    /// Our figure over the matching baseline.
    pub ratios: BTreeMap<String, f64>,
    /// What the measured run wrote per decision (`writes.rs`): rows, index
    /// entries, the database's log bytes, each table's rows.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub writes_per_decision: BTreeMap<String, f64>,
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n== {} ({} cores, {} GiB) ==\nparams      {}\nduration    {:.2} s\nthroughput  {:.0} /s\n",
            self.scenario,
            self.machine.cores,
            self.machine.memory_gib,
            self.params,
            self.duration_s,
            self.throughput_per_s
        );
        if !self.latencies.is_empty() {
            out.push_str(&format!(
                "\n{:<26} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
                "latency (ms)", "count", "p50", "p90", "p99", "max"
            ));
            for (name, p) in &self.latencies {
                out.push_str(&format!(
                    "{:<26} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
                    name, p.count, p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
                ));
            }
        }
        let line = |title: &str, map: &BTreeMap<String, u64>| {
            if map.is_empty() {
                format!("{title:<12}none\n")
            } else {
                let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{title:<12}{}\n", items.join("  "))
            }
        };
        out.push('\n');
        out.push_str(&line("outcomes", &self.outcomes));
        out.push_str(&line("errors", &self.errors));
        out.push_str(&format!(
            "server      cpu {:.1} s ({:.2} cores), rss {:.1} MiB, peak {:.1} MiB\n",
            self.server.cpu_seconds,
            self.server.cpu_cores_used,
            self.server.rss_mib,
            self.server.peak_rss_mib
        ));
        // CPU per operation: the server's and, on production, the backends'.
        let operations = self.throughput_per_s * self.duration_s;
        let per_op = |seconds: f64| seconds * 1000.0 / operations.max(1.0);
        let mut per = vec![format!("server {:.2}", per_op(self.server.cpu_seconds))];
        for (name, seconds) in [
            ("postgres", self.server.postgres_cpu_seconds),
            ("redis", self.server.redis_cpu_seconds),
            ("generator", self.server.generator_cpu_seconds),
        ] {
            if let Some(seconds) = seconds {
                out.push_str(&format!(
                    "{name:<12}cpu {seconds:.1} s ({:.2} cores)\n",
                    seconds / self.duration_s.max(1e-9)
                ));
                per.push(format!("{name} {:.2}", per_op(seconds)));
            }
        }
        out.push_str(&format!("cpu ms/op   {}\n", per.join("  ")));
        for (name, value) in &self.baselines {
            // Rates whole; small figures (milliseconds per transaction) with
            // their decimals.
            let digits = if value.abs() < 10.0 { 3 } else { 0 };
            out.push_str(&format!("baseline    {name} = {value:.digits$}\n"));
        }
        for (name, value) in &self.writes_per_decision {
            out.push_str(&format!("per decision {name} = {value:.2}\n"));
        }
        for (name, value) in &self.ratios {
            out.push_str(&format!("ratio       {name} = {value:.3}\n"));
        }
        out
    }

    pub fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let stamp = self.started_at.replace([':', '.'], "-");
        let path = dir.join(format!("{}-{stamp}.json", self.scenario));
        std::fs::write(&path, serde_json::to_string_pretty(self)?)?;
        Ok(path)
    }
}

/// Adds the counts of `from` to `into`, each name after `prefix` (an outcome
/// or error tally of one phase, merged into a report's).
pub(crate) fn add_counts(
    into: &mut BTreeMap<String, u64>,
    prefix: &str,
    from: &BTreeMap<String, u64>,
) {
    for (k, v) in from {
        *into.entry(format!("{prefix}{k}")).or_default() += v;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::ServerUsage;

    #[test]
    fn two_windows_sum_every_process_both_read_and_the_later_memory() {
        let window = |cpu: f64, generator: Option<f64>, rss: f64| ServerUsage {
            cpu_seconds: cpu,
            cpu_cores_used: 0.0,
            rss_mib: rss,
            peak_rss_mib: rss,
            postgres_cpu_seconds: None,
            redis_cpu_seconds: Some(cpu / 10.0),
            generator_cpu_seconds: generator,
        };
        let mut sum = window(1.0, Some(0.25), 50.0);
        sum.absorb(window(3.0, Some(0.5), 60.0), Duration::from_secs(2));
        assert_eq!(sum.cpu_seconds, 4.0);
        assert_eq!(sum.cpu_cores_used, 2.0);
        assert_eq!(sum.generator_cpu_seconds, Some(0.75));
        assert_eq!(sum.redis_cpu_seconds, Some(0.4));
        assert_eq!(sum.postgres_cpu_seconds, None);
        assert_eq!(sum.rss_mib, 60.0);
        // A window that did not read a process leaves its sum unknown.
        sum.absorb(window(1.0, None, 70.0), Duration::from_secs(3));
        assert_eq!(sum.generator_cpu_seconds, None);
    }
}
