//! `timeout`: every unary call has a deadline — the caller's `grpc-timeout`
//! where it is shorter, else the configured default. Long polls (such as
//! `AwaitDecision`) may run as long as the caller asks, up to a ceiling.
//! Expiry answers `DEADLINE_EXCEEDED`. The layer hands the call its
//! [`CallDeadline`], so that a call that waits on purpose can end its wait
//! in time to answer.

use std::time::Duration;

use countersign_proto::rpc::Kind;
use tonic::Status;

use super::{Answer, Middleware, Next, Request, Resolved, middleware_layer, reply};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For ordinary calls.
    pub default: Duration,
    /// For long polls, the most a caller may ask for.
    pub long_poll_max: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            default: Duration::from_secs(30),
            long_poll_max: Duration::from_secs(15 * 60),
        }
    }
}

/// Answer this much before the caller's own deadline, so that the caller gets
/// `DEADLINE_EXCEEDED` from us rather than a local cancellation (tonic's own
/// deadline timers on both ends would otherwise race ours).
fn answer_margin(asked: Duration) -> Duration {
    (asked / 10).min(Duration::from_millis(200))
}

/// Parses a `grpc-timeout` header: up to eight digits and a unit (H M S m u n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// When the call must have answered (the layer's limit), in the request's
/// extensions for the services.
#[derive(Debug, Clone, Copy)]
pub struct CallDeadline(pub tokio::time::Instant);

impl CallDeadline {
    /// The deadline of the call `request` carries, if it came through the
    /// layer.
    pub fn of<T>(request: &tonic::Request<T>) -> Option<CallDeadline> {
        request.extensions().get::<CallDeadline>().copied()
    }

    /// When a wait inside the call ends so the answer still makes it:
    /// a tenth of the time left, at most 100 ms, is kept for building and
    /// sending it.
    pub fn wait_until(self) -> tokio::time::Instant {
        let left = self
            .0
            .saturating_duration_since(tokio::time::Instant::now());
        let reserve = (left / 10).min(Duration::from_millis(100));
        self.0.checked_sub(reserve).unwrap_or(self.0)
    }
}

#[derive(Clone)]
pub struct TimeoutLayer {
    timeouts: Timeouts,
}

impl TimeoutLayer {
    pub fn new(timeouts: Timeouts) -> Self {
        TimeoutLayer { timeouts }
    }
}

middleware_layer!(TimeoutLayer, Timeout);

impl Middleware for TimeoutLayer {
    fn call<S: Next>(&self, mut inner: S, mut req: Request) -> Answer<S::Error> {
        let asked = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let long_poll = Resolved::of(&req).is_some_and(|rpc| rpc.kind == Kind::LongPoll);
        let ceiling = if long_poll {
            self.timeouts.long_poll_max
        } else {
            self.timeouts.default
        };
        let limit = asked.map_or(ceiling, |asked| (asked - answer_margin(asked)).min(ceiling));
        req.extensions_mut()
            .insert(CallDeadline(tokio::time::Instant::now() + limit));
        Box::pin(async move {
            match tokio::time::timeout(limit, inner.call(req)).await {
                Ok(result) => result,
                Err(_) => Ok(reply(Status::deadline_exceeded(format!(
                    "no answer within {} ms",
                    limit.as_millis()
                )))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("9n"), Some(Duration::from_nanos(9)));
    }

    /// A call that takes 2 s, to `path` as `trace` resolves it.
    async fn call_slow(
        timeouts: Timeouts,
        path: &str,
        grpc_timeout: Option<&str>,
    ) -> (Duration, Option<String>) {
        let resolved = Resolved(countersign_proto::rpc::find(path));
        call_slow_as(timeouts, path, Some(resolved), grpc_timeout).await
    }

    async fn call_slow_as(
        timeouts: Timeouts,
        path: &str,
        resolved: Option<Resolved>,
        grpc_timeout: Option<&str>,
    ) -> (Duration, Option<String>) {
        use tower::{Layer, ServiceExt, service_fn};
        let slow = service_fn(|_req: Request| async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
        });
        let mut request = http::Request::builder().uri(path);
        if let Some(resolved) = resolved {
            request = request.extension(resolved);
        }
        if let Some(t) = grpc_timeout {
            request = request.header("grpc-timeout", t);
        }
        let started = std::time::Instant::now();
        let response = TimeoutLayer::new(timeouts)
            .layer(slow)
            .oneshot(request.body(tonic::body::Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_owned());
        (started.elapsed(), status)
    }

    const DEADLINE_EXCEEDED: &str = "4";

    #[tokio::test]
    async fn a_call_past_the_default_deadline_is_deadline_exceeded() {
        let timeouts = Timeouts {
            default: Duration::from_millis(50),
            long_poll_max: Duration::from_secs(60),
        };
        let (_, status) = call_slow(
            timeouts,
            "/countersign.v1.ProposalService/GetProposal",
            None,
        )
        .await;
        assert_eq!(status.as_deref(), Some(DEADLINE_EXCEEDED));
    }

    #[tokio::test]
    async fn a_shorter_caller_deadline_wins_and_a_longer_one_is_capped() {
        let timeouts = Timeouts {
            default: Duration::from_secs(60),
            long_poll_max: Duration::from_secs(60),
        };
        let (_, status) = call_slow(
            timeouts,
            "/countersign.v1.ProposalService/GetProposal",
            Some("50m"),
        )
        .await;
        assert_eq!(status.as_deref(), Some(DEADLINE_EXCEEDED));
        let capped = Timeouts {
            default: Duration::from_millis(50),
            long_poll_max: Duration::from_secs(60),
        };
        let (_, status) = call_slow(
            capped,
            "/countersign.v1.ProposalService/GetProposal",
            Some("1H"),
        )
        .await;
        assert_eq!(status.as_deref(), Some(DEADLINE_EXCEEDED));
    }

    #[tokio::test]
    async fn a_long_poll_may_wait_as_long_as_its_caller_asks() {
        let timeouts = Timeouts {
            default: Duration::from_millis(50),
            long_poll_max: Duration::from_secs(60),
        };
        let (_, status) = call_slow(
            timeouts,
            "/countersign.v1.ProposalService/AwaitDecision",
            Some("10S"),
        )
        .await;
        assert_eq!(status, None, "the slow call completed");
    }

    #[tokio::test(start_paused = true)]
    async fn the_kind_of_call_is_the_one_trace_resolved_not_the_path() {
        let timeouts = Timeouts {
            default: Duration::from_millis(50),
            long_poll_max: Duration::from_secs(60),
        };
        let await_decision = "/countersign.v1.ProposalService/AwaitDecision";
        let (_, status) = call_slow_as(timeouts, await_decision, None, Some("10S")).await;
        assert_eq!(
            status.as_deref(),
            Some(DEADLINE_EXCEEDED),
            "unresolved: an ordinary call"
        );
        let long_poll = Resolved(countersign_proto::rpc::find(await_decision));
        let (_, status) = call_slow_as(
            timeouts,
            "/countersign.v1.ProposalService/GetProposal",
            Some(long_poll),
            Some("10S"),
        )
        .await;
        assert_eq!(status, None, "resolved as a long poll: it waits");
    }

    #[test]
    fn malformed_grpc_timeouts_are_ignored() {
        for bad in ["", "S", "10", "123456789S", "1x", "-1S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
