//! Routes, escalations and votes, on every backend (instantiated by the
//! suite's macro like the rest of it).

use countersign_domain::{
    DecisionOutcome, EventKind, Millis, Proposal, ProposalState, Role, TargetStatus,
    audit::Verifier,
    escalation::{
        Awaiting, Ballot, Caller, Escalation, InboxFilter, InboxFilterInput, MAX_COMMENT,
        Resolution, ResolveError, Route, RouteInput, RouteMatch, Rule, Verdict, Voter,
        validate_filter, validate_route,
    },
    gates::{self, HUMAN, NO_PARALLEL_OPERATION, SOP, TARGET_STATE},
    now_ms,
    review::{self, ReviewStamp},
};
use countersign_store::{DynStore, NewApiKey, RecordOutcome, ReviewKey, StoreError, Voted};
use countersign_test_support::fixtures;

use super::{begin_review, new_proposal, proposal_events, review_facts};

const HOUR: Millis = 60 * 60 * 1000;
const SUBMITTER: &str = "sam@example.com";

/// A route on every proposal: `approvals` people, an hour, escalating on
/// `escalate_on`.
fn route(id: &str, approvals: u32, escalate_on: &[&str]) -> Route {
    validate_route(RouteInput {
        id: id.into(),
        matcher: RouteMatch::default(),
        approvals_required: approvals,
        approver_roles: Vec::new(),
        expires_after_ms: Some(HOUR),
        escalate_on: escalate_on.iter().map(|g| (*g).to_owned()).collect(),
    })
    .unwrap()
}

fn key(p: &Proposal) -> ReviewKey {
    ReviewKey {
        tenant: p.tenant.clone(),
        id: p.id.clone(),
    }
}

/// A proposal of `tenant` on `target`, submitted by [`SUBMITTER`]'s key, its
/// review begun.
async fn reviewing_on(store: &DynStore, tenant: &str, target: &str) -> Proposal {
    let mut new = new_proposal(tenant, "");
    new.spec.target = target.into();
    new.submitted_by_person = Some(SUBMITTER.into());
    let p = store.insert_proposal(new).await.unwrap().proposal().clone();
    begin_review(store, tenant, &p.id).await.unwrap();
    store.get_proposal(tenant, &p.id).await.unwrap().unwrap()
}

/// The escalation a review of `p` opens under `route`, its review having
/// finished at `reviewed_at`.
async fn escalation_of(
    store: &DynStore,
    p: &Proposal,
    route: &Route,
    reviewed_at: Millis,
) -> Escalation {
    let facts = review_facts(store, p).await.unwrap();
    let verdict = gates::evaluate(&facts);
    let stamp = ReviewStamp {
        reviewer: "w/0".into(),
        decided_at: reviewed_at,
        latency_ms: 4,
    };
    Escalation::open(route, &verdict, &stamp)
}

/// A proposal of `tenant` (seeded: it passes every gate) on `target`,
/// escalated under `route` by a review that finished at `reviewed_at`.
async fn escalated_at(
    store: &DynStore,
    tenant: &str,
    target: &str,
    route: &Route,
    reviewed_at: Millis,
) -> Proposal {
    let p = reviewing_on(store, tenant, target).await;
    let escalation = escalation_of(store, &p, route, reviewed_at).await;
    let opened = store
        .open_escalations(vec![(key(&p), escalation)])
        .await
        .unwrap();
    assert!(
        matches!(opened[..], [RecordOutcome::Recorded]),
        "{opened:?}"
    );
    store.get_proposal(tenant, &p.id).await.unwrap().unwrap()
}

async fn escalated(store: &DynStore, tenant: &str, route: &Route) -> Proposal {
    escalated_at(store, tenant, "node-01", route, now_ms()).await
}

/// A seeded tenant.
async fn seeded(store: &DynStore, tenant: &str) {
    fixtures::seed_reference(store.as_ref(), tenant).await;
}

/// An on-call key of `tenant` belonging to `person`.
fn oncall<'a>(tenant: &'a str, person: &'a str) -> Caller<'a> {
    Caller {
        tenant,
        key_id: person,
        person: Some(person),
        role: Role::Oncall,
        agent: false,
    }
}

fn approve() -> Ballot<'static> {
    Ballot {
        verdict: Some(Verdict::Approve),
        comment: "looks right",
    }
}

fn reject() -> Ballot<'static> {
    Ballot {
        verdict: Some(Verdict::Reject),
        comment: "not now",
    }
}

async fn vote(
    store: &DynStore,
    caller: Caller<'_>,
    p: &Proposal,
    ballot: Ballot<'_>,
) -> Result<Voted, ResolveError> {
    store
        .cast_vote(caller, &p.id, ballot, now_ms())
        .await
        .unwrap()
}

/// The proposal's VOTE events and its state changes after submit, in order.
async fn kinds_after_review(store: &DynStore, p: &Proposal) -> Vec<EventKind> {
    proposal_events(store, &p.tenant, &p.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| !matches!(k, EventKind::Submitted | EventKind::ReviewStarted))
        .collect()
}

fn decision_of(voted: &Voted) -> &countersign_domain::Decision {
    match &voted.resolution {
        Resolution::Decided { decision, .. } => decision,
        other => panic!("not decided: {other:?}"),
    }
}

fn human_gate(decision: &countersign_domain::Decision) -> (bool, String) {
    let gate = decision.gates.last().unwrap();
    assert_eq!(gate.gate, HUMAN, "{:?}", decision.gates);
    (gate.passed, gate.detail.clone())
}

