//! What the end-to-end suite takes from the shared test support: `TestApp`
//! (the application built by `countersign`'s composition root) and the wire
//! fixtures.

pub use countersign_test_support::{
    app::{Options, TestApp, assert_code, test_reviewers, test_signing_key},
    fixtures::wire_spec as valid_spec,
};
