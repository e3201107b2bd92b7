//! Client commands: talk to a running server through the generated client.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
pub use countersign_proto::client::BearerAuth;
use countersign_proto::v1::{
    AwaitDecisionRequest, CancelProposalRequest, GetProposalRequest, SubmitRequest,
    proposal_service_client::ProposalServiceClient,
};
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

use crate::{output, spec_input::SpecArgs};

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The server, e.g. `http://127.0.0.1:50051`.
    #[arg(
        long,
        env = "COUNTERSIGN_ENDPOINT",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub endpoint: String,
    /// The API key (prefer the environment or a file to the command line).
    /// Without `--api-key` or `--api-key-file`: `COUNTERSIGN_API_KEY`, then
    /// `COUNTERSIGN_API_KEY_FILE`. A flag always beats the environment.
    #[arg(long, global = true)]
    pub api_key: Option<String>,
    /// A file holding the API key, such as `countersign-data/admin.key`.
    #[arg(long, global = true)]
    pub api_key_file: Option<PathBuf>,
    /// Print JSON for scripts.
    #[arg(long, global = true)]
    pub json: bool,
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ClientCommand {
    Submit(SpecArgs),
    Get {
        id: String,
    },
    Cancel {
        id: String,
        reason: String,
    },
    Await {
        id: String,
        timeout: std::time::Duration,
    },
}

/// The proposal ended other than APPROVED: the CLI exits with 3.
#[derive(Debug, thiserror::Error)]
#[error("proposal {id} is {state}, not approved")]
pub struct NotApproved {
    pub id: String,
    pub state: String,
}

/// A `deny` left the proposal other than REJECTED: the CLI exits with 3.
#[derive(Debug, thiserror::Error)]
#[error("proposal {id} is {state}, not rejected")]
pub struct NotRejected {
    pub id: String,
    pub state: String,
}

pub const EXIT_NOT_APPROVED: u8 = 3;

pub(crate) fn require_approved(proposal: &countersign_proto::v1::Proposal) -> anyhow::Result<()> {
    if proposal.state == countersign_proto::v1::ProposalState::Approved as i32 {
        Ok(())
    } else {
        Err(NotApproved {
            id: proposal.id.clone(),
            state: output::state_name(proposal.state),
        }
        .into())
    }
}

pub(crate) fn require_rejected(proposal: &countersign_proto::v1::Proposal) -> anyhow::Result<()> {
    if proposal.state == countersign_proto::v1::ProposalState::Rejected as i32 {
        Ok(())
    } else {
        Err(NotRejected {
            id: proposal.id.clone(),
            state: output::state_name(proposal.state),
        }
        .into())
    }
}

async fn await_decision(
    client: &mut ProposalServiceClient<InterceptedService<Channel, BearerAuth>>,
    id: String,
    timeout: std::time::Duration,
) -> anyhow::Result<countersign_proto::v1::Proposal> {
    let mut request = tonic::Request::new(AwaitDecisionRequest { id });
    request.set_timeout(timeout);
    Ok(client.await_decision(request).await?.into_inner())
}

fn read_key(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

impl ClientArgs {
    /// The key to call with: a flag given on the command line first (an
    /// exported coordinator key must not override `--api-key-file
    /// auditor.key`), then the environment.
    pub(crate) fn api_key(&self) -> anyhow::Result<String> {
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let key = self
            .api_key
            .clone()
            .map(Ok)
            .or_else(|| self.api_key_file.as_deref().map(read_key));
        let key = key
            .or_else(|| from_env("COUNTERSIGN_API_KEY").map(Ok))
            .or_else(|| from_env("COUNTERSIGN_API_KEY_FILE").map(|p| read_key(Path::new(&p))));
        match key {
            Some(key) => Ok(key?.trim().to_owned()),
            None => anyhow::bail!(
                "no API key: pass --api-key, --api-key-file or set COUNTERSIGN_API_KEY"
            ),
        }
    }

    pub async fn channel(&self) -> anyhow::Result<(Channel, BearerAuth)> {
        let auth = BearerAuth::new(&self.api_key()?)?;
        let channel = Endpoint::from_shared(self.endpoint.clone())
            .with_context(|| format!("bad endpoint `{}`", self.endpoint))?
            .connect()
            .await
            .with_context(|| format!("cannot reach {}", self.endpoint))?;
        Ok((channel, auth))
    }

    pub async fn proposals(
        &self,
    ) -> anyhow::Result<ProposalServiceClient<InterceptedService<Channel, BearerAuth>>> {
        let (channel, auth) = self.channel().await?;
        Ok(ProposalServiceClient::with_interceptor(channel, auth))
    }
}

pub async fn run(conn: &ClientArgs, command: ClientCommand) -> anyhow::Result<()> {
    let mut client = conn.proposals().await?;
    match command {
        ClientCommand::Submit(args) => {
            let spec = args.to_spec()?;
            let mut request = tonic::Request::new(SubmitRequest {
                spec: Some(spec),
                wait_for_decision: None,
            });
            if args.wait {
                // One call: the server answers with the decision, or with
                // the proposal still open once `--timeout` has passed; the
                // deadline leaves it a second more to answer.
                request.get_mut().wait_for_decision = Some(args.timeout.try_into()?);
                request.set_timeout(args.timeout + std::time::Duration::from_secs(1));
            }
            let response = client.submit(request).await?.into_inner();
            let proposal = response.proposal.unwrap_or_default();
            if conn.json {
                let mut value = output::proposal_json(&proposal);
                value["deduplicated"] = response.deduplicated.into();
                value["suppressed"] = response.suppressed.into();
                println!("{value}");
            } else {
                if response.deduplicated {
                    println!("(same idempotency key and spec: the earlier proposal)");
                }
                if response.suppressed {
                    println!(
                        "(suppressed: the same call was rejected moments ago; this is that \
                         proposal, not a new review)"
                    );
                }
                print!("{}", output::proposal_text(&proposal));
            }
            if args.wait {
                require_approved(&proposal)?;
            }
        }
        ClientCommand::Await { id, timeout } => {
            let proposal = await_decision(&mut client, id, timeout).await?;
            print_proposal(conn, &proposal);
            require_approved(&proposal)?;
        }
        ClientCommand::Get { id } => {
            let proposal = client
                .get_proposal(GetProposalRequest { id })
                .await?
                .into_inner();
            print_proposal(conn, &proposal);
        }
        ClientCommand::Cancel { id, reason } => {
            let proposal = client
                .cancel_proposal(CancelProposalRequest { id, reason })
                .await?
                .into_inner();
            print_proposal(conn, &proposal);
        }
    }
    Ok(())
}

pub(crate) fn print_proposal(conn: &ClientArgs, proposal: &countersign_proto::v1::Proposal) {
    if conn.json {
        println!("{}", output::proposal_json(proposal));
    } else {
        print!("{}", output::proposal_text(proposal));
    }
}
