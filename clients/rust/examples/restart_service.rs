//! Gates a (fake) "restart service" tool behind Countersign.
//!
//! ```sh
//! export COUNTERSIGN_ENDPOINT=http://127.0.0.1:50051
//! export COUNTERSIGN_API_KEY=$(countersign admin key create --tenant default --role coordinator --name sre-bot)
//! export COUNTERSIGN_PUBLIC_KEY=$(countersign admin signing-key show)
//! cargo run -p countersign-client --example restart_service -- node-01 nginx
//! ```
//!
//! The restart runs only when Countersign approves this exact restart and
//! its signed receipt checks out; otherwise the program says why and exits
//! 3 (not approved) or 4 (Countersign unreachable, or no decision in time).

use std::{process::ExitCode, time::Duration};

use countersign_client::{
    Client, Denial, GateError, Proposable, ReviewGateLayer, current_approval, v1,
};
use tower::{Layer, Service, ServiceExt, service_fn};

/// The tool's request: restart `service` on `host`.
struct Restart {
    host: String,
    service: String,
}

impl Proposable for Restart {
    fn proposal(&self) -> Option<v1::ProposalSpec> {
        let parameters = prost_types::Struct {
            fields: [(
                "service".to_owned(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(self.service.clone())),
                },
            )]
            .into(),
        };
        Some(v1::ProposalSpec {
            action: "host_restart_service".into(),
            class: v1::OperationClass::Write as i32,
            target: self.host.clone(),
            blast_radius: v1::BlastRadius::SingleDevice as i32,
            reason: format!(
                "{} on {} is unhealthy; restarting it",
                self.service, self.host
            ),
            parameters: Some(parameters),
            rollback_plan: format!("systemctl start {}", self.service),
            ..Default::default()
        })
    }
}

/// The tool itself; the real one would run `systemctl restart` on the host.
async fn restart(request: Restart) -> Result<String, std::convert::Infallible> {
    let approval = current_approval().expect("a gated call runs only under an approval");
    println!(
        "restarting {} on {}: approved as {}, receipt valid until {} ms",
        request.service, request.host, approval.proposal.id, approval.receipt.expires_at
    );
    Ok("restarted".into())
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(host), Some(service)) = (args.next(), args.next()) else {
        eprintln!("usage: restart_service HOST SERVICE");
        return ExitCode::from(2);
    };
    let settings = (
        env("COUNTERSIGN_ENDPOINT"),
        env("COUNTERSIGN_API_KEY"),
        env("COUNTERSIGN_PUBLIC_KEY"),
    );
    let (Ok(endpoint), Ok(api_key), Ok(public_key)) = settings else {
        eprintln!("set COUNTERSIGN_ENDPOINT, COUNTERSIGN_API_KEY and COUNTERSIGN_PUBLIC_KEY");
        return ExitCode::from(2);
    };
    let client = match Client::connect_lazy(&endpoint, &api_key) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let mut gated = ReviewGateLayer::new(client, public_key)
        .deadline(Duration::from_secs(60))
        .layer(service_fn(restart));
    let outcome = match gated.ready().await {
        Ok(ready) => ready.call(Restart { host, service }).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(GateError::NotApproved(refusal)) => {
            let id = refusal.proposal_id.as_deref().unwrap_or("none");
            eprintln!("not restarted: {} (proposal {id})", refusal.agent_message);
            if !refusal.detail.is_empty() {
                eprintln!("{}", refusal.detail);
            }
            match refusal.denial {
                Denial::Unreachable | Denial::DeadlineExceeded => ExitCode::from(4),
                _ => ExitCode::from(3),
            }
        }
        Err(GateError::Inner(never)) => match never {},
    }
}
