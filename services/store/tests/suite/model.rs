//! Model profiles and model reviews, on every backend (instantiated by the
//! suite's macro like the rest of it).

use countersign_domain::{
    BlastRadius, OperationClass, ProposalState, Role,
    audit::Verifier,
    escalation::{
        Ballot, Caller, Escalation, InboxFilter, Resolution, RouteInput, RouteMatch, Verdict,
        validate_route,
    },
    gates::{self, MODEL},
    model::{ModelProfile, ModelProfileInput, ModelReview, OnUnsure, TokenUsage, validate_profile},
    now_ms,
    review::{self, ReviewStamp},
};
use countersign_store::{DynStore, RecordOutcome, ReviewKey, StoreError};
use countersign_test_support::fixtures;

use super::{proposal_events, review_facts, reviewing};

/// A profile on `endpoint` for every proposal.
fn profile(id: &str, endpoint: &str) -> ModelProfile {
    validate_profile(
        ModelProfileInput {
            id: id.into(),
            endpoint: endpoint.into(),
            ..Default::default()
        },
        &["local", "remote"],
    )
    .unwrap()
}

/// What a review by the `db` profile on `local` recorded.
fn model_review(verdict: &str) -> ModelReview {
    ModelReview {
        profile_id: "db".into(),
        endpoint: "local".into(),
        model: "qwen2.5-7b-instruct".into(),
        verdict: verdict.into(),
        latency_ms: 840,
        usage: TokenUsage {
            prompt: 812,
            completion: 9,
            cached_prompt: 768,
        },
    }
}

fn stamp() -> ReviewStamp {
    ReviewStamp {
        reviewer: "w/0".into(),
        decided_at: now_ms(),
        latency_ms: 4,
    }
}

