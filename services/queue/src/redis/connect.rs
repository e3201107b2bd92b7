//! Waiting for Redis: `serve` starts whether or not Redis answers, since
//! Submit needs only the store (the outbox keeps what it accepts); the queue is
//! connected in the background, once Redis answers.

use std::time::Duration;

use redis::IntoConnectionInfo;
use tokio_util::sync::CancellationToken;

use super::{RedisQueue, RedisQueueOptions};

/// The pause between two attempts to connect.
const RETRY_EVERY: Duration = Duration::from_secs(1);

impl RedisQueue {
    /// Connects to `url`, retrying every second until Redis answers; `None`
    /// once `stop` is cancelled first. The first failure is logged, with
    /// Redis's address only (never a password in the URL).
    pub async fn connect_retrying(
        url: &str,
        options: RedisQueueOptions,
        stop: &CancellationToken,
    ) -> Option<RedisQueue> {
        let address = url
            .into_connection_info()
            .map(|info| info.addr().to_string())
            .unwrap_or_default();
        let mut warned = false;
        loop {
            match RedisQueue::connect(url, options.clone()).await {
                Ok(queue) => {
                    tracing::info!(redis = %address, "review queue ready");
                    return Some(queue);
                }
                Err(error) => {
                    if !warned {
                        tracing::warn!(
                            redis = %address, %error,
                            "Redis unreachable; retrying (submissions wait in the outbox)"
                        );
                        warned = true;
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return None,
                () = tokio::time::sleep(RETRY_EVERY) => {}
            }
        }
    }
}
