//! Countersign's Rust client.
//!
//! Countersign puts a second signature on every mutating operation that
//! automation proposes. This crate is how Rust code asks for it:
//!
//! - [`Client`]: connect with an endpoint and an API key (TLS when the URL
//!   is `https`), then [`submit`](Client::submit),
//!   [`await_decision`](Client::await_decision),
//!   [`submit_and_wait`](Client::submit_and_wait) (one call),
//!   [`get`](Client::get), [`cancel`](Client::cancel) and
//!   [`watch`](Client::watch), a stream of the tenant's review events that
//!   resumes from its last cursor by itself after a disconnect.
//! - [`ReviewGateLayer`]: a [`tower::Layer`] whose [`ReviewGate`] submits
//!   each write the wrapped service is asked to make, waits for the
//!   decision, checks the approval's signed receipt against the exact spec
//!   it submitted, and only then calls the wrapped service. Every other
//!   outcome is a [`GateError::NotApproved`] carrying the agent message and
//!   the proposal id; the wrapped service is never called.
//!
//! ```no_run
//! use countersign_client::{Client, Proposable, ReviewGateLayer, v1};
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! struct Restart { host: String }
//!
//! impl Proposable for Restart {
//!     fn proposal(&self) -> Option<v1::ProposalSpec> {
//!         Some(v1::ProposalSpec {
//!             action: "host_restart_service".into(),
//!             class: v1::OperationClass::Write as i32,
//!             target: self.host.clone(),
//!             blast_radius: v1::BlastRadius::SingleDevice as i32,
//!             reason: "nginx OOM".into(),
//!             ..Default::default()
//!         })
//!     }
//! }
//!
//! # async fn run(api_key: &str, public_key: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("http://127.0.0.1:50051", api_key).await?;
//! let restart = service_fn(|r: Restart| async move { Ok::<_, std::io::Error>(format!("restarted {}", r.host)) });
//! let mut gated = ReviewGateLayer::new(client, public_key).layer(restart);
//! let done = gated.ready().await?.call(Restart { host: "node-01".into() }).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod client;
mod gate;
mod watch;

pub use client::{Client, Error, Submitted};
pub use countersign_domain::receipt::{Receipt, ReceiptError};
/// The `countersign.v1` wire types: specs, proposals, decisions, receipts
/// and notifications, as the server sends them.
pub use countersign_proto::v1;
pub use gate::{
    Approval, Denial, GateError, NotApproved, Proposable, ReviewGate, ReviewGateLayer,
    current_approval,
};
pub use watch::Watch;
