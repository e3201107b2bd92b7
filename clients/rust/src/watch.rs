//! [`Watch`]: the review stream that resumes by itself.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use countersign_proto::{
    client::BearerAuth,
    v1::{self, notification_service_client::NotificationServiceClient},
};
use futures::{Stream, stream::BoxStream};
use tonic::{Code, Streaming, service::interceptor::InterceptedService, transport::Channel};

use crate::Error;

type Notifications = NotificationServiceClient<InterceptedService<Channel, BearerAuth>>;

/// The first pause before opening a stream again.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Ends of a stream that a new stream from the last cursor repairs: the
/// server went away or is shutting down, shed the stream, or the transport
/// broke. Any other code (a refused credential, a bad request, a cursor
/// past retention) ends the watch.
fn resumable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::Unknown
            | Code::Cancelled
            | Code::Internal
            | Code::DeadlineExceeded
            | Code::Aborted
    )
}

/// The cursor in a server's "…; resume from cursor N" (shutdown, a stream
/// that fell behind): it may be past the last event this stream showed,
/// when later ones did not match its filter.
fn resume_hint(message: &str) -> Option<u64> {
    let (_, rest) = message.rsplit_once("resume from cursor ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The tenant's review events as a [`Stream`], from [`Client::watch`]
/// (`crate::Client::watch`). After a disconnect it opens a new stream from
/// the last cursor it saw (the server's heartbeats move it too), waiting
/// 100 ms, then twice as long each time up to 10 s, until a stream delivers
/// again. It yields an error and ends only where resuming cannot help.
pub struct Watch {
    inner: BoxStream<'static, Result<v1::Notification, Error>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// Where a watch stands between events.
struct State {
    client: Notifications,
    request: v1::WatchRequest,
    stream: Option<Streaming<v1::Notification>>,
    backoff: Duration,
    ended: bool,
}

impl State {
    /// The next event, resuming as often as it takes; `None` once ended.
    async fn next(&mut self) -> Option<Result<v1::Notification, Error>> {
        if self.ended {
            return None;
        }
        loop {
            let status = match self.stream.as_mut() {
                None => match self.client.watch(self.request.clone()).await {
                    Ok(response) => {
                        self.stream = Some(response.into_inner());
                        continue;
                    }
                    Err(status) => Some(status),
                },
                Some(stream) => match stream.message().await {
                    Ok(Some(n)) => {
                        self.backoff = FIRST_BACKOFF;
                        self.request.after_cursor = Some(n.cursor);
                        if n.heartbeat {
                            continue;
                        }
                        return Some(Ok(n));
                    }
                    Ok(None) => None,
                    Err(status) => Some(status),
                },
            };
            self.stream = None;
            if let Some(status) = status {
                if let Some(hint) = resume_hint(status.message()) {
                    let after = self
                        .request
                        .after_cursor
                        .map_or(hint, |seen| seen.max(hint));
                    self.request.after_cursor = Some(after);
                }
                if !resumable(status.code()) {
                    self.ended = true;
                    return Some(Err(Error::Status(status)));
                }
            }
            tokio::time::sleep(self.backoff).await;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
    }
}

impl Watch {
    pub(crate) fn new(client: Notifications, request: v1::WatchRequest) -> Watch {
        let state = State {
            client,
            request,
            stream: None,
            backoff: FIRST_BACKOFF,
            ended: false,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        });
        Watch {
            inner: Box::pin(inner),
        }
    }
}

impl Stream for Watch {
    type Item = Result<v1::Notification, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
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
        assert_eq!(resume_hint("tenant store unavailable"), None);
        assert_eq!(resume_hint("resume from cursor x"), None);
    }
}
