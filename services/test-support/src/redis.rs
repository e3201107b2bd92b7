//! The test Redis (`COUNTERSIGN_TEST_REDIS_URL`) and a key prefix per test,
//! so that tests sharing it never see each other's keys.

pub const URL_VAR: &str = "COUNTERSIGN_TEST_REDIS_URL";

/// The test Redis's URL; a missing variable fails the test.
pub fn url() -> String {
    crate::env_var(URL_VAR)
}

/// A key prefix no other test uses.
pub fn prefix() -> String {
    crate::random_name("countersign-test:")
}
