//! Signed receipts on approvals: bound to the approved spec, the tenant and
//! the proposal, verified under the checkpoint key; nothing else carries one.

use std::time::Duration;

use countersign_domain::{
    Role,
    receipt::{DEFAULT_RECEIPT_TTL_MS, Expected},
};
use countersign_proto::{
    convert::{receipt_from_proto, spec_from_proto},
    v1::ProposalState,
};
use countersign_test_support::app::test_signing_key;

use crate::helpers::{TestApp, valid_spec};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn an_approval_carries_a_receipt_for_exactly_its_spec_and_a_rejection_none() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let spec = valid_spec();
    let digest = spec_from_proto(spec.clone()).unwrap().digest();
    let id = app.submit_id(&key, spec).await;
    let approved = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(approved.state, ProposalState::Approved as i32);
    let decision = approved.decision.unwrap();
    let receipt = receipt_from_proto(decision.receipt.clone().expect("an approval's receipt"));
    let public = test_signing_key().public_hex();
    let expected = Expected {
        tenant: "acme",
        spec_digest: &digest,
        proposal_id: Some(&id),
    };
    let decided_at = countersign_proto::convert::millis(decision.decided_at.as_ref().unwrap());
    assert_eq!(receipt.decided_at, decided_at);
    assert_eq!(receipt.expires_at, decided_at + DEFAULT_RECEIPT_TTL_MS);
    assert_eq!(receipt.verify(&public, &expected, decided_at + 1), Ok(()));
    assert!(
        receipt
            .verify(&public, &expected, receipt.expires_at)
            .is_err()
    );
    let other = Expected {
        tenant: "other",
        ..expected
    };
    assert!(receipt.verify(&public, &other, decided_at + 1).is_err());

    // The same receipt from GetProposal, and for an agent credential, which
    // runs operations on it.
    let fetched = app.get(&key, &id).await.unwrap().decision.unwrap().receipt;
    assert_eq!(fetched, decision.receipt);
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let seen_by_agent = app.get(&agent, &id).await.unwrap().decision.unwrap();
    assert_eq!(seen_by_agent.receipt, decision.receipt);
    assert!(seen_by_agent.reason.is_empty(), "agents stay terse");

    let mut doomed = valid_spec();
    doomed.target = "node-unknown".into();
    let id = app.submit_id(&key, doomed).await;
    let rejected = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(rejected.state, ProposalState::Rejected as i32);
    assert_eq!(rejected.decision.unwrap().receipt, None);
}
