//! One review request per proposal, at most `max_concurrency` in flight per
//! endpoint, each bounded by the endpoint's timeout. The answer is read
//! strictly: a chat completion's text is parsed as a verdict, anything else
//! is a named failure.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use countersign_domain::model::{
    Failure, ModelOutcome, Prompt, TokenUsage, parse_completion, parse_reply,
};
use tokio::sync::Semaphore;

use crate::endpoint::{EndpointConfig, EndpointError};

/// The most of an answer's body that is read; a longer one is `malformed`.
const MAX_BODY: usize = 1 << 20;

/// What one review request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The endpoint's name and the model it serves, for the record.
    pub endpoint: String,
    pub model: String,
    pub outcome: ModelOutcome,
    pub usage: TokenUsage,
    /// From sending the request to the end of its answer (not the wait for a
    /// turn).
    pub latency: Duration,
}

struct Endpoint {
    config: EndpointConfig,
    key: Option<String>,
    turns: Arc<Semaphore>,
    http: reqwest::Client,
}

/// The configured endpoints, by name.
#[derive(Clone, Default)]
pub struct Models {
    endpoints: Arc<HashMap<String, Endpoint>>,
}

impl Models {
    /// Checks every endpoint and reads its key; the first problem is the
    /// error.
    pub fn new(configs: Vec<EndpointConfig>) -> Result<Models, EndpointError> {
        // The TLS provider for https endpoints; installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut endpoints = HashMap::new();
        for config in configs {
            let key = config.key()?;
            let http = reqwest::Client::builder()
                .timeout(config.timeout)
                // A redirect would send the prompt (and key) somewhere the
                // operator did not configure.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| EndpointError::Invalid {
                    name: config.name.clone(),
                    message: format!("building its HTTP client: {e}"),
                })?;
            let endpoint = Endpoint {
                turns: Arc::new(Semaphore::new(config.max_concurrency)),
                key,
                http,
                config,
            };
            if let Some(old) = endpoints.insert(endpoint.config.name.clone(), endpoint) {
                return Err(EndpointError::Duplicate(old.config.name));
            }
        }
        Ok(Models {
            endpoints: Arc::new(endpoints),
        })
    }

    /// The configured endpoints' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.endpoints.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Requests the endpoints may have in flight at once, all together.
    pub fn capacity(&self) -> usize {
        self.endpoints
            .values()
            .map(|e| e.config.max_concurrency)
            .sum()
    }

    /// Asks `endpoint` to review the proposal in `prompt`. Never fails: an
    /// unknown endpoint, a refused connection, an error status, a timeout or
    /// an answer that is not a chat completion is a [`Failure`].
    pub async fn review(&self, endpoint: &str, prompt: &Prompt) -> Review {
        let Some(ep) = self.endpoints.get(endpoint) else {
            tracing::warn!(
                endpoint,
                "a model profile names an endpoint this server does not configure"
            );
            return Review {
                endpoint: endpoint.to_owned(),
                model: String::new(),
                outcome: ModelOutcome::Failed(Failure::ProviderError),
                usage: TokenUsage::default(),
                latency: Duration::ZERO,
            };
        };
        // Closed only if the semaphore is closed, which it never is.
        let _turn = ep.turns.acquire().await;
        let started = Instant::now();
        let (outcome, usage) = match ep.call(prompt).await {
            Ok(body) => match parse_completion(&body) {
                Some(completion) => (
                    ModelOutcome::Replied(parse_reply(&completion.text)),
                    completion.usage,
                ),
                None => (
                    ModelOutcome::Failed(Failure::Malformed),
                    TokenUsage::default(),
                ),
            },
            Err(failure) => (ModelOutcome::Failed(failure), TokenUsage::default()),
        };
        Review {
            endpoint: endpoint.to_owned(),
            model: ep.config.model.clone(),
            outcome,
            usage,
            latency: started.elapsed(),
        }
    }
}

impl Endpoint {
    /// The answer's body, or why there is none.
    async fn call(&self, prompt: &Prompt) -> Result<String, Failure> {
        let body = prompt.request_body(&self.config.model, self.config.json_mode);
        let mut request = self
            .http
            .post(self.config.completions_url())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let name = &self.config.name;
        let mut response = request.send().await.map_err(|e| classify(name, &e))?;
        let status = response.status();
        if !status.is_success() {
            tracing::warn!(endpoint = %name, %status, "the model endpoint answered with an error");
            return Err(Failure::ProviderError);
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(name, &e))? {
            if bytes.len() + chunk.len() > MAX_BODY {
                tracing::warn!(endpoint = %name, "the model endpoint's answer is over {MAX_BODY} bytes");
                return Err(Failure::Malformed);
            }
            bytes.extend_from_slice(&chunk);
        }
        String::from_utf8(bytes).map_err(|_| Failure::Malformed)
    }
}

fn classify(endpoint: &str, e: &reqwest::Error) -> Failure {
    if e.is_timeout() {
        tracing::warn!(endpoint, "the model endpoint did not answer in time");
        Failure::Timeout
    } else {
        tracing::warn!(endpoint, error = %e, "the model endpoint could not be reached");
        Failure::ProviderError
    }
}
