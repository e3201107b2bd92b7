//! A stand-in for a model provider: an OpenAI-compatible
//! `/v1/chat/completions` on loopback, port 0, answering each request as the
//! test's script says (a completion with given text, a raw body, an error
//! status, any of them after a delay) and keeping every request it was sent.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

/// One answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A chat completion whose message content is this text, with token counts.
    Completion(String),
    /// This body as it is, status 200.
    Body(String),
    /// An empty answer with this status (429, 500, …).
    Status(u16),
    /// The answer after a pause.
    After(Duration, Box<Answer>),
}

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: Value,
    pub authorization: Option<String>,
}

type Script = dyn Fn(&Value) -> Answer + Send + Sync;

#[derive(Clone)]
struct Shared {
    script: Arc<Script>,
    received: Arc<Mutex<Vec<Received>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

/// A running fake endpoint; it stops when dropped.
pub struct FakeModel {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    most_in_flight: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeModel {
    /// Serves `script`'s answer to each request (given the request's JSON body).
    pub async fn start(script: impl Fn(&Value) -> Answer + Send + Sync + 'static) -> FakeModel {
        let received = Arc::new(Mutex::new(Vec::new()));
        let most_in_flight = Arc::new(AtomicUsize::new(0));
        let shared = Shared {
            script: Arc::new(script),
            received: received.clone(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            most_in_flight: most_in_flight.clone(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake model endpoint");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        FakeModel {
            addr,
            received,
            most_in_flight,
            _stop: stop,
        }
    }

    /// The base URL to configure (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The most requests it was answering at one time.
    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    /// Every request so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

/// A base URL where nothing listens: a port bound and released.
pub async fn refusing_base_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a port");
    let addr = listener.local_addr().expect("its address");
    drop(listener);
    format!("http://{addr}")
}

async fn complete(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.most_in_flight.fetch_max(now, Ordering::SeqCst);
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let answer = (shared.script)(&body);
    shared
        .received
        .lock()
        .expect("not poisoned")
        .push(Received {
            body,
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
    let response = respond(answer).await;
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

async fn respond(mut answer: Answer) -> Response {
    loop {
        match answer {
            Answer::After(pause, then) => {
                tokio::time::sleep(pause).await;
                answer = *then;
            }
            Answer::Completion(text) => {
                return axum::Json(json!({
                    "id": "fake-1", "object": "chat.completion", "model": "fake",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                              "prompt_tokens_details": {"cached_tokens": 64}},
                }))
                .into_response();
            }
            Answer::Body(body) => return (StatusCode::OK, body).into_response(),
            Answer::Status(code) => {
                return StatusCode::from_u16(code)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                    .into_response();
            }
        }
    }
}
