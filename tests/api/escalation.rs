//! Human countersignature through the API, on both backends: who may vote on
//! an escalated proposal (four eyes), one vote per person, quorum, the first
//! responder, expiry, cancel, what waits and what watches, what is cached,
//! a restart, the agents' view and the decision log.

use std::time::Duration;

use countersign_domain::{
    Role,
    decision::AGENT_REFUSAL,
    escalation::{AGENT_AWAITING_HUMAN, AGENT_HUMAN_APPROVED},
};
use countersign_proto::v1::{
    self, DecisionOutcome, EventKind, GetDecisionRequest, ListEscalationsRequest, ProposalState,
    Verdict, VerifyLogRequest, WatchRequest, audit_service_client::AuditServiceClient,
};
use countersign_test_support::fixtures::wire_spec_on;
use tonic::Code;

use crate::escalation_support::{
    ANN, BOB, Backend, CAROL, Scene, TENANT, WAIT, collect, escalations, expiring, human_gate,
    on_both_backends, person_key, refused, resolve, route, state, until_event, wait_for,
};

on_both_backends!(
    the_submitters_person_may_not_approve_with_another_key,
    the_operator_may_not_approve,
    the_owner_of_the_submitting_agent_may_not_approve,
    an_agent_key_may_not_vote,
    a_key_without_a_person_may_not_vote,
    an_auditor_may_not_vote,
    another_tenants_on_call_finds_nothing,
    one_vote_per_person_and_the_same_verdict_again_is_answered_with_the_proposal,
    of_two_concurrent_first_votes_exactly_one_decides,
    one_reject_among_approvals_rejects_at_once,
    two_distinct_people_approve_a_quorum_of_two,
    a_vote_after_expiry_is_refused_naming_the_state,
    a_vote_after_a_cancel_is_refused_naming_the_state,
    await_decision_waits_through_escalated_and_its_deadline_decides_nothing,
    votes_and_the_escalation_are_events_on_the_watch_stream,
    a_human_reject_suppresses_an_identical_retry_and_an_escalation_is_never_cached,
    escalations_survive_a_restart_and_expire_on_time,
    an_agent_sees_awaiting_human_approval_then_the_terse_outcome_never_votes,
    the_decision_log_records_the_votes_and_verify_log_covers_them,
    the_inbox_filters_by_action_target_route_operator_and_what_awaits_the_caller,
    a_bad_inbox_filter_is_refused_naming_its_field,
    a_resumed_watch_replays_each_event_of_an_escalation_as_it_went_out_live,
);

/// `key`'s `verdict` on `id` is refused PERMISSION_DENIED naming the
/// four-eyes `rule`; the refusal's message.
/// `key`'s `verdict` on `id` is refused FAILED_PRECONDITION, the message
/// saying `why` (the proposal's state, or the earlier vote).
async fn too_late(scene: &Scene, key: &str, id: &str, verdict: Verdict, why: &str) {
    let message = refused(
        scene.vote(key, id, verdict, "").await,
        Code::FailedPrecondition,
    );
    assert!(message.contains(why), "{message}");
}

async fn denied(scene: &Scene, key: &str, id: &str, verdict: Verdict, rule: &str) -> String {
    let message = refused(
        scene.vote(key, id, verdict, "").await,
        Code::PermissionDenied,
    );
    assert!(message.contains(&format!("({rule})")), "{message}");
    message
}

async fn the_submitters_person_may_not_approve_with_another_key(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    // sam's on-call key, the name written differently: the same person.
    let sams_oncall = person_key(
        scene.app(),
        TENANT,
        Role::Oncall,
        Some("  Sam@Example.COM "),
        false,
    )
    .await;
    denied(&scene, &sams_oncall, &id, Verdict::Approve, "submitter").await;
    denied(&scene, &sams_oncall, &id, Verdict::Reject, "submitter").await;
    let proposal = scene.app().get(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&proposal), ProposalState::Escalated);
    assert!(proposal.decision.unwrap().votes.is_empty());
}

