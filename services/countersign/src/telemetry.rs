//! Logging on stderr: human-readable, or one JSON object per line for
//! `serve` with `log.format = "json"`; `RUST_LOG` overrides the level.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Client, admin and bench commands only warn, so that their stdout stays
/// clean for scripts; `migrate` logs at `info`.
pub fn init(server: bool) {
    let default = if server { "info" } else { "warn" };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(std::io::stderr)
        .try_init();
}

/// `serve`: at `info`, in the configured format.
pub fn init_server(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter("info"))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}