pub async fn model_profiles_are_put_listed_replaced_and_deleted_per_tenant(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut db = profile("db", "local");
    db.matcher = RouteMatch {
        actions: vec!["db_*".into(), "host_?estart*".into()],
        classes: vec![OperationClass::Write, OperationClass::Destructive],
        blast_radii: vec![BlastRadius::Cluster, BlastRadius::TenantWide],
        target_selector: [
            ("env".to_owned(), "production".to_owned()),
            ("tier".to_owned(), "data".to_owned()),
        ]
        .into(),
    };
    db.on_unsure = OnUnsure::Escalate;
    db.calls_per_minute = 30;
    let all = profile("all", "remote");
    assert_eq!(store.put_model_profile("a", &db).await.unwrap(), db);
    assert_eq!(store.put_model_profile("a", &all).await.unwrap(), all);
    assert_eq!(
        store.list_model_profiles("a").await.unwrap(),
        [all.clone(), db.clone()],
        "by id, every match field as put"
    );
    assert!(store.list_model_profiles("b").await.unwrap().is_empty());
    assert!(
        store.list_routes("a").await.unwrap().is_empty(),
        "a profile is not a route"
    );

    let replaced = ModelProfile {
        endpoint: "remote".into(),
        on_unsure: OnUnsure::Reject,
        calls_per_minute: 0,
        ..db.clone()
    };
    assert_eq!(
        store.put_model_profile("a", &replaced).await.unwrap(),
        replaced
    );
    assert_eq!(
        store.list_model_profiles("a").await.unwrap(),
        [all.clone(), replaced.clone()]
    );

    assert!(matches!(
        store.delete_model_profile("b", "db").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.delete_model_profile("a", "db").await.unwrap(),
        replaced
    );
    let gone = store.delete_model_profile("a", "db").await.unwrap_err();
    assert!(
        matches!(&gone, StoreError::NotFound(what) if what == "model profile `db`"),
        "{gone:?}"
    );
    assert_eq!(store.list_model_profiles("a").await.unwrap(), [all]);
}

pub async fn review_facts_carry_the_tenants_model_profiles_beside_its_routes(store: DynStore) {
    fixtures::seed_reference(store.as_ref(), "a").await;
    fixtures::seed_reference(store.as_ref(), "b").await;
    let profiles = [profile("p1", "local"), profile("p2", "remote")];
    for p in &profiles {
        store.put_model_profile("a", p).await.unwrap();
    }
    let route = validate_route(RouteInput {
        id: "r".into(),
        approvals_required: 1,
        ..Default::default()
    })
    .unwrap();
    store.put_route("a", &route).await.unwrap();
    let mine = reviewing(&store, "a", "user_42").await;
    let theirs = reviewing(&store, "b", "user_42").await;
    let facts = store
        .review_facts_many(&[mine.clone(), theirs])
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    assert_eq!(facts[0].model_profiles, profiles);
    assert_eq!(facts[0].routes, [route]);
    assert!(facts[1].model_profiles.is_empty());
    assert_eq!(
        review_facts(&store, &mine).await.unwrap().model_profiles,
        profiles
    );
}

/// A decision shaped by a model keeps its review beside it, on every read
/// path, and in its audit record (with the `model` gate); a decision no
/// model reviewed has none in either; the log verifies with the copies the
/// store keeps.
pub async fn a_decisions_model_review_is_kept_beside_it_and_in_its_record(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let reviewed = reviewing(&store, "a", "user_42").await;
    let plain = reviewing(&store, "a", "user_43").await;
    let verdict = gates::Verdict {
        gates: Vec::new(),
        sop: None,
        rollback_path: None,
    };
    let model_gate = countersign_domain::GateResult {
        gate: MODEL.into(),
        passed: false,
        detail: "reject: the SOP covers restarts, not failovers".into(),
    };
    let mut decision = review::decide(
        &verdict.with_model(model_gate),
        &(&reviewed.spec).into(),
        stamp(),
    );
    decision.model = Some(model_review("reject"));
    let recorded = store
        .record_decisions(vec![
            (
                ReviewKey {
                    tenant: "a".into(),
                    id: reviewed.id.clone(),
                },
                decision,
            ),
            (
                ReviewKey {
                    tenant: "a".into(),
                    id: plain.id.clone(),
                },
                review::decide(&verdict, &(&plain.spec).into(), stamp()),
            ),
        ])
        .await
        .unwrap();
    assert!(matches!(
        recorded[..],
        [RecordOutcome::Recorded, RecordOutcome::Recorded]
    ));

    let stored = store
        .get_proposal("a", &reviewed.id)
        .await
        .unwrap()
        .unwrap();
    let decision = stored.decision.unwrap();
    assert_eq!(decision.model, Some(model_review("reject")));
    let plain_decision = store
        .get_proposal("a", &plain.id)
        .await
        .unwrap()
        .unwrap()
        .decision
        .unwrap();
    assert_eq!(plain_decision.model, None);
    let events = proposal_events(&store, "a", &reviewed.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.proposal.state, ProposalState::Rejected);
    assert_eq!(
        last.proposal.decision.as_ref().unwrap().model,
        Some(model_review("reject")),
        "the event carries the decision as stored"
    );

    assert_eq!(store.append_audit(100).await.unwrap(), 2);
    let entry = store.get_audit("a", &reviewed.id).await.unwrap().unwrap();
    assert_eq!(entry.record.gates.last().unwrap().gate, MODEL);
    assert_eq!(entry.record.model, Some(model_review("reject")));
    let plain_entry = store.get_audit("a", &plain.id).await.unwrap().unwrap();
    assert_eq!(plain_entry.record.model, None);
    let mut verifier = Verifier::new();
    for stored in store.audit_range("a", 0, 100).await.unwrap() {
        let reviewed_entry = stored.sequence == entry.sequence;
        assert_eq!(
            stored.record.contains(r#""model":{"profile_id":"db""#),
            reviewed_entry,
            "{}",
            stored.record
        );
        verifier.push_checked(
            stored.sequence,
            &stored.digest,
            Ok(stored.leaf()),
            stored.check_copies(),
        );
    }
    assert!(verifier.finish().ok());
}

/// The model's review of an escalated proposal is kept with its escalation
/// and carried into the decision people reach.
pub async fn an_escalations_model_review_reaches_the_decision_people_make(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = reviewing(&store, "a", "user_42").await;
    let route = validate_route(RouteInput {
        id: "one".into(),
        approvals_required: 1,
        ..Default::default()
    })
    .unwrap();
    let verdict = gates::Verdict {
        gates: Vec::new(),
        sop: None,
        rollback_path: None,
    };
    let escalation = Escalation {
        model: Some(model_review("unsure")),
        ..Escalation::open(&route, &verdict, &stamp())
    };
    let key = ReviewKey {
        tenant: "a".into(),
        id: p.id.clone(),
    };
    store
        .open_escalations(vec![(key, escalation)])
        .await
        .unwrap();
    let open = store.get_escalation("a", &p.id).await.unwrap().unwrap();
    assert_eq!(open.escalation.model, Some(model_review("unsure")));
    let listed = store
        .list_escalations("a", &InboxFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(listed[0].escalation.model, Some(model_review("unsure")));

    let caller = Caller {
        tenant: "a",
        key_id: "k",
        person: Some("ann@example.com"),
        role: Role::Oncall,
        agent: false,
    };
    let ballot = Ballot {
        verdict: Some(Verdict::Reject),
        comment: "not now",
    };
    let voted = store
        .cast_vote(caller, &p.id, ballot, now_ms())
        .await
        .unwrap()
        .unwrap();
    let Resolution::Decided { decision, .. } = voted.resolution else {
        panic!("one rejection decides: {:?}", voted.resolution);
    };
    assert_eq!(decision.model, Some(model_review("unsure")));
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.decision.unwrap().model, Some(model_review("unsure")));
}

/// With a model profile, every review of the tenant carries its whole SOP
/// catalogue (every action's, retired ones too, by id), the same for every
/// proposal of a batch, whatever its action; its `sops` stay those of its
/// action. A tenant without a profile gathers no catalogue.
pub async fn review_facts_carry_the_whole_sop_catalogue_where_a_model_reviews(store: DynStore) {
    fixtures::seed_reference(store.as_ref(), "a").await;
    fixtures::seed_reference(store.as_ref(), "b").await;
    for tenant in ["a", "b"] {
        for (id, action) in [("SOP-001", "db_failover"), ("SOP-100", "dns_flush")] {
            let sop = countersign_store::SopInput {
                id: id.into(),
                action: action.into(),
                ..fixtures::sop()
            };
            store.put_sop(tenant, sop).await.unwrap();
        }
    }
    store.retire_sop("a", "SOP-100").await.unwrap();
    store
        .put_model_profile("a", &profile("p1", "local"))
        .await
        .unwrap();
    let restart = reviewing(&store, "a", "user_42").await;
    let mut failover = countersign_store::NewProposal {
        id: countersign_store::NewProposal::new_id(),
        spec: countersign_domain::ProposalSpec {
            action: "db_failover".into(),
            idempotency_key: String::new(),
            ..fixtures::spec()
        },
        ..super::new_proposal("a", "")
    };
    failover.spec.operator = "user_43".into();
    let failover = store
        .insert_proposal(failover)
        .await
        .unwrap()
        .proposal()
        .clone();
    let theirs = reviewing(&store, "b", "user_42").await;
    let facts = store
        .review_facts_many(&[restart.clone(), failover.clone(), theirs])
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    let ids = |sops: &[countersign_domain::Sop]| -> Vec<String> {
        sops.iter().map(|s| s.id.clone()).collect()
    };
    assert_eq!(
        ids(&facts[0].sop_catalogue),
        ["SOP-001", "SOP-007", "SOP-100"]
    );
    assert!(facts[0].sop_catalogue.iter().any(|s| s.retired));
    assert_eq!(facts[1].sop_catalogue, facts[0].sop_catalogue);
    assert_eq!(ids(&facts[0].sops), ["SOP-007"]);
    assert_eq!(ids(&facts[1].sops), ["SOP-001"]);
    assert!(
        facts[2].sop_catalogue.is_empty(),
        "no profile, no catalogue"
    );
    assert_eq!(ids(&facts[2].sops), ["SOP-007"]);
    assert_eq!(
        review_facts(&store, &failover).await.unwrap().sop_catalogue,
        facts[0].sop_catalogue
    );
}

/// A tenant's model calls per minute are one count for every caller: at
/// most the cap in any minute (a call counts for 60 s, then frees its
/// place), each tenant its own, 0 no cap; calls taken at once by many
/// callers never exceed it.
pub async fn a_tenants_model_calls_are_capped_per_minute_for_every_caller(store: DynStore) {
    for tenant in ["a", "b"] {
        store.create_tenant(tenant).await.unwrap();
    }
    let at = 1_000_000;
    let mut taken = Vec::new();
    for offset in [0, 10, 20, 59_999, 60_000, 60_001, 60_010, 119_999] {
        taken.push(store.take_model_call("a", at + offset, 2).await.unwrap());
    }
    assert_eq!(
        taken,
        [true, true, false, false, true, false, true, false],
        "the first call frees its place at 60 s, the second at 60.01 s"
    );
    assert!(store.take_model_call("b", at, 2).await.unwrap(), "b's own");
    for _ in 0..5 {
        assert!(store.take_model_call("b", at, 0).await.unwrap(), "no cap");
    }

    // Many callers at once, a minute later: exactly the cap is taken.
    let later = at + 600_000;
    let racing = (0..12).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.take_model_call("a", later, 5).await.unwrap() })
    });
    let won = futures::future::join_all(racing)
        .await
        .into_iter()
        .filter(|taken| *taken.as_ref().unwrap())
        .count();
    assert_eq!(won, 5);

    // Any sequence of calls: no 60 s holds more than the cap.
    let mut now = later + 600_000;
    let mut times = Vec::new();
    let mut seed = 7u64;
    for _ in 0..120 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        now += (seed >> 33) as i64 % 4_000;
        if store.take_model_call("a", now, 4).await.unwrap() {
            times.push(now);
        }
    }
    for (i, &start) in times.iter().enumerate() {
        let within = times[i..]
            .iter()
            .take_while(|&&t| t < start + 60_000)
            .count();
        assert!(within <= 4, "{within} calls from {start}: {times:?}");
    }
    assert!(times.len() > 8, "the cap frees as calls age: {times:?}");
}