async fn the_operator_may_not_approve(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    scene.target("n1").await;
    let mut spec = wire_spec_on("n1");
    spec.operator = "Bob@example.com".into();
    let id = scene.app().submit_id(&scene.sam, spec).await;
    wait_for(scene.app(), &scene.sam, &id, ProposalState::Escalated).await;
    denied(&scene, &scene.bob, &id, Verdict::Approve, "operator").await;
    // Someone else may.
    let approved = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&approved), ProposalState::Approved, "{approved:?}");
}

async fn the_owner_of_the_submitting_agent_may_not_approve(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let bot = person_key(scene.app(), TENANT, Role::Coordinator, Some(ANN), true).await;
    let id = scene.escalate_as(&bot, "n1").await;
    let message = denied(&scene, &scene.ann, &id, Verdict::Approve, "submitter").await;
    assert!(message.contains("agent"), "the rule says why: {message}");
    let approved = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&approved), ProposalState::Approved, "{approved:?}");
}

async fn an_agent_key_may_not_vote(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let agent = person_key(scene.app(), TENANT, Role::Oncall, Some(BOB), true).await;
    for verdict in [Verdict::Approve, Verdict::Reject] {
        denied(&scene, &agent, &id, verdict, "agent").await;
    }
    let admin_agent = person_key(scene.app(), TENANT, Role::Admin, Some(BOB), true).await;
    denied(&scene, &admin_agent, &id, Verdict::Approve, "agent").await;
}

async fn a_key_without_a_person_may_not_vote(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    for role in [Role::Oncall, Role::Admin] {
        let nobody = person_key(scene.app(), TENANT, role, None, false).await;
        denied(&scene, &nobody, &id, Verdict::Approve, "person").await;
        // It may still read and watch.
        assert_eq!(
            state(&scene.app().get(&nobody, &id).await.unwrap()),
            ProposalState::Escalated
        );
    }
    let blank = person_key(scene.app(), TENANT, Role::Oncall, Some("   "), false).await;
    denied(&scene, &blank, &id, Verdict::Approve, "person").await;

    // Without a person a key still submits and watches.
    let bot = person_key(scene.app(), TENANT, Role::Coordinator, None, false).await;
    let submitted = scene.escalate_as(&bot, "n2").await;
    let proposal = scene.app().get(&bot, &submitted).await.unwrap();
    assert_eq!(proposal.submitted_by_person, "", "{proposal:?}");
    let mut stream = scene.watch_from_start(&bot).await;
    until_event(&mut stream, &submitted, EventKind::Escalated).await;
    denied(&scene, &bot, &submitted, Verdict::Reject, "person").await;
    let approved = scene.approve(&scene.ann, &submitted).await.unwrap();
    assert_eq!(state(&approved), ProposalState::Approved, "{approved:?}");
}

async fn an_auditor_may_not_vote(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let auditor = person_key(scene.app(), TENANT, Role::Auditor, Some(BOB), false).await;
    denied(&scene, &auditor, &id, Verdict::Approve, "role").await;
    // A coordinator neither, unless the route lets coordinators approve.
    let coordinator = person_key(scene.app(), TENANT, Role::Coordinator, Some(BOB), false).await;
    denied(&scene, &coordinator, &id, Verdict::Approve, "role").await;
}

async fn another_tenants_on_call_finds_nothing(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let stranger = person_key(scene.app(), "globex", Role::Oncall, Some(BOB), false).await;
    let absent = refused(scene.approve(&stranger, &id).await, Code::NotFound);
    let missing = refused(
        scene.approve(&stranger, "01NOSUCHPROPOSAL").await,
        Code::NotFound,
    );
    // A foreign id answers exactly as a missing one does.
    assert_eq!(
        absent.replace(&id, "ID"),
        missing.replace("01NOSUCHPROPOSAL", "ID")
    );
    assert!(scene.inbox(&stranger).await.is_empty());
    assert_eq!(scene.inbox(&scene.ann).await.len(), 1);
    assert_eq!(
        state(&scene.app().get(&scene.ann, &id).await.unwrap()),
        ProposalState::Escalated
    );
}

