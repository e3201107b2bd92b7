//! One configured endpoint, and its key, read once at start from the
//! environment or a file; the key is never logged or printed.

use std::{fmt, path::PathBuf, time::Duration};

/// Where an endpoint's API key comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum ApiKey {
    /// No key (a local server).
    None,
    /// The value of this environment variable.
    Env(String),
    /// The contents of this file, surrounding whitespace trimmed.
    File(PathBuf),
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiKey::None => f.write_str("None"),
            ApiKey::Env(name) => write!(f, "Env({name})"),
            ApiKey::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

/// An endpoint as the operator configures it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// What tenants' profiles name it by.
    pub name: String,
    /// The server's base URL; requests go to `{base_url}/v1/chat/completions`
    /// (a base URL ending in `/v1` is taken as it is).
    pub base_url: String,
    pub model: String,
    pub api_key: ApiKey,
    /// For one request, from sending it to its whole answer.
    pub timeout: Duration,
    /// Requests in flight at most; the rest wait for a turn.
    pub max_concurrency: usize,
    /// Ask for a JSON object (`response_format`); off for servers that
    /// refuse the field.
    pub json_mode: bool,
}

/// Why an endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("model endpoint `{0}` is configured twice")]
    Duplicate(String),
    #[error("model endpoint `{name}`: {message}")]
    Invalid { name: String, message: String },
}

impl EndpointConfig {
    /// The chat completions URL.
    pub(crate) fn completions_url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        }
    }

    /// Checks the configuration and reads the key.
    pub(crate) fn key(&self) -> Result<Option<String>, EndpointError> {
        let invalid = |message: String| EndpointError::Invalid {
            name: self.name.clone(),
            message,
        };
        if self.name.is_empty() {
            return Err(invalid("needs a name".into()));
        }
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "base_url must start with http:// or https:// (got `{}`)",
                self.base_url
            )));
        }
        if self.model.is_empty() {
            return Err(invalid("needs a model".into()));
        }
        if self.timeout.is_zero() || self.max_concurrency == 0 {
            return Err(invalid(
                "timeout and max_concurrency must be positive".into(),
            ));
        }
        let key = match &self.api_key {
            ApiKey::None => return Ok(None),
            ApiKey::Env(var) => std::env::var(var)
                .map_err(|_| invalid(format!("the environment variable {var} is not set")))?,
            ApiKey::File(path) => std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("reading its key file {}: {e}", path.display())))?,
        };
        let key = key.trim().to_owned();
        if key.is_empty() {
            return Err(invalid("its API key is empty".into()));
        }
        Ok(Some(key))
    }
}
