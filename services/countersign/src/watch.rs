//! `countersign watch`: the tenant's review stream, live and readable, that
//! resumes by itself from its last cursor after a disconnect.

use std::time::Duration;

use clap::Args;
use countersign_proto::v1::{
    EventKind, Notification, WatchRequest, notification_service_client::NotificationServiceClient,
};
use tonic::Code;

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

/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Ends that a new stream from the last cursor repairs.
fn resumable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::Unknown
            | Code::Cancelled
            | Code::Internal
            | Code::DeadlineExceeded
    )
}

pub async fn run(conn: &ClientArgs, args: WatchArgs) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = NotificationServiceClient::with_interceptor(channel, auth);
    let mut after = args.after;
    let mut backoff = Duration::from_millis(250);
    loop {
        let request = WatchRequest {
            after_cursor: after,
            proposal_ids: args.proposals.clone(),
            operator: args.operator.clone().unwrap_or_default(),
            terminal_only: args.terminal_only,
        };
        let ended = match client.watch(request).await {
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(n)) => {
                            backoff = Duration::from_millis(250);
                            after = Some(n.cursor);
                            if !n.heartbeat {
                                print_notification(conn.json, &n);
                            }
                        }
                        Ok(None) => break None,
                        Err(status) => break Some(status),
                    }
                }
            }
            Err(status) => Some(status),
        };
        // The server names the cursor to resume from (it may be past the last
        // event this stream showed, when later ones did not match the filter).
        if let Some(hint) = ended.as_ref().and_then(|s| resume_hint(s.message())) {
            after = Some(after.map_or(hint, |seen| seen.max(hint)));
        }
        match ended {
            Some(status) if !resumable(status.code()) => return Err(status.into()),
            Some(status) => eprintln!(
                "stream ended ({}: {}); resuming{}",
                output::code_name(status.code()),
                status.message(),
                after
                    .map(|c| format!(" after cursor {c}"))
                    .unwrap_or_default()
            ),
            None => eprintln!("stream closed; resuming"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The cursor in a server's "…; resume from cursor N" (shutdown, fallen behind).
fn resume_hint(message: &str) -> Option<u64> {
    let (_, rest) = message.rsplit_once("resume from cursor ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::resume_hint;

    #[test]
    fn the_resume_hint_is_read_from_the_servers_message() {
        assert_eq!(
            resume_hint("server shutting down; resume from cursor 42"),
            Some(42)
        );
        assert_eq!(
            resume_hint("watcher fell behind: resume from cursor 7"),
            Some(7)
        );
        assert_eq!(resume_hint("tenant store unavailable"), None);
        assert_eq!(resume_hint("resume from cursor x"), None);
    }
}