async fn one_vote_per_person_and_the_same_verdict_again_is_answered_with_the_proposal(
    backend: Backend,
) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    let first = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&first), ProposalState::Escalated);
    assert_eq!(first.decision.as_ref().unwrap().votes.len(), 1);

    // Another verdict from the same person, through another key of theirs.
    let anns_admin = person_key(scene.app(), TENANT, Role::Admin, Some(ANN), false).await;
    too_late(&scene, &anns_admin, &id, Verdict::Reject, "already voted").await;
    // The same verdict again: the proposal as it is, nothing recorded twice.
    let again = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&again), ProposalState::Escalated);
    let votes = &again.decision.as_ref().unwrap().votes;
    assert_eq!(votes.len(), 1, "{votes:?}");
    assert_eq!(votes[0].person, ANN);

    let approved = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&approved), ProposalState::Approved);
    // Repeating a recorded verdict after the decision is still OK.
    let after = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&after), ProposalState::Approved);
    assert_eq!(after.decision.unwrap().votes.len(), 2);
    too_late(&scene, &scene.ann, &id, Verdict::Reject, "approved").await;
}

async fn of_two_concurrent_first_votes_exactly_one_decides(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    for round in 0..4 {
        let id = scene.escalate(&format!("n{round}")).await;
        // Reject against approve on even rounds, two approvals on odd ones.
        let bobs = if round % 2 == 0 {
            Verdict::Reject
        } else {
            Verdict::Approve
        };
        let (a, b) = tokio::join!(
            resolve(scene.app(), &scene.ann, &id, Verdict::Approve, "first"),
            resolve(scene.app(), &scene.bob, &id, bobs, "first"),
        );
        let winners: Vec<&v1::Proposal> = [&a, &b]
            .into_iter()
            .filter_map(|r| r.as_ref().ok())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {a:?} / {b:?}");
        let loser = [a.as_ref().err(), b.as_ref().err()]
            .into_iter()
            .flatten()
            .next()
            .unwrap();
        assert_eq!(loser.code(), Code::FailedPrecondition, "{loser:?}");
        let decided = scene.app().get(&scene.ann, &id).await.unwrap();
        let outcome = state(&decided);
        assert!(
            matches!(outcome, ProposalState::Approved | ProposalState::Rejected),
            "{decided:?}"
        );
        // The loser is told the outcome.
        let named = format!("{outcome:?}").to_ascii_lowercase();
        assert!(loser.message().contains(&named), "{loser:?} vs {named}");
        assert_eq!(decided.decision.as_ref().unwrap().votes.len(), 1);
        let terminal = scene
            .app()
            .proposal_events(TENANT, &id)
            .await
            .iter()
            .filter(|e| e.kind.is_terminal())
            .count();
        assert_eq!(terminal, 1, "round {round}");
    }
}

async fn one_reject_among_approvals_rejects_at_once(backend: Backend) {
    let scene = Scene::new(backend, route("r", 3)).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    let rejected = scene
        .vote(&scene.bob, &id, Verdict::Reject, "the migration is running")
        .await
        .unwrap();
    assert_eq!(state(&rejected), ProposalState::Rejected, "{rejected:?}");
    let human = human_gate(&rejected);
    assert!(!human.passed);
    assert!(
        human.detail.contains(BOB) && human.detail.contains("the migration is running"),
        "{human:?}"
    );
    let decision = rejected.decision.as_ref().unwrap();
    assert_eq!(decision.outcome, DecisionOutcome::Reject as i32);
    assert_eq!(decision.votes.len(), 2);
    assert_eq!(decision.route_id, "r");
    too_late(&scene, &scene.carol, &id, Verdict::Approve, "rejected").await;
}

