//! Logging: human-readable on stderr; `RUST_LOG` overrides the level.

use tracing_subscriber::EnvFilter;

/// Servers log at `info`; client and admin commands only warn, so that their
/// stdout stays clean for scripts.
pub fn init(server: bool) {
    let default = if server { "info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
