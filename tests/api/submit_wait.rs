//! `SubmitRequest.wait_for_decision`: one call that submits and answers with
//! the decision, or with the proposal still open once the wait ends; the
//! call's deadline caps the wait, and the answer comes before it.

use std::time::Duration;

use countersign_domain::Role;
use countersign_proto::v1::{ProposalState, SubmitRequest, SubmitResponse};
use countersign_test_support::fixtures::wire_spec_on;
use tonic::{Code, Status};

use crate::escalation_support::{Backend, Scene, TENANT, on_both_backends, route};
use crate::helpers::{TestApp, assert_code};

on_both_backends!(
    a_submit_that_waits_answers_with_its_decision,
    a_deadline_shorter_than_the_wait_ends_it_with_the_proposal_still_open,
    a_wait_shorter_than_the_deadline_ends_first,
    a_waiting_submit_answers_with_the_decision_people_reach,
    a_negative_or_malformed_wait_is_invalid_argument_and_stores_nothing,
);

/// Submits `spec` as `key`, waiting up to `wait` within a call deadline of
/// `deadline`.
async fn submit_waiting(
    app: &TestApp,
    key: &str,
    spec: countersign_proto::v1::ProposalSpec,
    wait: prost_types::Duration,
    deadline: Duration,
) -> Result<SubmitResponse, Status> {
    let mut request = tonic::Request::new(SubmitRequest {
        spec: Some(spec),
        wait_for_decision: Some(wait),
    });
    request.set_timeout(deadline);
    app.client(key)
        .await
        .submit(request)
        .await
        .map(|r| r.into_inner())
}

fn wait(d: Duration) -> prost_types::Duration {
    d.try_into().expect("a wait in range")
}

async fn a_submit_that_waits_answers_with_its_decision(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    let long = wait(Duration::from_secs(30));

    let mut spec = wire_spec_on("node-01");
    spec.idempotency_key = "restart-node-01".into();
    let answer = submit_waiting(app, &key, spec.clone(), long, Duration::from_secs(60))
        .await
        .unwrap();
    let approved = answer.proposal.unwrap();
    assert_eq!(
        approved.state,
        ProposalState::Approved as i32,
        "{approved:?}"
    );
    let decision = approved.decision.expect("the decision");
    assert!(
        decision.receipt.is_some(),
        "an approval carries its receipt"
    );

    // A retry with the same key is the same proposal, decided.
    let again = submit_waiting(app, &key, spec, long, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(again.deduplicated);
    let again = again.proposal.unwrap();
    assert_eq!((again.id, again.state), (approved.id, approved.state));

    let answer = submit_waiting(
        app,
        &key,
        wire_spec_on("node-unknown"),
        long,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let rejected = answer.proposal.unwrap();
    assert_eq!(
        rejected.state,
        ProposalState::Rejected as i32,
        "{rejected:?}"
    );
    assert_eq!(rejected.decision.unwrap().receipt, None);
}

async fn a_deadline_shorter_than_the_wait_ends_it_with_the_proposal_still_open(backend: Backend) {
    let scene = Scene::new(backend, route("people", 1)).await;
    scene.target("node-a").await;
    // An hour's wait within a two-second call: the answer is the proposal,
    // waiting for people, before the deadline (not DEADLINE_EXCEEDED, which
    // would lose the accepted proposal's id).
    let answer = submit_waiting(
        scene.app(),
        &scene.sam,
        wire_spec_on("node-a"),
        wait(Duration::from_secs(3600)),
        Duration::from_secs(2),
    )
    .await
    .expect("an answer before the deadline");
    let open = answer.proposal.unwrap();
    assert_eq!(open.state, ProposalState::Escalated as i32, "{open:?}");
    assert!(!open.id.is_empty());
    // It is the accepted proposal, and people can still decide it.
    scene.approve(&scene.ann, &open.id).await.unwrap();
    assert_eq!(
        scene.decided(&open.id).await.state,
        ProposalState::Approved as i32
    );
}

async fn a_wait_shorter_than_the_deadline_ends_first(backend: Backend) {
    let scene = Scene::new(backend, route("people", 1)).await;
    scene.target("node-b").await;
    let answer = submit_waiting(
        scene.app(),
        &scene.sam,
        wire_spec_on("node-b"),
        wait(Duration::from_millis(1500)),
        Duration::from_secs(600),
    )
    .await
    .expect("an answer when the wait ends");
    let open = answer.proposal.unwrap();
    assert!(
        [
            ProposalState::Pending,
            ProposalState::Reviewing,
            ProposalState::Escalated
        ]
        .map(|s| s as i32)
        .contains(&open.state),
        "{open:?}"
    );
}

async fn a_waiting_submit_answers_with_the_decision_people_reach(backend: Backend) {
    let scene = Scene::new(backend, route("people", 1)).await;
    scene.target("node-c").await;
    let waiting = submit_waiting(
        scene.app(),
        &scene.sam,
        wire_spec_on("node-c"),
        wait(Duration::from_secs(60)),
        Duration::from_secs(120),
    );
    let vote = async {
        let inbox = loop {
            let inbox = scene.inbox(&scene.ann).await;
            if !inbox.is_empty() {
                break inbox;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let id = inbox[0].proposal.as_ref().unwrap().id.clone();
        scene.approve(&scene.ann, &id).await.unwrap();
        id
    };
    let (answer, voted) = tokio::join!(waiting, vote);
    let decided = answer.unwrap().proposal.unwrap();
    assert_eq!(decided.id, voted);
    assert_eq!(decided.state, ProposalState::Approved as i32, "{decided:?}");
    assert!(decided.decision.unwrap().receipt.is_some());
}

async fn a_negative_or_malformed_wait_is_invalid_argument_and_stores_nothing(backend: Backend) {
    let env = backend.start().await;
    let app = &env.app;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    for bad in [
        prost_types::Duration {
            seconds: -1,
            nanos: 0,
        },
        prost_types::Duration {
            seconds: 1,
            nanos: -5,
        },
        prost_types::Duration {
            seconds: 0,
            nanos: 1_000_000_000,
        },
    ] {
        let status = assert_code(
            submit_waiting(
                app,
                &key,
                wire_spec_on("node-01"),
                bad,
                Duration::from_secs(10),
            )
            .await,
            Code::InvalidArgument,
        );
        assert!(
            status.message().starts_with("wait_for_decision:"),
            "{status:?}"
        );
    }
    assert!(
        app.tenant_events(TENANT).await.is_empty(),
        "nothing was submitted"
    );
}