async fn two_distinct_people_approve_a_quorum_of_two(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    let one = scene.approve(&scene.ann, &id).await.unwrap();
    assert_eq!(state(&one), ProposalState::Escalated);
    let waiting = one.decision.as_ref().unwrap();
    assert_eq!(waiting.outcome, DecisionOutcome::Unspecified as i32);
    assert!(waiting.reason.contains("1 of 2 approvals"), "{waiting:?}");
    // The inbox shows the proposal, its gate results, the route, the votes
    // so far and when it expires.
    let inbox = scene.inbox(&scene.bob).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].approvals_required, 2);
    assert_eq!(inbox[0].votes.len(), 1);
    assert_eq!(inbox[0].votes[0].person, ANN);
    assert_eq!(inbox[0].route_id, "r");
    assert!(inbox[0].expires_at.is_some());
    let shown = inbox[0].proposal.as_ref().unwrap();
    assert_eq!(
        (shown.id.as_str(), state(shown)),
        (id.as_str(), ProposalState::Escalated)
    );
    let gates = &shown.decision.as_ref().unwrap().gates;
    assert_eq!(gates.len(), 5, "{gates:?}");

    let two = scene.approve(&scene.bob, &id).await.unwrap();
    assert_eq!(state(&two), ProposalState::Approved, "{two:?}");
    let human = human_gate(&two);
    assert!(human.passed, "{human:?}");
    assert!(
        human.detail.contains(ANN) && human.detail.contains(BOB),
        "{human:?}"
    );
    let decision = two.decision.as_ref().unwrap();
    assert_eq!(decision.outcome, DecisionOutcome::Approve as i32);
    let people: Vec<&str> = decision.votes.iter().map(|v| v.person.as_str()).collect();
    assert_eq!(people, [ANN, BOB]);
    assert!(scene.inbox(&scene.bob).await.is_empty());
}

async fn a_vote_after_expiry_is_refused_naming_the_state(backend: Backend) {
    let scene = Scene::new(backend, expiring(route("r", 2), Duration::from_secs(1))).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    let expired = scene.decided(&id).await;
    assert_eq!(state(&expired), ProposalState::Rejected, "{expired:?}");
    let human = human_gate(&expired);
    assert!(!human.passed);
    assert_eq!(human.detail, "expired: 1 of 2 approvals");
    too_late(&scene, &scene.bob, &id, Verdict::Approve, "rejected").await;
}

async fn a_vote_after_a_cancel_is_refused_naming_the_state(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    let cancelled = scene.app().cancel(&scene.carol, &id).await.unwrap();
    assert_eq!(state(&cancelled), ProposalState::Cancelled, "{cancelled:?}");
    too_late(&scene, &scene.bob, &id, Verdict::Approve, "cancelled").await;
    assert!(scene.inbox(&scene.bob).await.is_empty());
}

async fn await_decision_waits_through_escalated_and_its_deadline_decides_nothing(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let short = scene
        .app()
        .await_decision(&scene.sam, &id, Duration::from_millis(300))
        .await;
    crate::helpers::assert_code(short, Code::DeadlineExceeded);
    assert_eq!(
        state(&scene.app().get(&scene.sam, &id).await.unwrap()),
        ProposalState::Escalated,
        "a caller's deadline is not a denial"
    );
    let waiting = {
        let app = scene.app();
        let sam = scene.sam.clone();
        let id = id.clone();
        let client = app.client(&sam).await;
        tokio::spawn(async move {
            let mut client = client;
            let mut request = tonic::Request::new(v1::AwaitDecisionRequest { id });
            request.set_timeout(WAIT);
            client.await_decision(request).await.map(|r| r.into_inner())
        })
    };
    // The await is registered and waiting on an ESCALATED proposal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "ESCALATED is not an ending");
    scene.approve(&scene.ann, &id).await.unwrap();
    let decided = waiting.await.unwrap().unwrap();
    assert_eq!(state(&decided), ProposalState::Approved, "{decided:?}");
}

async fn votes_and_the_escalation_are_events_on_the_watch_stream(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    scene.approve(&scene.ann, &id).await.unwrap();
    scene.approve(&scene.bob, &id).await.unwrap();
    let mut stream = scene.watch_from_start(&scene.carol).await;
    let mut kinds = Vec::new();
    while kinds.last() != Some(&EventKind::Approved) {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        let Some(proposal) = n.proposal.filter(|p| p.id == id) else {
            continue;
        };
        let kind = EventKind::try_from(n.event).unwrap();
        if matches!(kind, EventKind::Escalated | EventKind::Vote) {
            // While people decide, the proposal shows its gates and route.
            assert_eq!(state(&proposal), ProposalState::Escalated);
            let waiting = proposal.decision.expect("the waiting decision");
            assert_eq!(waiting.route_id, "r");
            assert_eq!(waiting.outcome, DecisionOutcome::Unspecified as i32);
            assert_eq!(waiting.gates.len(), 5, "{waiting:?}");
        }
        kinds.push(kind);
    }
    assert_eq!(
        kinds,
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Escalated,
            EventKind::Vote,
            EventKind::Vote,
            EventKind::Approved,
        ]
    );
}