pub async fn routes_are_put_listed_replaced_and_deleted_per_tenant(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut wide = route("wide", 2, &["sop", "rollback", "blast_radius"]);
    wide.matcher = RouteMatch {
        actions: vec!["db_*".into(), "host_?estart*".into()],
        classes: vec![countersign_domain::OperationClass::Destructive],
        blast_radii: vec![countersign_domain::BlastRadius::Cluster],
        target_selector: [("env".to_owned(), "production".to_owned())].into(),
    };
    let narrow = route("narrow", 1, &[]);
    assert_eq!(store.put_route("a", &wide).await.unwrap(), wide);
    assert_eq!(store.put_route("a", &narrow).await.unwrap(), narrow);
    assert_eq!(
        store.list_routes("a").await.unwrap(),
        [narrow.clone(), wide.clone()],
        "by id"
    );
    assert!(store.list_routes("b").await.unwrap().is_empty());

    let stricter = Route {
        approvals_required: 3,
        approver_roles: vec![Role::Admin],
        expires_after_ms: 5 * 60 * 1000,
        ..wide.clone()
    };
    assert_eq!(store.put_route("a", &stricter).await.unwrap(), stricter);
    assert_eq!(
        store.list_routes("a").await.unwrap(),
        [narrow.clone(), stricter.clone()]
    );

    assert!(matches!(
        store.delete_route("b", "wide").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.delete_route("a", "wide").await.unwrap(), stricter);
    assert!(matches!(
        store.delete_route("a", "wide").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.list_routes("a").await.unwrap(), [narrow]);
}

pub async fn keys_and_proposals_carry_their_persons(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let new_key = |person: Option<&str>, agent: bool| NewApiKey {
        tenant: "a".into(),
        name: String::new(),
        role: Role::Coordinator,
        agent,
        person: person.map(str::to_owned),
    };
    let (ann, _) = store
        .create_api_key(new_key(Some("Ann@Example.com"), false))
        .await
        .unwrap();
    assert_eq!(ann.person.as_deref(), Some("Ann@Example.com"));
    let (bot, _) = store
        .create_api_key(new_key(Some("ann@example.com"), true))
        .await
        .unwrap();
    let (nobody, _) = store.create_api_key(new_key(None, false)).await.unwrap();
    let (blank, _) = store
        .create_api_key(new_key(Some("  "), false))
        .await
        .unwrap();
    assert_eq!(nobody.person, None);
    assert_eq!(blank.person, None, "a blank name names nobody");
    let found = store.find_api_key(&bot.id).await.unwrap().unwrap();
    assert_eq!(
        (found.agent, found.person.as_deref()),
        (true, Some("ann@example.com")),
        "an agent key records the person it acts for"
    );
    let listed = store.list_api_keys(Some("a")).await.unwrap();
    let person_of = |id: &str| {
        listed
            .iter()
            .find(|k| k.id == id)
            .and_then(|k| k.person.clone())
    };
    assert_eq!(person_of(&ann.id).as_deref(), Some("Ann@Example.com"));
    assert_eq!(person_of(&nobody.id), None);

    let mut new = new_proposal("a", "");
    new.submitted_by_person = Some("ann@example.com".into());
    let p = store.insert_proposal(new).await.unwrap().proposal().clone();
    assert_eq!(p.submitted_by_person.as_deref(), Some("ann@example.com"));
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored, p);
    let events = proposal_events(&store, "a", &p.id).await.unwrap();
    assert_eq!(
        events[0].proposal.submitted_by_person.as_deref(),
        Some("ann@example.com")
    );
    let without = store
        .insert_proposal(new_proposal("a", ""))
        .await
        .unwrap()
        .proposal()
        .clone();
    let stored = store.get_proposal("a", &without.id).await.unwrap().unwrap();
    assert_eq!(stored.submitted_by_person, None);
}

pub async fn an_escalation_opens_once_and_only_from_review(store: DynStore) {
    seeded(&store, "a").await;
    let two = route("two", 2, &[]);
    let p = reviewing_on(&store, "a", "node-01").await;
    let opened = escalation_of(&store, &p, &two, now_ms()).await;
    let pending = store
        .insert_proposal(new_proposal("a", ""))
        .await
        .unwrap()
        .proposal()
        .clone();
    let decided = reviewing_on(&store, "a", "node-02").await;
    let rejection = fixtures::rejection(&decided.spec, "sop");
    store
        .record_decisions(vec![(key(&decided), rejection)])
        .await
        .unwrap();

    let outcomes = store
        .open_escalations(vec![
            (key(&p), opened.clone()),
            (key(&pending), opened.clone()),
            (key(&decided), opened.clone()),
        ])
        .await
        .unwrap();
    assert!(
        matches!(
            &outcomes[..],
            [
                RecordOutcome::Recorded,
                RecordOutcome::Stale(why),
                RecordOutcome::Discarded(ProposalState::Rejected),
            ] if why.contains("pending")
        ),
        "{outcomes:?}"
    );
    let escalated = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(escalated.state, ProposalState::Escalated);
    assert_eq!(escalated.decision, None, "nobody decided it yet");
    assert_eq!(kinds_after_review(&store, &p).await, [EventKind::Escalated]);
    let record = store.get_escalation("a", &p.id).await.unwrap().unwrap();
    assert_eq!(record.escalation, opened);
    assert_eq!(record.proposal, escalated);
    assert!(record.votes.is_empty());
    assert!(store.get_escalation("b", &p.id).await.unwrap().is_none());
    assert!(
        store
            .get_escalation("a", &pending.id)
            .await
            .unwrap()
            .is_none(),
        "never escalated"
    );
    assert_eq!(
        store
            .get_proposal("a", &pending.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ProposalState::Pending
    );

    // A redelivered review finds it waiting for people: late, not applied,
    // and a reviewer's decision never ends it.
    let again = store
        .open_escalations(vec![(key(&p), opened.clone())])
        .await
        .unwrap();
    assert!(matches!(
        again[..],
        [RecordOutcome::Discarded(ProposalState::Escalated)]
    ));
    let stamp = ReviewStamp {
        reviewer: "w/1".into(),
        decided_at: now_ms(),
        latency_ms: 1,
    };
    let late = store
        .record_decisions(vec![(key(&p), review::failed("lost", stamp))])
        .await
        .unwrap();
    assert!(matches!(
        late[..],
        [RecordOutcome::Discarded(ProposalState::Escalated)]
    ));
    assert_eq!(
        store.get_proposal("a", &p.id).await.unwrap().unwrap().state,
        ProposalState::Escalated
    );
    assert_eq!(
        store
            .get_escalation("a", &p.id)
            .await
            .unwrap()
            .unwrap()
            .escalation,
        opened
    );
}

pub async fn open_escalations_are_listed_oldest_first_in_pages_and_counted(store: DynStore) {
    seeded(&store, "a").await;
    seeded(&store, "b").await;
    let one = route("one", 1, &[]);
    let now = now_ms();
    let mut mine = Vec::new();
    for (n, target) in ["node-01", "node-02", "node-03"].iter().enumerate() {
        // Opened oldest last: the listing orders by when each opened.
        let at = now - 1_000 * (n as Millis + 1);
        mine.push(escalated_at(&store, "a", target, &one, at).await);
    }
    let theirs = escalated_at(&store, "b", "node-01", &one, now - 10_000).await;
    mine.reverse();

    let first = store
        .list_escalations("a", &InboxFilter::default(), None, 2)
        .await
        .unwrap();
    let ids = |records: &[countersign_store::EscalationRecord]| -> Vec<String> {
        records.iter().map(|r| r.proposal.id.clone()).collect()
    };
    assert_eq!(ids(&first), [mine[0].id.clone(), mine[1].id.clone()]);
    assert_eq!(first[0].proposal.state, ProposalState::Escalated);
    assert_eq!(first[0].escalation.route_id, "one");
    let last = &first[1];
    let after = Some((last.escalation.opened_at, last.proposal.id.clone()));
    let second = store
        .list_escalations("a", &InboxFilter::default(), after, 2)
        .await
        .unwrap();
    assert_eq!(ids(&second), [mine[2].id.clone()]);
    let last = &second[0];
    let after = Some((last.escalation.opened_at, last.proposal.id.clone()));
    assert!(
        store
            .list_escalations("a", &InboxFilter::default(), after, 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&store
            .list_escalations("b", &InboxFilter::default(), None, 10)
            .await
            .unwrap()),
        std::slice::from_ref(&theirs.id)
    );

    assert_eq!(
        store.open_escalations_by_tenant().await.unwrap(),
        [("a".to_owned(), 3), ("b".to_owned(), 1)]
    );
    let earliest = store
        .get_escalation("b", &theirs.id)
        .await
        .unwrap()
        .unwrap()
        .escalation
        .expires_at;
    assert_eq!(store.next_expiry().await.unwrap(), Some(earliest));

    // Decided or cancelled, it leaves the inbox, the count and the timer.
    vote(&store, oncall("a", "ann@example.com"), &mine[0], approve())
        .await
        .unwrap();
    store
        .cancel_proposal("b", &theirs.id, "not needed", None)
        .await
        .unwrap();
    assert_eq!(
        ids(&store
            .list_escalations("a", &InboxFilter::default(), None, 10)
            .await
            .unwrap()),
        [mine[1].id.clone(), mine[2].id.clone()]
    );
    assert!(
        store
            .list_escalations("b", &InboxFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.open_escalations_by_tenant().await.unwrap(),
        [("a".to_owned(), 2)]
    );
    assert_ne!(store.next_expiry().await.unwrap(), Some(earliest));
}

/// Filters of the inbox: each keeps what it matches, "awaiting" keeps what
/// the caller may still vote on (the same rules as a vote), and a page
/// carries on after the last escalation the filter kept.
pub async fn the_inbox_keeps_what_its_filters_match_and_pages_through_it(store: DynStore) {
    seeded(&store, "a").await;
    let (one, two) = (route("one", 1, &[]), route("two", 2, &[]));
    let now = now_ms();
    let mut open = Vec::new();
    for (n, (action, operator, route)) in [
        ("host_restart_service", "olga@example.com", &one),
        ("db_failover", "ann@example.com", &two),
        ("host_restart_service", "olga@example.com", &two),
        ("host_reboot", "olga@example.com", &one),
        ("host_restart_service", "olga@example.com", &two),
    ]
    .into_iter()
    .enumerate()
    {
        let mut new = new_proposal("a", "");
        new.spec.target = format!("node-{n}");
        new.spec.action = action.into();
        new.spec.operator = operator.into();
        new.submitted_by_person = Some(SUBMITTER.into());
        let p = store.insert_proposal(new).await.unwrap().proposal().clone();
        begin_review(&store, "a", &p.id).await.unwrap();
        let escalation = escalation_of(&store, &p, route, now - 10_000 + n as Millis).await;
        store
            .open_escalations(vec![(key(&p), escalation)])
            .await
            .unwrap();
        open.push(store.get_proposal("a", &p.id).await.unwrap().unwrap());
    }
    // bob's approval is one of two: p4 stays open.
    vote(&store, oncall("a", "bob@example.com"), &open[4], approve())
        .await
        .unwrap();

    let listed = |filter: InboxFilter, after: Option<(Millis, String)>, limit: u32| {
        let store = store.clone();
        async move {
            store
                .list_escalations("a", &filter, after, limit)
                .await
                .unwrap()
        }
    };
    let ids = |records: &[countersign_store::EscalationRecord]| -> Vec<usize> {
        records
            .iter()
            .map(|r| open.iter().position(|p| p.id == r.proposal.id).unwrap())
            .collect()
    };
    let filter = |input: InboxFilterInput<'_>| validate_filter(input).unwrap();
    let awaiting = |caller: Caller<'_>| InboxFilterInput {
        awaiting: Some(Awaiting {
            voter: Voter::of(&caller),
            now: now_ms(),
        }),
        ..InboxFilterInput::default()
    };
    let cases: Vec<(InboxFilterInput<'_>, Vec<usize>)> = vec![
        (InboxFilterInput::default(), vec![0, 1, 2, 3, 4]),
        (
            InboxFilterInput {
                action: "host_*",
                ..Default::default()
            },
            vec![0, 2, 3, 4],
        ),
        (
            InboxFilterInput {
                action: "db_failover",
                ..Default::default()
            },
            vec![1],
        ),
        (
            InboxFilterInput {
                target: "node-2",
                ..Default::default()
            },
            vec![2],
        ),
        (
            InboxFilterInput {
                route_id: "two",
                ..Default::default()
            },
            vec![1, 2, 4],
        ),
        (
            InboxFilterInput {
                operator: " OLGA@example.com",
                ..Default::default()
            },
            vec![0, 2, 3, 4],
        ),
        // ann is p1's operator; bob voted on p4; sam submitted them all.
        (awaiting(oncall("a", "ann@example.com")), vec![0, 2, 3, 4]),
        (awaiting(oncall("a", " BOB@example.com")), vec![0, 1, 2, 3]),
        (awaiting(oncall("a", SUBMITTER)), vec![]),
        (
            awaiting(Caller {
                role: Role::Auditor,
                ..oncall("a", "carol@example.com")
            }),
            vec![],
        ),
        (
            awaiting(Caller {
                agent: true,
                ..oncall("a", "carol@example.com")
            }),
            vec![],
        ),
        (
            awaiting(Caller {
                person: None,
                ..oncall("a", "carol@example.com")
            }),
            vec![],
        ),
        (
            InboxFilterInput {
                route_id: "two",
                ..awaiting(oncall("a", "ann@example.com"))
            },
            vec![2, 4],
        ),
    ];
    for (input, expected) in cases {
        let shown = format!("{input:?}");
        let filter = filter(input);
        assert_eq!(
            ids(&listed(filter.clone(), None, 10).await),
            expected,
            "{shown}"
        );
        // One at a time, each page after the last one kept.
        let (mut paged, mut after) = (Vec::new(), None);
        loop {
            let page = listed(filter.clone(), after.clone(), 1).await;
            let Some(last) = page.last() else { break };
            after = Some((last.escalation.opened_at, last.proposal.id.clone()));
            paged.extend(ids(&page));
        }
        assert_eq!(paged, expected, "paged: {shown}");
    }

    // Two at a time, across what the filter drops.
    let host = filter(InboxFilterInput {
        action: "host_*",
        ..Default::default()
    });
    let first = listed(host.clone(), None, 2).await;
    assert_eq!(ids(&first), [0, 2]);
    let after = first
        .last()
        .map(|r| (r.escalation.opened_at, r.proposal.id.clone()));
    assert_eq!(ids(&listed(host, after, 2).await), [3, 4]);

    // A vote takes the escalation out of its voter's inbox, not another's.
    vote(&store, oncall("a", "bob@example.com"), &open[2], approve())
        .await
        .unwrap();
    let bobs = filter(InboxFilterInput {
        route_id: "two",
        ..awaiting(oncall("a", "bob@example.com"))
    });
    assert_eq!(ids(&listed(bobs, None, 10).await), [1]);
    let anns = filter(InboxFilterInput {
        route_id: "two",
        ..awaiting(oncall("a", "ann@example.com"))
    });
    assert_eq!(ids(&listed(anns, None, 10).await), [2, 4]);
    // Another tenant's voter is awaited by none of them.
    assert!(
        listed(filter(awaiting(oncall("b", "dee@example.com"))), None, 10)
            .await
            .is_empty()
    );
}

/// The votes an ESCALATED or VOTE event shows: those cast up to it, read
/// the same after every later vote and after the decision.
pub async fn an_escalation_is_read_as_it_stood_at_each_of_its_events(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("three", 3, &[])).await;
    let people = ["ann@example.com", "bob@example.com", "carol@example.com"];
    let as_of = |store: DynStore, p: Proposal| async move {
        let mut shown = Vec::new();
        for event in proposal_events(&store, "a", &p.id).await.unwrap() {
            if !matches!(event.kind, EventKind::Escalated | EventKind::Vote) {
                continue;
            }
            let record = store
                .escalation_at_event("a", &p.id, event.cursor)
                .await
                .unwrap()
                .unwrap();
            let voters: Vec<String> = record.votes.iter().map(|v| v.person.clone()).collect();
            shown.push((event.kind, voters));
        }
        shown
    };
    let expected = |n: usize| {
        let mut e = vec![(EventKind::Escalated, Vec::new())];
        for k in 1..=n {
            e.push((
                EventKind::Vote,
                people[..k].iter().map(|p| (*p).to_owned()).collect(),
            ));
        }
        e
    };
    for (n, person) in people.iter().enumerate() {
        assert_eq!(
            as_of(store.clone(), p.clone()).await,
            expected(n),
            "after {n} votes"
        );
        vote(&store, oncall("a", person), &p, approve())
            .await
            .unwrap();
    }
    assert_eq!(
        store.get_proposal("a", &p.id).await.unwrap().unwrap().state,
        ProposalState::Approved
    );
    assert_eq!(
        as_of(store.clone(), p.clone()).await,
        expected(3),
        "decided"
    );
    assert!(
        store
            .escalation_at_event("b", &p.id, 1)
            .await
            .unwrap()
            .is_none(),
        "another tenant's"
    );
}

/// Every refusal `resolve` knows, through the store: nothing is written for
/// any of them (no vote, no event, the proposal as it was).
pub async fn every_refused_vote_writes_nothing(store: DynStore) {
    seeded(&store, "a").await;
    seeded(&store, "b").await;
    let p = escalated(&store, "a", &route("two", 2, &[])).await;
    let before = kinds_after_review(&store, &p).await;
    let ann = oncall("a", "ann@example.com");
    let long = "x".repeat(MAX_COMMENT + 1);
    let refusals: Vec<(&str, Caller<'_>, &str, Ballot<'_>)> = vec![
        (
            "another tenant's",
            oncall("b", "bob@example.com"),
            &p.id,
            approve(),
        ),
        ("missing", ann, "no-such-proposal", approve()),
        ("agent", Caller { agent: true, ..ann }, &p.id, approve()),
        (
            "no person",
            Caller {
                person: None,
                ..ann
            },
            &p.id,
            approve(),
        ),
        (
            "auditor",
            Caller {
                role: Role::Auditor,
                ..ann
            },
            &p.id,
            approve(),
        ),
        (
            "submitter",
            oncall("a", " SAM@example.com"),
            &p.id,
            approve(),
        ),
        ("operator", oncall("a", "User_42"), &p.id, approve()),
        (
            "no verdict",
            ann,
            &p.id,
            Ballot {
                verdict: None,
                comment: "",
            },
        ),
        (
            "long comment",
            ann,
            &p.id,
            Ballot {
                verdict: Some(Verdict::Approve),
                comment: &long,
            },
        ),
    ];
    let mut kinds = Vec::new();
    for (what, caller, id, ballot) in refusals {
        let refused = store
            .cast_vote(caller, id, ballot, now_ms())
            .await
            .unwrap()
            .expect_err(what);
        kinds.push(match refused {
            ResolveError::NotFound(_) => "not_found".to_owned(),
            ResolveError::PermissionDenied { rule, .. } => rule.to_string(),
            ResolveError::InvalidArgument(e) => e.field,
            other => panic!("{what}: {other:?}"),
        });
    }
    assert_eq!(
        kinds,
        [
            "not_found",
            "not_found",
            Rule::Agent.as_str(),
            Rule::Person.as_str(),
            Rule::Role.as_str(),
            Rule::Submitter.as_str(),
            Rule::Operator.as_str(),
            "verdict",
            "comment"
        ]
    );

    // A second vote by the same person: refused, whatever its spelling.
    vote(&store, ann, &p, approve()).await.unwrap();
    let second = vote(&store, oncall("a", "  ANN@example.com"), &p, reject()).await;
    assert!(
        matches!(
            &second,
            Err(ResolveError::AlreadyVoted {
                recorded: Verdict::Approve,
                ..
            })
        ),
        "{second:?}"
    );
    // Not escalated: a pending proposal.
    let pending = store
        .insert_proposal(new_proposal("a", ""))
        .await
        .unwrap()
        .proposal()
        .clone();
    let not_escalated = vote(&store, ann, &pending, approve()).await;
    assert!(
        matches!(
            not_escalated,
            Err(ResolveError::NotEscalated {
                state: ProposalState::Pending,
                ..
            })
        ),
        "{not_escalated:?}"
    );

    let record = store.get_escalation("a", &p.id).await.unwrap().unwrap();
    assert_eq!(record.votes.len(), 1, "only ann's one vote");
    assert_eq!(record.proposal.state, ProposalState::Escalated);
    let mut expected = before;
    expected.push(EventKind::Vote);
    assert_eq!(kinds_after_review(&store, &p).await, expected);
    assert!(kinds_after_review(&store, &pending).await.is_empty());
}

pub async fn a_repeated_vote_answers_with_the_proposal_as_it_is(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("two", 2, &[])).await;
    let ann = oncall("a", "ann@example.com");
    let first = vote(&store, ann, &p, approve()).await.unwrap();
    assert!(
        matches!(
            &first.resolution,
            Resolution::Recorded {
                approvals: 1,
                required: 2,
                ..
            }
        ),
        "{first:?}"
    );
    assert_eq!(first.proposal.state, ProposalState::Escalated);
    let again = vote(&store, oncall("a", "Ann@Example.com "), &p, approve())
        .await
        .unwrap();
    assert_eq!(again.resolution, Resolution::Repeat);
    assert_eq!(again.proposal, first.proposal);
    let record = store.get_escalation("a", &p.id).await.unwrap().unwrap();
    assert_eq!(record.votes.len(), 1);
    assert_eq!(
        (
            record.votes[0].person.as_str(),
            record.votes[0].key_id.as_str()
        ),
        ("ann@example.com", "ann@example.com")
    );
    assert_eq!(
        kinds_after_review(&store, &p).await,
        [EventKind::Escalated, EventKind::Vote]
    );
}

