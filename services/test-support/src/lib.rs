//! What the workspace's tests share, so that each fixture has one home:
//! proposal specs, SOPs and targets ([`fixtures`]), a database of its own per
//! test on either backend ([`sqlite`], [`postgres`]), a Redis key prefix per
//! test ([`redis`]), a stand-in model provider ([`fake_model`]) and, with the `app` feature, [`app::TestApp`]: the
//! application as `countersign serve` builds it, on port 0.
//!
//! A dev-dependency only, but for `countersign-bench`, which starts the fake
//! model provider in its own process (never in `countersign`'s tree). The
//! servers the PostgreSQL and Redis helpers use come from
//! `tests/services/{postgres,redis}.sh`; without their variables a test
//! fails, it never skips.

#[cfg(feature = "app")]
pub mod app;
pub mod fake_model;
pub mod fixtures;
pub mod postgres;
pub mod redis;
pub mod sqlite;

/// `prefix` and 16 random hex digits: a name no other test picks.
pub fn random_name(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// The variable `name`; a missing one fails the test with how to start the
/// test servers.
pub fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: start the test servers and export their URLs with \
             `eval \"$(tests/services/postgres.sh)\"; eval \"$(tests/services/redis.sh)\"` \
             (tests/run does)"
        )
    })
}