async fn a_human_reject_suppresses_an_identical_retry_and_an_escalation_is_never_cached(
    backend: Backend,
) {
    let scene = Scene::new(backend, route("r", 1)).await;
    let id = scene.escalate("n1").await;
    let again = || async {
        scene
            .app()
            .submit(&scene.sam, wire_spec_on("n1"))
            .await
            .unwrap()
    };
    // While it waits for people, an identical call is a new proposal (here
    // refused by the parallel-operation gate, which counts the escalated one).
    let retry = again().await;
    assert!(!retry.suppressed, "an escalation is never cached");
    let second = retry.proposal.unwrap().id;
    assert_ne!(second, id);
    let second = scene.decided(&second).await;
    let missing = &second.decision.as_ref().unwrap().missing_gates;
    assert!(
        missing.contains(&"no_parallel_operation".to_owned()),
        "{second:?}"
    );

    let mut stream = scene.watch_live(&scene.carol).await;
    scene.reject(&scene.ann, &id).await.unwrap();
    until_event(&mut stream, &id, EventKind::Rejected).await;
    let answer = again().await;
    assert!(answer.suppressed, "a human reject is cached: {answer:?}");
    let earlier = answer.proposal.unwrap();
    assert_eq!(earlier.id, id);
    assert_eq!(state(&earlier), ProposalState::Rejected);
}

async fn escalations_survive_a_restart_and_expire_on_time(backend: Backend) {
    let scene = Scene::new(backend, route("long", 1)).await;
    let kept = scene.escalate("n1").await;
    put_short_route(&scene).await;
    let expiring = scene.escalate("short-1").await;
    let expires_at = scene
        .inbox(&scene.ann)
        .await
        .into_iter()
        .find(|e| e.proposal.as_ref().unwrap().id == expiring)
        .unwrap()
        .expires_at
        .unwrap();

    let scene = scene.restart().await;

    let open: Vec<String> = scene
        .inbox(&scene.bob)
        .await
        .into_iter()
        .map(|e| e.proposal.unwrap().id)
        .collect();
    assert!(open.contains(&kept), "{open:?}");
    let expired = scene.decided(&expiring).await;
    assert_eq!(state(&expired), ProposalState::Rejected, "{expired:?}");
    assert_eq!(human_gate(&expired).detail, "expired: 0 of 1 approvals");
    let decided_at = expired.decision.unwrap().decided_at.unwrap();
    assert!(
        (decided_at.seconds, decided_at.nanos) >= (expires_at.seconds, expires_at.nanos),
        "expired at {decided_at:?}, before its time {expires_at:?}"
    );
    let approved = scene.approve(&scene.bob, &kept).await.unwrap();
    assert_eq!(state(&approved), ProposalState::Approved, "{approved:?}");
}

/// A route for the `short-*` targets, open two seconds.
async fn put_short_route(scene: &Scene) {
    let mut short = expiring(route("short", 1), Duration::from_secs(2));
    short.r#match.as_mut().unwrap().target_selector =
        [("cluster".to_owned(), "c-short-1".to_owned())].into();
    crate::escalation_support::put_route(scene.app(), &scene.admin, short).await;
}

