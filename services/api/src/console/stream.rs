//! The Stream page's feed: the tenant's `Watch`, as the signed-in key may
//! see it, relayed as server-sent events. Each event's id is its tenant
//! cursor, so a browser that reconnects (it sends the last id back as
//! `Last-Event-ID`) resumes where it left off, with no gap and no duplicate
//! (Watch's own replay-then-live handover). Filters: the operator (Watch's
//! own), the action and the outcome (here). Heartbeats carry the cursor too.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::{Query, State as Shared},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use countersign_proto::v1::{
    DecisionOutcome, EventKind, Notification, ProposalState, WatchRequest,
    notification_service_server::NotificationService,
};
use http::HeaderMap;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};

use super::{
    State,
    handlers::signed,
    wire::{Refused, to_json},
};

/// Events relayed ahead of a slow browser before the relay waits for it
/// (Watch's own buffer and its cut-off of a stalled watcher stand behind).
const RELAY: usize = 64;

/// How often an open stream checks that its session is still live: a
/// stream ends within this of its sign-out, expiry or key's revocation.
const SESSION_CHECK: Duration = Duration::from_secs(5);

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct StreamFilter {
    /// `approve`, `reject`, `timed_out`, `cancelled` or `escalated`.
    outcome: String,
    action: String,
    operator: String,
}

impl StreamFilter {
    /// Whether the page shows `notification`: decisions, escalations and
    /// votes, suppressed retries and breaker trips, as the filters allow.
    fn shows(&self, notification: &Notification) -> bool {
        let Some(proposal) = &notification.proposal else {
            return false;
        };
        let shown_kind = matches!(
            notification.event(),
            EventKind::Approved
                | EventKind::Rejected
                | EventKind::TimedOut
                | EventKind::Cancelled
                | EventKind::Escalated
                | EventKind::Vote
                | EventKind::Suppressed
                | EventKind::BreakerTripped
        );
        let action = proposal.spec.as_ref().map_or("", |s| s.action.as_str());
        shown_kind
            && (self.action.is_empty() || self.action == action)
            && (self.outcome.is_empty() || self.outcome == outcome(notification))
    }
}

/// The outcome the page filters and colours by.
fn outcome(notification: &Notification) -> &'static str {
    let Some(proposal) = &notification.proposal else {
        return "";
    };
    match proposal.state() {
        ProposalState::Escalated => return "escalated",
        ProposalState::Cancelled => return "cancelled",
        _ => {}
    }
    match proposal.decision.as_ref().map(|d| d.outcome()) {
        Some(DecisionOutcome::Approve) => "approve",
        Some(DecisionOutcome::Reject) => "reject",
        Some(DecisionOutcome::TimedOut) => "timed_out",
        _ => "",
    }
}

fn event(notification: &Notification) -> Event {
    let id = notification.cursor.to_string();
    if notification.heartbeat {
        return Event::default().id(id).event("heartbeat").data("{}");
    }
    let mut data = to_json(notification, "countersign.v1.Notification");
    data["outcome"] = json!(outcome(notification));
    Event::default()
        .id(id)
        .event("notification")
        .data(data.to_string())
}

/// The last event of a stream that ends: why, as the API would say it.
fn ended(code: &str, message: &str) -> Event {
    Event::default()
        .event("end")
        .data(json!({ "code": code, "message": message }).to_string())
}

pub async fn stream(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Query(filter): Query<StreamFilter>,
) -> Result<Response, Refused> {
    let caller = signed(&state, &headers).await?;
    // The cursor a reconnecting browser sends back; anything else starts live.
    let after_cursor = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut watch = state
        .services
        .notifications
        .watch(caller.request(WatchRequest {
            after_cursor,
            proposal_ids: Vec::new(),
            operator: filter.operator.clone(),
            terminal_only: false,
        }))
        .await?
        .into_inner();
    let (tx, rx) = mpsc::channel(RELAY);
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let mut check = tokio::time::interval(SESSION_CHECK);
        check.tick().await;
        loop {
            let next = tokio::select! {
                next = watch.next() => next,
                () = shutdown.cancelled() => break,
                () = tx.closed() => break,
                _ = check.tick() => {
                    if let Err(refused) = signed(&state, &headers).await {
                        let _ = tx.send(ended(refused.code, &refused.message)).await;
                        break;
                    }
                    continue;
                }
            };
            let sent = match next {
                None => break,
                Some(Ok(n)) if n.heartbeat || filter.shows(&n) => tx.send(event(&n)).await,
                Some(Ok(_)) => Ok(()),
                Some(Err(status)) => {
                    let _ = tx
                        .send(ended(Refused::from(status.clone()).code, status.message()))
                        .await;
                    break;
                }
            };
            if sent.is_err() {
                break;
            }
        }
    });
    let events = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[cfg(test)]
mod tests {
    use countersign_proto::v1::{Decision, Proposal, ProposalSpec};

    use super::*;

    fn decided(kind: EventKind, action: &str, outcome: DecisionOutcome) -> Notification {
        Notification {
            cursor: 7,
            event: kind as i32,
            proposal: Some(Proposal {
                state: ProposalState::Rejected as i32,
                spec: Some(ProposalSpec {
                    action: action.into(),
                    ..Default::default()
                }),
                decision: Some(Decision {
                    outcome: outcome as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_filters_keep_decisions_of_the_action_and_outcome_asked_for() {
        let rejected = decided(EventKind::Rejected, "restart", DecisionOutcome::Reject);
        let all = StreamFilter::default();
        assert!(all.shows(&rejected));
        assert!(!all.shows(&decided(
            EventKind::Submitted,
            "restart",
            DecisionOutcome::Unspecified
        )));
        let by_action = StreamFilter {
            action: "drain".into(),
            ..Default::default()
        };
        assert!(!by_action.shows(&rejected));
        let by_outcome = StreamFilter {
            outcome: "approve".into(),
            ..Default::default()
        };
        assert!(!by_outcome.shows(&rejected));
        let matching = StreamFilter {
            outcome: "reject".into(),
            action: "restart".into(),
            ..Default::default()
        };
        assert!(matching.shows(&rejected));
    }
}
