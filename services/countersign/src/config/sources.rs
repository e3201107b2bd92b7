//! Where settings come from, in rising precedence: built-in defaults, the
//! TOML file, the environment, the flags (figment merges them). Each layer
//! is first checked on its own over the defaults, so an error names the key
//! and the one file, variable or flag it came from.
//!
//! Environment: `COUNTERSIGN_<SECTION>__<KEY>` (nested keys joined with
//! `__`) and, section names being single words, `COUNTERSIGN_<SECTION>_<KEY>`
//! set `<section>.<key>`; `COUNTERSIGN_LISTEN`, `_ROLE` and `_DATA_DIR` the
//! top-level keys; the names of earlier releases (`COUNTERSIGN_REVIEWERS`,
//! `_SIGNING_KEY`, …) their keys. Ignored: the client's and the tests'
//! variables, names whose first word is no section (another tool's), and
//! Kubernetes service links (`COUNTERSIGN_PORT`, `…_SERVICE_HOST`), which a
//! Service named `countersign…` injects into every pod. An unknown key in a
//! known section is an error.

use std::path::Path;

use anyhow::bail;
use figment::{
    Figment, Metadata, Profile, Provider,
    providers::{Format, Serialized, Toml},
    value::{Dict, Map, Value},
};

use super::{Config, ServeArgs, positive};

const SECTIONS: &[&str] = &[
    "log",
    "metrics",
    "console",
    "shutdown",
    "database",
    "redis",
    "review",
    "api",
    "watch",
    "suppression",
    "outbox",
    "audit",
    "model",
];

const TOP_LEVEL: &[&str] = &["listen", "role", "data_dir"];

/// Variables of the client commands and `migrate`, never the server's.
const NOT_SERVE: &[&str] = &[
    "config",
    "endpoint",
    "api_key",
    "api_key_file",
    "migrate_database_url",
    "service_role",
];

/// Names from before the sections, kept working.
const RENAMED: &[(&str, &str)] = &[
    ("reviewers", "review.workers"),
    ("rate_limit_per_second", "api.rate_limit_per_second"),
    ("rate_limit_burst", "api.rate_limit_burst"),
    ("request_timeout", "api.request_timeout"),
    ("credential_cache_ttl", "api.credential_cache_ttl"),
    ("event_retention", "watch.retention"),
    ("checkpoint_every", "audit.checkpoint_every"),
    ("signing_key", "audit.signing_key"),
    ("signing_key_file", "audit.signing_key_file"),
];

/// The key an environment variable sets, or `None` if it is not the server's.
pub fn env_key(var: &str) -> Option<String> {
    let name = var.strip_prefix("COUNTERSIGN_")?.to_ascii_lowercase();
    if name.is_empty()
        || NOT_SERVE.contains(&name.as_str())
        || name.starts_with("test_")
        || is_service_link(&name)
    {
        return None;
    }
    if let Some((_, key)) = RENAMED.iter().find(|(old, _)| *old == name) {
        return Some((*key).to_owned());
    }
    if TOP_LEVEL.contains(&name.as_str()) {
        return Some(name);
    }
    let (section, key) = match name.split_once("__") {
        Some((section, key)) => (section, key.replace("__", ".")),
        None => {
            let (section, key) = name.split_once('_')?;
            (section, key.to_owned())
        }
    };
    (SECTIONS.contains(&section) && !key.is_empty()).then(|| format!("{section}.{key}"))
}

/// `port`, `…_port`, `…service_host…`, `…service_port…`, `…port_<n>_tcp…`:
/// Kubernetes' service links (no setting of ours is named so).
fn is_service_link(name: &str) -> bool {
    let words: Vec<&str> = name.split('_').collect();
    name == "port"
        || name.ends_with("_port")
        || name.contains("service_host")
        || name.contains("service_port")
        || words.windows(3).any(|w| {
            w[0] == "port" && w[1].parse::<u16>().is_ok() && matches!(w[2], "tcp" | "udp" | "sctp")
        })
}

/// One setting from one variable or flag, named as its source.
#[derive(Debug, Clone)]
struct Setting {
    source: String,
    key: String,
    value: String,
}

impl Provider for Setting {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.source.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict = figment::util::nest(&self.key, Value::from(self.value.clone()))
            .into_dict()
            .ok_or_else(|| figment::Error::from(format!("{}: not a key", self.key)))?;
        Ok(Profile::Default.collect(dict))
    }
}

/// The configuration `serve` runs with: defaults < file < environment < flags.
pub fn load(args: &ServeArgs) -> anyhow::Result<Config> {
    let flags = args
        .given()
        .into_iter()
        .map(|(flag, key, value)| Setting {
            source: format!("flag {flag}"),
            key: key.to_owned(),
            value,
        })
        .collect();
    load_from(args.config.as_deref(), environment()?, flags)
}

/// The configuration without flags (what `config print` shows).
pub fn load_file_and_env(file: Option<&Path>) -> anyhow::Result<Config> {
    load_from(file, environment()?, Vec::new())
}

/// This process's server variables.
fn environment() -> anyhow::Result<Vec<Setting>> {
    let mut settings = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if env_key(name).is_none() {
            continue;
        }
        let Some(value) = value.to_str() else {
            bail!("environment variable {name}: the value is not UTF-8");
        };
        settings.extend(env_setting(name, value));
    }
    settings.sort_by(|a, b| a.source.cmp(&b.source));
    Ok(settings)
}

/// The setting of one server variable.
fn env_setting(name: &str, value: &str) -> Option<Setting> {
    Some(Setting {
        source: format!("environment variable {name}"),
        key: env_key(name)?,
        value: value.to_owned(),
    })
}

fn load_from(
    file: Option<&Path>,
    env: Vec<Setting>,
    flags: Vec<Setting>,
) -> anyhow::Result<Config> {
    let defaults = || Figment::from(Serialized::defaults(Config::default()));
    let mut all = defaults();
    if let Some(path) = file {
        if !path.is_file() {
            bail!("configuration file {}: not found", path.display());
        }
        check(defaults().merge(Toml::file_exact(path)))?;
        all = all.merge(Toml::file_exact(path));
    }
    for setting in env.into_iter().chain(flags) {
        check(defaults().merge(setting.clone()))?;
        all = all.merge(setting);
    }
    extract(&all)
}

fn check(figment: Figment) -> anyhow::Result<()> {
    extract(&figment).map(|_| ())
}

fn extract(figment: &Figment) -> anyhow::Result<Config> {
    let config = figment
        .extract_lossy::<Config>()
        .map_err(|error| anyhow::anyhow!("invalid configuration: {}", describe(error)))?;
    if let Some(key) = positive::first_zero(&config) {
        let from = figment.find_metadata(key).map(from).unwrap_or_default();
        bail!("invalid configuration: {key}: must be more than 0{from}");
    }
    Ok(config)
}

/// ` (from environment variable …)`: where a setting came from.
fn from(metadata: &Metadata) -> String {
    match &metadata.source {
        Some(source) => format!(" (from {} {source})", metadata.name),
        None => format!(" (from {})", metadata.name),
    }
}

/// `review.deadline: invalid duration … (from environment variable …)`.
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|e| {
            let path = &e.path;
            let from = e.metadata.as_ref().map(from).unwrap_or_default();
            if path.is_empty() {
                format!("{}{from}", e.kind)
            } else {
                format!("{}: {}{from}", path.join("."), e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