pub async fn two_distinct_approvals_approve_under_a_quorum_of_two(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("two", 2, &[])).await;
    let recorded = vote(&store, oncall("a", "ann@example.com"), &p, approve())
        .await
        .unwrap();
    assert!(matches!(recorded.resolution, Resolution::Recorded { .. }));
    let admin = Caller {
        role: Role::Admin,
        ..oncall("a", "bob@example.com")
    };
    let decided = vote(&store, admin, &p, approve()).await.unwrap();
    let decision = decision_of(&decided);
    assert_eq!(decision.outcome, DecisionOutcome::Approve);
    assert_eq!(decision.route_id.as_deref(), Some("two"));
    let people: Vec<&str> = decision.votes.iter().map(|v| v.person.as_str()).collect();
    assert_eq!(people, ["ann@example.com", "bob@example.com"]);
    assert_eq!(
        human_gate(decision),
        (true, "approved by ann@example.com, bob@example.com".into())
    );
    assert_eq!(decided.proposal.state, ProposalState::Approved);
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.state, ProposalState::Approved);
    assert_eq!(stored.decision.as_ref(), Some(decision), "as written");
    assert_eq!(
        kinds_after_review(&store, &p).await,
        [
            EventKind::Escalated,
            EventKind::Vote,
            EventKind::Vote,
            EventKind::Approved
        ]
    );
    let record = store.get_escalation("a", &p.id).await.unwrap().unwrap();
    assert_eq!(record.votes, decision.votes);
    assert_eq!(record.proposal.decision.as_ref(), Some(decision));

    // Decided: another person's vote is refused naming the state; a recorded
    // verdict repeated is answered with the decided proposal.
    let late = vote(&store, oncall("a", "carol@example.com"), &p, approve()).await;
    assert!(
        matches!(
            late,
            Err(ResolveError::NotEscalated {
                state: ProposalState::Approved,
                ..
            })
        ),
        "{late:?}"
    );
    let repeat = vote(&store, oncall("a", "ann@example.com"), &p, approve())
        .await
        .unwrap();
    assert_eq!(repeat.resolution, Resolution::Repeat);
    assert_eq!(repeat.proposal, stored);
}