async fn an_agent_sees_awaiting_human_approval_then_the_terse_outcome_never_votes(
    backend: Backend,
) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let bot = person_key(
        scene.app(),
        TENANT,
        Role::Coordinator,
        Some("dave@example.com"),
        true,
    )
    .await;
    let approved = scene.escalate_as(&bot, "n1").await;
    let rejected = scene.escalate_as(&bot, "n2").await;
    scene
        .vote(
            &scene.ann,
            &approved,
            Verdict::Approve,
            "secret: ann's note",
        )
        .await
        .unwrap();

    let waiting = scene.app().get(&bot, &approved).await.unwrap();
    assert_eq!(state(&waiting), ProposalState::Escalated);
    let decision = waiting.decision.unwrap();
    assert_eq!(decision.agent_message, AGENT_AWAITING_HUMAN);
    assert_eq!(decision.outcome, DecisionOutcome::Unspecified as i32);
    assert!(decision.reason.is_empty() && decision.summary.is_empty());
    assert!(decision.gates.is_empty() && decision.votes.is_empty());
    let bots_inbox = scene.inbox(&bot).await;
    assert_eq!(bots_inbox.len(), 2);
    assert!(
        bots_inbox.iter().all(|e| e.votes.is_empty()),
        "{bots_inbox:?}"
    );
    // People see the votes so far.
    let people = scene.app().get(&scene.carol, &approved).await.unwrap();
    assert_eq!(people.decision.unwrap().votes.len(), 1);

    scene.approve(&scene.bob, &approved).await.unwrap();
    scene
        .vote(
            &scene.carol,
            &rejected,
            Verdict::Reject,
            "secret: carol's note",
        )
        .await
        .unwrap();
    for (id, message) in [
        (&approved, AGENT_HUMAN_APPROVED),
        (&rejected, AGENT_REFUSAL),
    ] {
        let seen = scene.app().await_decision(&bot, id, WAIT).await.unwrap();
        let decision = seen.decision.unwrap();
        assert_eq!(decision.agent_message, message);
        assert!(decision.reason.is_empty() && decision.summary.is_empty());
        assert!(decision.gates.is_empty() && decision.votes.is_empty());
        assert!(!format!("{decision:?}").contains("secret"), "{decision:?}");
    }
    let mut stream = scene.watch_from_start(&bot).await;
    let mut seen_end = 0;
    while seen_end < 2 {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        assert!(!format!("{n:?}").contains("secret"), "{n:?}");
        match EventKind::try_from(n.event) {
            Ok(EventKind::Approved | EventKind::Rejected) => seen_end += 1,
            Ok(EventKind::Escalated | EventKind::Vote) => {
                let waiting = n.proposal.unwrap().decision.unwrap();
                assert_eq!(waiting.agent_message, AGENT_AWAITING_HUMAN);
                assert!(
                    waiting.votes.is_empty() && waiting.gates.is_empty(),
                    "{waiting:?}"
                );
            }
            _ => {}
        }
    }
}

async fn the_decision_log_records_the_votes_and_verify_log_covers_them(backend: Backend) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let id = scene.escalate("n1").await;
    scene
        .vote(&scene.ann, &id, Verdict::Approve, "checked the runbook")
        .await
        .unwrap();
    scene.approve(&scene.bob, &id).await.unwrap();
    let auditor = person_key(scene.app(), TENANT, Role::Auditor, None, false).await;
    let mut audit = AuditServiceClient::with_interceptor(
        scene.app().channel().await,
        countersign::client::BearerAuth::new(&auditor).unwrap(),
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let entry = loop {
        match audit
            .get_decision(GetDecisionRequest {
                proposal_id: id.clone(),
            })
            .await
        {
            Ok(entry) => break entry.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), Code::NotFound, "{status:?}");
                assert!(tokio::time::Instant::now() < deadline, "never logged");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    };
    let record: serde_json::Value = serde_json::from_str(&entry.record_json).unwrap();
    let votes = record["votes"].as_array().expect("votes in the record");
    assert_eq!(votes.len(), 2, "{record}");
    assert_eq!(votes[0]["person"], ANN);
    assert_eq!(votes[0]["comment"], "checked the runbook");
    assert_eq!(record["route_id"], "r");
    let report = audit
        .verify_log(VerifyLogRequest { checkpoint: None })
        .await
        .unwrap()
        .into_inner();
    assert!(report.ok, "{report:?}");
    assert!(report.entries_checked >= entry.sequence, "{report:?}");
    if scene.env.backend() == Backend::Sqlite {
        // A vote's comment changed under the store breaks the chain there.
        let db = scene.app().raw_db().await;
        for statement in [
            "DROP TRIGGER audit_log_is_append_only_update".to_owned(),
            format!(
                "UPDATE audit_log SET record = replace(record, 'checked the runbook', \
                 'skipped the runbook') WHERE proposal_id = '{id}'"
            ),
        ] {
            sqlx::query(&statement).execute(&db).await.unwrap();
        }
        let report = audit
            .verify_log(VerifyLogRequest { checkpoint: None })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (report.ok, report.first_invalid_sequence, report.failure),
            (false, entry.sequence, v1::VerifyFailure::Altered as i32),
            "{report:?}"
        );
    }
}

