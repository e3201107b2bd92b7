//! Settings where 0 makes no sense: a zero interval panics its timer (the
//! checkpoint task would die and the server run on without checkpoints), a
//! zero heartbeat floods every watcher, a zero deadline, lease, timeout or
//! attempt count fails every review or call, a zero buffer or pool cannot be
//! built. Each is refused at start, naming its key and where it was set.
//!
//! Where 0 means something it is allowed: `shutdown.grace` (stop without
//! draining), `api.credential_cache_ttl` (no cache), `suppression.capacity`
//! and `suppression.ttl` (nothing suppressed), `review.workers` and
//! `review.express_workers` (none in this process).

use super::Config;

/// Whether a configuration sets one key to 0.
type IsZero = fn(&Config) -> bool;

/// Every such key, and whether a configuration sets it to 0.
pub(super) const KEYS: &[(&str, IsZero)] = &[
    ("database.pool", |c| c.database.pool == 0),
    ("review.deadline", |c| c.review.deadline.is_zero()),
    ("review.attempts", |c| c.review.attempts == 0),
    ("review.lease", |c| c.review.lease.is_zero()),
    ("api.request_timeout", |c| c.api.request_timeout.is_zero()),
    ("console.session_ttl", |c| c.console.session_ttl.is_zero()),
    ("watch.heartbeat", |c| c.watch.heartbeat.is_zero()),
    ("watch.buffer", |c| c.watch.buffer == 0),
    ("watch.retention", |c| c.watch.retention.is_zero()),
    ("outbox.poll", |c| c.outbox.poll.is_zero()),
    ("outbox.sweep", |c| c.outbox.sweep.is_zero()),
    ("audit.checkpoint_every", |c| {
        c.audit.checkpoint_every.is_zero()
    }),
];

/// The first key that `config` sets to 0 where 0 makes no sense.
pub(super) fn first_zero(config: &Config) -> Option<&'static str> {
    KEYS.iter()
        .find(|(_, is_zero)| is_zero(config))
        .map(|(key, _)| *key)
}