/// One person's rejection rejects at once, whatever the approvals; like any
/// rejection, it counts for the operator's breaker (here of one).
pub async fn one_rejection_among_approvals_rejects(store: DynStore) {
    seeded(&store, "a").await;
    let policy = countersign_store::TenantPolicy {
        breaker_threshold: 1,
        ..Default::default()
    };
    store.set_tenant_policy("a", policy).await.unwrap();
    let p = escalated(&store, "a", &route("three", 3, &[])).await;
    vote(&store, oncall("a", "ann@example.com"), &p, approve())
        .await
        .unwrap();
    let decided = vote(&store, oncall("a", "bob@example.com"), &p, reject())
        .await
        .unwrap();
    let decision = decision_of(&decided);
    assert_eq!(decision.outcome, DecisionOutcome::Reject);
    assert_eq!(
        human_gate(decision),
        (false, "rejected by bob@example.com: not now".into())
    );
    assert_eq!(decision.votes.len(), 2);
    assert_eq!(
        store.get_proposal("a", &p.id).await.unwrap().unwrap().state,
        ProposalState::Rejected
    );
    let late = vote(&store, oncall("a", "carol@example.com"), &p, approve()).await;
    assert!(
        matches!(
            late,
            Err(ResolveError::NotEscalated {
                state: ProposalState::Rejected,
                ..
            })
        ),
        "{late:?}"
    );
    assert_eq!(
        kinds_after_review(&store, &p).await,
        [
            EventKind::Escalated,
            EventKind::Vote,
            EventKind::Vote,
            EventKind::Rejected,
            EventKind::BreakerTripped
        ]
    );
}