/// The proposal ids of `escalations`, in their order.
fn ids_of(escalations: &[v1::Escalation]) -> Vec<String> {
    escalations
        .iter()
        .map(|e| e.proposal.as_ref().unwrap().id.clone())
        .collect()
}

async fn the_inbox_filters_by_action_target_route_operator_and_what_awaits_the_caller(
    backend: Backend,
) {
    let scene = Scene::new(backend, route("r", 2)).await;
    let all = [
        scene.escalate("n1").await,
        scene.escalate("n2").await,
        scene.escalate("n3").await,
    ];
    scene.approve(&scene.ann, &all[1]).await.unwrap();
    let agent = person_key(
        scene.app(),
        TENANT,
        Role::Oncall,
        Some("dee@example.com"),
        true,
    )
    .await;
    let auditor = person_key(
        scene.app(),
        TENANT,
        Role::Auditor,
        Some("eve@example.com"),
        false,
    )
    .await;
    let nobody = person_key(scene.app(), TENANT, Role::Oncall, None, false).await;
    let other_tenant = person_key(
        scene.app(),
        "other",
        Role::Oncall,
        Some("fay@example.com"),
        false,
    )
    .await;
    let awaiting = ListEscalationsRequest {
        awaiting_me: true,
        ..Default::default()
    };
    let only = |n: &[usize]| n.iter().map(|&i| all[i].clone()).collect::<Vec<_>>();
    let cases: Vec<(&str, ListEscalationsRequest, Vec<String>)> = vec![
        (
            &scene.carol,
            ListEscalationsRequest::default(),
            only(&[0, 1, 2]),
        ),
        (
            &scene.carol,
            ListEscalationsRequest {
                action: "host_*".into(),
                ..Default::default()
            },
            only(&[0, 1, 2]),
        ),
        (
            &scene.carol,
            ListEscalationsRequest {
                action: "db_*".into(),
                ..Default::default()
            },
            only(&[]),
        ),
        (
            &scene.carol,
            ListEscalationsRequest {
                target: "n2".into(),
                ..Default::default()
            },
            only(&[1]),
        ),
        (
            &scene.carol,
            ListEscalationsRequest {
                route_id: "other".into(),
                ..Default::default()
            },
            only(&[]),
        ),
        (
            &scene.carol,
            ListEscalationsRequest {
                route_id: "r".into(),
                operator: " OP-N3".into(),
                ..Default::default()
            },
            only(&[2]),
        ),
        // ann voted on the second; sam submitted them all.
        (&scene.ann, awaiting.clone(), only(&[0, 2])),
        (&scene.bob, awaiting.clone(), only(&[0, 1, 2])),
        (&scene.sam, awaiting.clone(), only(&[])),
        (
            &scene.sam,
            ListEscalationsRequest::default(),
            only(&[0, 1, 2]),
        ),
        (&agent, awaiting.clone(), only(&[])),
        (&auditor, awaiting.clone(), only(&[])),
        (&nobody, awaiting.clone(), only(&[])),
        (&other_tenant, awaiting.clone(), only(&[])),
        (
            &scene.ann,
            ListEscalationsRequest {
                target: "n3".into(),
                ..awaiting.clone()
            },
            only(&[2]),
        ),
    ];
    for (key, filter, expected) in cases {
        let shown = format!("{filter:?}");
        for page_size in [0, 1] {
            let filter = ListEscalationsRequest {
                page_size,
                ..filter.clone()
            };
            let listed = scene.inbox_where(key, filter).await.unwrap();
            assert_eq!(ids_of(&listed), expected, "{shown}, pages of {page_size}");
        }
    }

    // A page of one carries on after the last it held; the last page has no token.
    let mut client = escalations(scene.app(), &scene.ann).await;
    let first = client
        .list_escalations(ListEscalationsRequest {
            page_size: 1,
            ..awaiting.clone()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&first.escalations), only(&[0]));
    assert!(!first.next_page_token.is_empty());
    let second = client
        .list_escalations(ListEscalationsRequest {
            page_size: 1,
            page_token: first.next_page_token,
            ..awaiting.clone()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&second.escalations), only(&[2]));
    assert!(second.next_page_token.is_empty(), "{second:?}");

    // Once bob votes, the escalation leaves his inbox; decided, everyone's.
    scene.approve(&scene.bob, &all[0]).await.unwrap();
    let bobs = scene
        .inbox_where(&scene.bob, awaiting.clone())
        .await
        .unwrap();
    assert_eq!(ids_of(&bobs), only(&[1, 2]));
    scene.approve(&scene.carol, &all[0]).await.unwrap();
    let anns = scene
        .inbox_where(&scene.ann, awaiting.clone())
        .await
        .unwrap();
    assert_eq!(ids_of(&anns), only(&[2]));
}

