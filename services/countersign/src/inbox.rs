//! `countersign inbox`, `approve` and `deny`: the on-call side of an
//! escalation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use countersign_proto::{
    convert::{MAX_PAGE_SIZE, millis},
    v1::{
        self, ListEscalationsRequest, ResolveRequest,
        escalation_service_client::EscalationServiceClient,
    },
};
use serde_json::json;

use crate::{
    client::{ClientArgs, print_proposal, require_approved, require_rejected},
    output,
};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How long an escalation has left at `now`, to the second: `42m 10s`, or
/// `expiring` once its time is up (the server rejects it moments later).
pub fn time_left(expires_at: i64, now: i64) -> String {
    let left = expires_at.saturating_sub(now);
    if left <= 0 {
        return "expiring".into();
    }
    // Rounded up: "1s" until the very end, never "0s".
    let secs = u64::try_from(left).unwrap_or(0).div_ceil(1000);
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

fn expires_at(e: &v1::Escalation) -> i64 {
    e.expires_at.as_ref().map_or(0, millis)
}

fn approvals(e: &v1::Escalation) -> Vec<&str> {
    e.votes
        .iter()
        .filter(|v| v.verdict == v1::Verdict::Approve as i32)
        .map(|v| v.person.as_str())
        .collect()
}

pub fn vote_json(v: &v1::Vote) -> serde_json::Value {
    json!({
        "person": v.person,
        "key_id": v.key_id,
        "verdict": output::enum_short(v1::Verdict::try_from(v.verdict).map(|v| v.as_str_name()), "VERDICT_"),
        "comment": v.comment,
        "at": v.at.as_ref().map(|t| output::time(millis(t))),
    })
}

fn escalation_json(e: &v1::Escalation, now: i64) -> serde_json::Value {
    let at = expires_at(e);
    json!({
        "proposal": output::proposal_json(&e.proposal.clone().unwrap_or_default()),
        "route_id": e.route_id,
        "approvals_required": e.approvals_required,
        "votes": e.votes.iter().map(vote_json).collect::<Vec<_>>(),
        "expires_at": output::time(at),
        "expires_in_seconds": (at.saturating_sub(now).max(0) / 1000),
    })
}

/// One line per escalation: what, where, under which route, how far its
/// approvals are and how long it has left.
fn escalation_line(e: &v1::Escalation, now: i64) -> String {
    let proposal = e.proposal.clone().unwrap_or_default();
    let spec = proposal.spec.unwrap_or_default();
    let radius = output::enum_short(
        v1::BlastRadius::try_from(spec.blast_radius).map(|b| b.as_str_name()),
        "BLAST_RADIUS_",
    );
    let approved = approvals(e);
    let mut left = time_left(expires_at(e), now);
    if left != "expiring" {
        left.push_str(" left");
    }
    let mut line = format!(
        "{:<28} {left:<17}  {} on {} ({radius})  route {}  {} of {} approvals",
        proposal.id,
        spec.action,
        spec.target,
        e.route_id,
        approved.len(),
        e.approvals_required,
    );
    if !approved.is_empty() {
        line.push_str(&format!(" ({})", approved.join(", ")));
    }
    let by = if proposal.submitted_by_person.is_empty() {
        proposal.submitted_by
    } else {
        proposal.submitted_by_person
    };
    line.push_str(&format!("  by {by}"));
    if !spec.operator.is_empty() {
        line.push_str(&format!("  operator {}", spec.operator));
    }
    line
}

/// What `countersign inbox` lists.
#[derive(Debug, Clone, clap::Args)]
pub struct InboxArgs {
    /// Every open escalation of the tenant, not only those waiting for your
    /// vote.
    #[arg(long)]
    pub all: bool,
    /// Only proposals whose action matches this glob (`*` any run of
    /// characters, `?` one).
    #[arg(long)]
    pub action: Option<String>,
    /// Only proposals on this target.
    #[arg(long)]
    pub target: Option<String>,
    /// Only escalations this route opened.
    #[arg(long)]
    pub route: Option<String>,
    /// Only proposals of this operator.
    #[arg(long)]
    pub operator: Option<String>,
}

impl InboxArgs {
    /// The request's filters (the server checks them).
    fn filter(&self) -> ListEscalationsRequest {
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        ListEscalationsRequest {
            page_size: MAX_PAGE_SIZE,
            action: text(&self.action),
            target: text(&self.target),
            route_id: text(&self.route),
            operator: text(&self.operator),
            awaiting_me: !self.all,
            ..ListEscalationsRequest::default()
        }
    }
}

/// `countersign inbox`: the open escalations waiting for the caller's vote
/// (`--all`: every open one of the tenant), oldest first, with how long each
/// has left.
pub async fn run_inbox(conn: &ClientArgs, args: &InboxArgs) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = EscalationServiceClient::with_interceptor(channel, auth);
    let filter = args.filter();
    let mut escalations = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_escalations(ListEscalationsRequest {
                page_token,
                ..filter.clone()
            })
            .await?
            .into_inner();
        escalations.extend(page.escalations);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let now = now_ms();
    if escalations.is_empty() && !conn.json {
        if args.all {
            println!("nothing waits for approval");
        } else {
            println!("nothing waits for you (`countersign inbox --all` lists every open one)");
        }
    }
    for e in &escalations {
        if conn.json {
            println!("{}", escalation_json(e, now));
        } else {
            println!("{}", escalation_line(e, now));
        }
    }
    Ok(())
}

/// `countersign approve` and `deny`: one vote. Exits as `submit --wait`
/// does: 0 when the proposal ends as the vote asks (approve: approved,
/// deny: rejected), 3 when it does not (yet), 1 when the vote is refused.
pub async fn run_resolve(
    conn: &ClientArgs,
    id: String,
    verdict: v1::Verdict,
    comment: String,
) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = EscalationServiceClient::with_interceptor(channel, auth);
    let proposal = client
        .resolve(ResolveRequest {
            proposal_id: id,
            verdict: verdict as i32,
            comment,
        })
        .await?
        .into_inner();
    print_proposal(conn, &proposal);
    match verdict {
        v1::Verdict::Reject => require_rejected(&proposal),
        _ => require_approved(&proposal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_counts_down_to_the_second_then_says_expiring() {
        assert_eq!(time_left(3_600_000, 0), "1h");
        assert_eq!(time_left(2_530_500, 0), "42m 11s");
        assert_eq!(time_left(1, 0), "1s");
        assert_eq!(time_left(0, 0), "expiring");
        assert_eq!(time_left(5, 10), "expiring");
    }

    #[test]
    fn a_line_says_how_long_is_left_beside_the_time_and_expiring_alone() {
        let escalation = |expires_at: i64| v1::Escalation {
            proposal: Some(v1::Proposal {
                id: "01P".into(),
                spec: Some(v1::ProposalSpec {
                    action: "db_failover".into(),
                    target: "db-02".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            route_id: "prod-db".into(),
            approvals_required: 2,
            expires_at: Some(prost_types::Timestamp {
                seconds: expires_at / 1000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let open = escalation_line(&escalation(1_799_000), 0);
        assert!(open.contains(" 29m 59s left "), "{open}");
        let due = escalation_line(&escalation(1_000), 5_000);
        assert!(due.contains(" expiring ") && !due.contains("left"), "{due}");
        // The action starts in the same column on every line.
        assert_eq!(open.find("db_failover"), due.find("db_failover"));
    }
}