/// Two people answer at once on a route of one: one vote decides, the other
/// is refused with the decided state; one vote, one decision, one ending.
pub async fn two_concurrent_first_votes_decide_once(store: DynStore) {
    seeded(&store, "a").await;
    let one = route("one", 1, &[]);
    for round in 0..8 {
        // A target of its own: no round's approval overlaps another's.
        let target = format!("node-1{round}");
        let mut labels = fixtures::production();
        labels.insert("cluster".into(), format!("c{round}"));
        store
            .put_target("a", &target, TargetStatus::Online, labels)
            .await
            .unwrap();
        let p = escalated_at(&store, "a", &target, &one, now_ms()).await;
        let (ballot_b, outcome_b) = if round % 2 == 0 {
            (approve(), ProposalState::Approved)
        } else {
            (reject(), ProposalState::Rejected)
        };
        let (first, second) = tokio::join!(
            store.cast_vote(oncall("a", "ann@example.com"), &p.id, approve(), now_ms()),
            store.cast_vote(oncall("a", "bob@example.com"), &p.id, ballot_b, now_ms()),
        );
        let answers = [first.unwrap(), second.unwrap()];
        let decided: Vec<&Voted> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
        assert_eq!(decided.len(), 1, "round {round}: {answers:?}");
        let state = decided[0].proposal.state;
        assert!(
            state == ProposalState::Approved || state == outcome_b,
            "{state}"
        );
        let refused = answers.iter().find_map(|a| a.as_ref().err()).unwrap();
        assert_eq!(
            refused,
            &ResolveError::NotEscalated {
                id: p.id.clone(),
                state
            },
            "the loser is told the outcome"
        );
        let record = store.get_escalation("a", &p.id).await.unwrap().unwrap();
        assert_eq!(record.votes.len(), 1);
        assert_eq!(record.proposal.state, state);
        let ends = kinds_after_review(&store, &p)
            .await
            .into_iter()
            .filter(|k| k.is_terminal())
            .count();
        assert_eq!(ends, 1);
    }
}