async fn a_bad_inbox_filter_is_refused_naming_its_field(backend: Backend) {
    let scene = Scene::new(backend, route("r", 1)).await;
    scene.escalate("n1").await;
    let cases = [
        (
            ListEscalationsRequest {
                action: "Host_*".into(),
                ..Default::default()
            },
            "action",
        ),
        (
            ListEscalationsRequest {
                action: "a".repeat(129),
                ..Default::default()
            },
            "action",
        ),
        (
            ListEscalationsRequest {
                target: "n1\n".into(),
                ..Default::default()
            },
            "target",
        ),
        (
            ListEscalationsRequest {
                route_id: "r 1".into(),
                ..Default::default()
            },
            "route_id",
        ),
        (
            ListEscalationsRequest {
                operator: " ".into(),
                awaiting_me: true,
                ..Default::default()
            },
            "operator",
        ),
    ];
    for (filter, field) in cases {
        let status = crate::helpers::assert_code(
            scene.inbox_where(&scene.ann, filter.clone()).await,
            Code::InvalidArgument,
        );
        assert!(
            status.message().starts_with(&format!("{field}: ")),
            "{filter:?}: {status:?}"
        );
    }
}

/// Each ESCALATED and VOTE event shows the votes as they stood at it: live,
/// where the next vote waits for the event before it, and in a replay made
/// after every vote, which carries exactly what went out live.
async fn a_resumed_watch_replays_each_event_of_an_escalation_as_it_went_out_live(backend: Backend) {
    let scene = Scene::new(backend, route("r", 3)).await;
    let mut stream = scene.watch_live(&scene.admin).await;
    let id = scene.escalate("n1").await;
    let mut live = Vec::new();
    collect(&mut stream, &id, EventKind::Escalated, &mut live).await;
    for voter in [&scene.ann, &scene.bob] {
        scene.approve(voter, &id).await.unwrap();
        collect(&mut stream, &id, EventKind::Vote, &mut live).await;
    }
    scene.approve(&scene.carol, &id).await.unwrap();
    collect(&mut stream, &id, EventKind::Approved, &mut live).await;

    let waiting: Vec<(i32, Vec<String>)> = live
        .iter()
        .filter(|n| [EventKind::Escalated as i32, EventKind::Vote as i32].contains(&n.event))
        .map(|n| {
            let decision = n.proposal.as_ref().unwrap().decision.as_ref().unwrap();
            let people = decision.votes.iter().map(|v| v.person.clone()).collect();
            (n.event, people)
        })
        .collect();
    let (escalated, vote) = (EventKind::Escalated as i32, EventKind::Vote as i32);
    assert_eq!(
        waiting,
        [
            (escalated, vec![]),
            (vote, vec![ANN.to_owned()]),
            (vote, vec![ANN.to_owned(), BOB.to_owned()]),
            (vote, vec![ANN.to_owned(), BOB.to_owned(), CAROL.to_owned()]),
        ]
    );

    let mut replay = scene
        .app()
        .watch(
            &scene.admin,
            WatchRequest {
                after_cursor: Some(live[0].cursor - 1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut replayed = Vec::new();
    collect(&mut replay, &id, EventKind::Approved, &mut replayed).await;
    assert_eq!(replayed, live);
}
