//! `countersign watch`: the tenant's review stream, live and readable, that
//! resumes by itself from its last cursor after a disconnect.

use clap::Args;
use countersign_client::Client;
use countersign_proto::v1::{EventKind, Notification, WatchRequest};
use futures::StreamExt;

use crate::{client::ClientArgs, output};

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Replay every event after this cursor first (0: all retained history).
    #[arg(long)]
    pub after: Option<u64>,
    /// Only this proposal (repeatable).
    #[arg(long = "proposal", value_name = "ID")]
    pub proposals: Vec<String>,
    /// Only proposals made on behalf of this operator.
    #[arg(long)]
    pub operator: Option<String>,
    /// Only the events that end a proposal.
    #[arg(long)]
    pub terminal_only: bool,
}

pub async fn run(conn: &ClientArgs, args: WatchArgs) -> anyhow::Result<()> {
    let (channel, _) = conn.channel().await?;
    let client = Client::with_channel(channel, &conn.api_key()?)?;
    // Resumes from its last cursor by itself, with backoff; it ends only on
    // an error that resuming cannot help.
    let mut stream = client.watch(WatchRequest {
        after_cursor: args.after,
        proposal_ids: args.proposals,
        operator: args.operator.unwrap_or_default(),
        terminal_only: args.terminal_only,
    });
    while let Some(notification) = stream.next().await {
        print_notification(conn.json, &notification?);
    }
    Ok(())
}

fn print_notification(json: bool, n: &Notification) {
    let event = EventKind::try_from(n.event)
        .map(|k| k.as_str_name().trim_start_matches("EVENT_KIND_").to_owned())
        .unwrap_or_else(|_| format!("UNKNOWN({})", n.event));
    let at = n
        .emitted_at
        .as_ref()
        .map(|t| output::time(countersign_proto::convert::millis(t)))
        .unwrap_or_default();
    let proposal = n.proposal.clone().unwrap_or_default();
    if json {
        let line = serde_json::json!({
            "cursor": n.cursor,
            "event": event,
            "emitted_at": at,
            "proposal": output::proposal_json(&proposal),
        });
        println!("{line}");
        return;
    }
    let spec = proposal.spec.clone().unwrap_or_default();
    let mut line = format!(
        "{at}  #{:<8} {:<28} {} {} → {event}",
        n.cursor, proposal.id, spec.action, spec.target
    );
    if let Some(d) = &proposal.decision
        && !d.missing_gates.is_empty()
    {
        line.push_str(&format!("  missing: {}", d.missing_gates.join(", ")));
    }
    println!("{line}");
}