/// A vote that arrives after the escalation ran out is not recorded: the
/// expiry is applied in its transaction and the caller is told.
pub async fn a_vote_after_expiry_applies_the_expiry(store: DynStore) {
    seeded(&store, "a").await;
    let two = route("two", 2, &[]);
    let opened = now_ms() - 2 * HOUR;
    let p = escalated_at(&store, "a", "node-01", &two, opened).await;
    // Ann approved in time.
    let in_time = store
        .cast_vote(
            oncall("a", "ann@example.com"),
            &p.id,
            approve(),
            opened + 1_000,
        )
        .await
        .unwrap();
    assert!(matches!(
        in_time.unwrap().resolution,
        Resolution::Recorded { .. }
    ));
    let late = vote(&store, oncall("a", "bob@example.com"), &p, approve()).await;
    assert_eq!(
        late,
        Err(ResolveError::Expired {
            approvals: 1,
            required: 2
        })
    );
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.state, ProposalState::Rejected);
    let decision = stored.decision.unwrap();
    assert_eq!(
        human_gate(&decision),
        (false, "expired: 1 of 2 approvals".into())
    );
    assert_eq!(decision.route_id.as_deref(), Some("two"));
    assert_eq!(decision.votes.len(), 1, "bob's late vote is not recorded");
    assert_eq!(
        kinds_after_review(&store, &p).await,
        [EventKind::Escalated, EventKind::Vote, EventKind::Rejected]
    );
    // Once decided, it is NotEscalated for the next latecomer.
    let later = vote(&store, oncall("a", "carol@example.com"), &p, approve()).await;
    assert!(matches!(
        later,
        Err(ResolveError::NotEscalated {
            state: ProposalState::Rejected,
            ..
        })
    ));
}

pub async fn a_vote_after_a_cancel_is_refused_by_state(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("one", 1, &[])).await;
    let cancelled = store
        .cancel_proposal("a", &p.id, "rolled back by hand", None)
        .await
        .unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled);
    let refused = vote(&store, oncall("a", "ann@example.com"), &p, approve()).await;
    assert!(
        matches!(
            refused,
            Err(ResolveError::NotEscalated {
                state: ProposalState::Cancelled,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(
        store
            .list_escalations("a", &InboxFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.next_expiry().await.unwrap(), None);
    assert!(
        store
            .expire_escalations(now_ms() + 2 * HOUR, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        kinds_after_review(&store, &p).await,
        [EventKind::Escalated, EventKind::Cancelled]
    );
}

/// People's approval re-checked as it commits: each fact that moved while
/// they decided turns it into a rejection naming what moved, the human gate
/// passed.
pub async fn a_final_approval_is_rechecked_against_the_facts_at_commit(store: DynStore) {
    seeded(&store, "a").await;
    let one = route("one", 1, &[]);
    let ann = oncall("a", "ann@example.com");

    // The target went offline.
    let p = escalated(&store, "a", &route("one", 1, &[])).await;
    store
        .put_target(
            "a",
            "node-01",
            TargetStatus::Offline,
            fixtures::production(),
        )
        .await
        .unwrap();
    let decided = vote(&store, ann, &p, approve()).await.unwrap();
    let decision = decision_of(&decided);
    assert_eq!(decision.outcome, DecisionOutcome::Reject);
    assert_eq!(
        decision.reason,
        format!("{TARGET_STATE}: target node-01 became offline while the escalation was open")
    );
    assert!(human_gate(decision).0, "people did approve");
    assert_eq!(
        store
            .get_proposal("a", &p.id)
            .await
            .unwrap()
            .unwrap()
            .decision
            .as_ref(),
        Some(decision)
    );
    seeded(&store, "a").await;

    // The SOP changed (every put is a new version).
    let p = escalated_at(&store, "a", "node-02", &one, now_ms()).await;
    store.put_sop("a", fixtures::sop()).await.unwrap();
    let decision = decision_of(&vote(&store, ann, &p, approve()).await.unwrap()).clone();
    assert_eq!(decision.outcome, DecisionOutcome::Reject);
    assert!(
        decision.reason.starts_with(&format!(
            "{SOP}: SOP-007 changed while the escalation was open (v"
        )),
        "{}",
        decision.reason
    );

    // Another operation on the same target was approved meanwhile.
    let p = escalated_at(&store, "a", "node-03", &one, now_ms()).await;
    let other = reviewing_on(&store, "a", "node-03").await;
    let facts = review_facts(&store, &other).await.unwrap();
    let all_passed = gates::Verdict {
        gates: gates::evaluate(&facts)
            .gates
            .into_iter()
            .map(|g| countersign_domain::GateResult { passed: true, ..g })
            .collect(),
        ..gates::evaluate(&facts)
    };
    let stamp = ReviewStamp {
        reviewer: "w/0".into(),
        decided_at: now_ms(),
        latency_ms: 1,
    };
    let approval = review::decide(&all_passed, &facts.spec, stamp);
    assert_eq!(approval.outcome, DecisionOutcome::Approve);
    let recorded = store
        .record_decisions(vec![(key(&other), approval)])
        .await
        .unwrap();
    assert!(
        matches!(recorded[..], [RecordOutcome::Recorded]),
        "{recorded:?}"
    );
    let decision = decision_of(&vote(&store, ann, &p, approve()).await.unwrap()).clone();
    assert_eq!(decision.outcome, DecisionOutcome::Reject);
    assert_eq!(
        decision.reason,
        format!(
            "{NO_PARALLEL_OPERATION}: host_restart_service on node-03 (proposal {}) was \
             approved while the escalation was open",
            other.id
        )
    );
    assert_eq!(decision.missing_gates, [NO_PARALLEL_OPERATION]);

    // Nothing moved: the approval stands.
    let p = escalated_at(&store, "a", "node-02", &one, now_ms()).await;
    let decision = decision_of(&vote(&store, ann, &p, approve()).await.unwrap()).clone();
    assert_eq!(
        decision.outcome,
        DecisionOutcome::Approve,
        "{}",
        decision.reason
    );
}

pub async fn the_janitors_expiry_decides_what_ran_out_and_nothing_else(store: DynStore) {
    seeded(&store, "a").await;
    let one = route("one", 1, &[]);
    let now = now_ms();
    let ran_out = escalated_at(&store, "a", "node-01", &one, now - 2 * HOUR).await;
    let open = escalated_at(&store, "a", "node-02", &one, now).await;
    let expires = |p: &Proposal| {
        let store = store.clone();
        let id = p.id.clone();
        async move {
            store
                .get_escalation("a", &id)
                .await
                .unwrap()
                .unwrap()
                .escalation
                .expires_at
        }
    };
    let (ran_out_at, open_at) = (expires(&ran_out).await, expires(&open).await);
    assert_eq!(store.next_expiry().await.unwrap(), Some(ran_out_at));

    let expired = store.expire_escalations(now, 10).await.unwrap();
    assert_eq!(expired, [key(&ran_out)]);
    let stored = store.get_proposal("a", &ran_out.id).await.unwrap().unwrap();
    assert_eq!(stored.state, ProposalState::Rejected);
    let decision = stored.decision.unwrap();
    assert_eq!(
        human_gate(&decision),
        (false, "expired: 0 of 1 approvals".into())
    );
    assert_eq!(decision.route_id.as_deref(), Some("one"));
    assert!(decision.votes.is_empty());
    assert_eq!(
        kinds_after_review(&store, &ran_out).await,
        [EventKind::Escalated, EventKind::Rejected]
    );
    assert_eq!(
        store
            .get_proposal("a", &open.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ProposalState::Escalated
    );
    assert!(
        store.expire_escalations(now, 10).await.unwrap().is_empty(),
        "once"
    );
    assert_eq!(store.next_expiry().await.unwrap(), Some(open_at));
    let at_expiry = store.expire_escalations(open_at, 10).await.unwrap();
    assert_eq!(at_expiry, [key(&open)], "from expires_at on");
    assert_eq!(store.next_expiry().await.unwrap(), None);
}

/// The parallel-operation gate's facts count an escalated proposal as open.
pub async fn an_escalated_proposal_blocks_overlapping_operations(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("one", 1, &[])).await;
    let later = reviewing_on(&store, "a", "node-01").await;
    let facts = review_facts(&store, &later).await.unwrap();
    let blocking: Vec<(&str, ProposalState)> = facts
        .others
        .iter()
        .map(|o| (o.id.as_str(), o.state))
        .collect();
    assert_eq!(blocking, [(p.id.as_str(), ProposalState::Escalated)]);
    let verdict = gates::evaluate(&facts);
    let parallel = verdict
        .gates
        .iter()
        .find(|g| g.gate == NO_PARALLEL_OPERATION)
        .unwrap();
    assert!(!parallel.passed, "{parallel:?}");
}

pub async fn review_facts_carry_the_tenants_routes(store: DynStore) {
    seeded(&store, "a").await;
    seeded(&store, "b").await;
    let routes = [route("r1", 1, &["sop"]), route("r2", 2, &[])];
    for r in &routes {
        store.put_route("a", r).await.unwrap();
    }
    let mine = reviewing_on(&store, "a", "node-01").await;
    let theirs = reviewing_on(&store, "b", "node-01").await;
    let facts = store
        .review_facts_many(&[mine, theirs])
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    assert_eq!(facts[0].routes, routes);
    assert!(facts[1].routes.is_empty());
}

/// A decision people reached goes into the audit chain with its route and
/// votes, and the log with it verifies (its copies too).
pub async fn a_decided_escalation_is_chained_with_its_votes(store: DynStore) {
    seeded(&store, "a").await;
    let p = escalated(&store, "a", &route("two", 2, &[])).await;
    vote(&store, oncall("a", "ann@example.com"), &p, approve())
        .await
        .unwrap();
    let decided = vote(&store, oncall("a", "bob@example.com"), &p, approve())
        .await
        .unwrap();
    let decision = decision_of(&decided).clone();
    store.append_audit(100).await.unwrap();
    let entry = store.get_audit("a", &p.id).await.unwrap().unwrap();
    assert_eq!(entry.record.route_id.as_deref(), Some("two"));
    assert_eq!(entry.record.votes, decision.votes);
    let mut verifier = Verifier::new();
    let stored = store.audit_range("a", 0, 100).await.unwrap();
    assert!(
        stored[0]
            .record
            .contains(r#""votes":[{"person":"ann@example.com""#)
    );
    for entry in stored {
        verifier.push_checked(
            entry.sequence,
            &entry.digest,
            Ok(entry.leaf()),
            entry.check_copies(),
        );
    }
    let verified = verifier.finish();
    assert!(verified.ok(), "{verified:?}");
}
