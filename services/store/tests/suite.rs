//! One suite, run against every backend: each backend module below supplies
//! `store()` and the whole suite is instantiated for it.

use countersign_domain::{BlastRadius, ProposalSpec, ProposalState, Role, api_key};
use countersign_store::{
    DynStore, EventKind, NewApiKey, NewProposal, StoreError, SubmitOutcome, TenantPolicy,
};
use countersign_test_support::fixtures;

/// The shared spec under the idempotency key `key`.
fn spec(key: &str) -> ProposalSpec {
    ProposalSpec {
        idempotency_key: key.into(),
        ..fixtures::spec()
    }
}

/// Begins one review, as the reviewer begins a batch of them.
/// Reviews `proposal` and rejects it on its target's state.
async fn reject_on_target_state(store: &DynStore, proposal: &countersign_domain::Proposal) {
    begin_review(store, &proposal.tenant, &proposal.id)
        .await
        .unwrap();
    let rejection = fixtures::rejection(&proposal.spec, "target_state");
    store
        .record_decision(&proposal.tenant, &proposal.id, rejection)
        .await
        .unwrap();
}

async fn begin_review(
    store: &DynStore,
    tenant: &str,
    id: &str,
) -> Result<countersign_store::BeginReview, StoreError> {
    let key = countersign_store::ReviewKey {
        tenant: tenant.into(),
        id: id.into(),
    };
    let mut begun = store.begin_reviews(&[key]).await?;
    assert_eq!(begun.len(), 1, "one answer per review");
    Ok(begun.remove(0))
}

/// One proposal's facts, as the reviewer gathers a batch's.
async fn review_facts(
    store: &DynStore,
    proposal: &countersign_domain::Proposal,
) -> Result<countersign_domain::gates::ReviewFacts, StoreError> {
    let mut facts = store
        .review_facts_many(std::slice::from_ref(proposal))
        .await?;
    assert_eq!(facts.len(), 1, "one answer per proposal");
    facts.remove(0)
}

/// One proposal's logged events, oldest first, as a watcher of its tenant
/// reads them.
async fn proposal_events(
    store: &DynStore,
    tenant: &str,
    id: &str,
) -> Result<Vec<countersign_domain::Event>, StoreError> {
    let events = store.events_after(0, Some(tenant), 1_000).await?;
    Ok(events.into_iter().filter(|e| e.proposal.id == id).collect())
}

fn new_proposal(tenant: &str, key: &str) -> NewProposal {
    fixtures::new_proposal(tenant, spec(key))
}

pub async fn first_bootstrap_creates_the_default_tenant_and_an_admin_key_once(store: DynStore) {
    let key = store
        .bootstrap()
        .await
        .unwrap()
        .expect("first bootstrap mints a key");
    assert_eq!(key.tenant, "default");
    let record = store.find_api_key(&key.key_id).await.unwrap().unwrap();
    assert_eq!(record.role, Role::Admin);
    assert!(api_key::verify(&key.key, &record.key_hash));
    assert!(store.bootstrap().await.unwrap().is_none());
}

pub async fn tenants_are_unique_and_well_named(store: DynStore) {
    store.create_tenant("acme").await.unwrap();
    assert!(matches!(
        store.create_tenant("acme").await,
        Err(StoreError::AlreadyExists(_))
    ));
    for bad in ["", "Acme", "a b", "-x", &"a".repeat(64)] {
        assert!(
            matches!(
                store.create_tenant(bad).await,
                Err(StoreError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        store.get_tenant("acme").await.unwrap().unwrap().policy,
        TenantPolicy::default(),
        "a new tenant's receipts last 15 minutes"
    );
    assert_eq!(TenantPolicy::default().receipt_ttl_ms, 15 * 60 * 1000);
    let policy = TenantPolicy {
        parallel_window_ms: 5_000,
        allow_force_approve_no_sop: true,
        breaker_threshold: 7,
        breaker_window_ms: 60_000,
        receipt_ttl_ms: 90_000,
    };
    assert_eq!(
        store
            .set_tenant_policy("acme", policy)
            .await
            .unwrap()
            .policy,
        policy
    );
    assert_eq!(
        store.get_tenant("acme").await.unwrap().unwrap().policy,
        policy
    );
    assert!(matches!(
        store.set_tenant_policy("nope", policy).await,
        Err(StoreError::NotFound(_))
    ));
    // A receipt lifetime outside a second to a day is refused, and nothing
    // of that policy is kept.
    for receipt_ttl_ms in [0, 999, -1, 24 * 60 * 60 * 1000 + 1] {
        let bad = TenantPolicy {
            receipt_ttl_ms,
            ..TenantPolicy::default()
        };
        let refused = store.set_tenant_policy("acme", bad).await;
        assert!(
            matches!(&refused, Err(StoreError::InvalidArgument(m)) if m.starts_with("receipt_ttl_ms")),
            "{receipt_ttl_ms}: {refused:?}"
        );
    }
    assert_eq!(
        store.get_tenant("acme").await.unwrap().unwrap().policy,
        policy
    );
}

pub async fn keys_are_stored_hashed_and_can_be_revoked(store: DynStore) {
    store.create_tenant("acme").await.unwrap();
    let (record, key) = store
        .create_api_key(NewApiKey {
            tenant: "acme".into(),
            name: "bot".into(),
            role: Role::Coordinator,
            agent: true,
            person: None,
        })
        .await
        .unwrap();
    assert!(
        !record
            .key_hash
            .windows(key.len())
            .any(|w| w == key.as_bytes())
    );
    assert_eq!(record.key_hash, api_key::hash(&key).to_vec());
    let found = store.find_api_key(&record.id).await.unwrap().unwrap();
    assert!(found.agent && found.revoked_at.is_none());
    assert_eq!(store.list_api_keys(Some("acme")).await.unwrap().len(), 1);
    assert!(store.list_api_keys(Some("other")).await.unwrap().is_empty());
    let revoked = store.revoke_api_key(&record.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(matches!(
        store.revoke_api_key("nope").await,
        Err(StoreError::NotFound(_))
    ));
    let missing_tenant = store
        .create_api_key(NewApiKey {
            tenant: "ghost".into(),
            name: String::new(),
            role: Role::Admin,
            agent: false,
            person: None,
        })
        .await;
    assert!(matches!(missing_tenant, Err(StoreError::NotFound(_))));
}

pub async fn a_proposal_is_visible_only_to_its_own_tenant(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let created = store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let SubmitOutcome::Created(p) = created else {
        panic!("expected a new proposal")
    };
    assert_eq!(p.state, ProposalState::Pending);
    assert_eq!(store.get_proposal("a", &p.id).await.unwrap().unwrap(), p);
    assert!(store.get_proposal("b", &p.id).await.unwrap().is_none());
    assert!(matches!(
        store.cancel_proposal("b", &p.id, "mine now", None).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.get_proposal("a", &p.id).await.unwrap().unwrap().state,
        ProposalState::Pending
    );
}

/// A name outside the tenant rules (which every tenant keeps) may still reach
/// the store, as a lookup's argument: it names no tenant and no rows, and is
/// never read as SQL.
pub async fn a_name_outside_the_tenant_rules_names_no_tenant_and_no_rows(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let created = store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let id = created.proposal().id.clone();
    for name in [
        "a'",
        "a\\",
        "A",
        "x', true), set_config('app.scope', 'system', true); --",
        "a'); SELECT set_config('app.tenant_id', 'a', true); --",
    ] {
        assert!(store.get_tenant(name).await.unwrap().is_none(), "{name:?}");
        assert!(
            store.get_proposal(name, &id).await.unwrap().is_none(),
            "{name:?}"
        );
        assert!(
            store
                .events_after(0, Some(name), 100)
                .await
                .unwrap()
                .is_empty(),
            "{name:?}"
        );
        let batches = store
            .begin_reviews(&[countersign_store::ReviewKey {
                tenant: name.into(),
                id: id.clone(),
            }])
            .await;
        assert!(
            !matches!(
                batches.as_deref(),
                Ok([countersign_store::BeginReview::Reviewing { .. }, ..])
            ),
            "{name:?} began a review of another tenant's proposal: {batches:?}"
        );
    }
    assert_eq!(
        store.get_proposal("a", &id).await.unwrap().unwrap().state,
        ProposalState::Pending,
        "the other names changed nothing"
    );
}

pub async fn an_idempotency_key_returns_the_same_proposal_or_conflicts(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let first = store
        .insert_proposal(new_proposal("a", "k1"))
        .await
        .unwrap();
    let again = store
        .insert_proposal(new_proposal("a", "k1"))
        .await
        .unwrap();
    assert!(matches!(again, SubmitOutcome::Deduplicated(_)));
    assert_eq!(first.proposal().id, again.proposal().id);
    let mut changed = new_proposal("a", "k1");
    changed.spec.reason = "something else".into();
    assert!(matches!(
        store.insert_proposal(changed).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let other_tenant = store
        .insert_proposal(new_proposal("b", "k1"))
        .await
        .unwrap();
    assert!(matches!(other_tenant, SubmitOutcome::Created(_)));
    assert_ne!(other_tenant.proposal().id, first.proposal().id);
}

pub async fn concurrent_submissions_are_each_answered_as_if_alone(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    // Arriving together, they share transactions where the backend groups
    // commits: a taken key, a conflicting spec, another tenant or one that
    // does not exist must still get the answer a lone submission gets.
    let mut submissions = Vec::new();
    for i in 0..24 {
        let tenant = if i % 3 == 0 { "b" } else { "a" };
        submissions.push((tenant, String::new(), "nginx OOM".to_owned()));
        submissions.push((tenant, format!("k{i}"), "nginx OOM".to_owned()));
        submissions.push((tenant, format!("k{i}"), "nginx OOM".to_owned()));
        submissions.push((tenant, format!("k{i}"), format!("other {i}")));
        if i % 6 == 0 {
            // A tenant that does not exist: fails itself, and only itself.
            submissions.push(("ghost", String::new(), "nginx OOM".to_owned()));
        }
    }
    let answers = futures::future::join_all(submissions.iter().map(|(tenant, key, reason)| {
        let store = store.clone();
        let mut new = new_proposal(tenant, key);
        new.spec.reason = reason.clone();
        async move { store.insert_proposal(new).await }
    }))
    .await;

    let mut created = std::collections::HashMap::new();
    for ((tenant, key, reason), answer) in submissions.iter().zip(&answers) {
        if *tenant == "ghost" {
            assert!(answer.is_err(), "{answer:?}");
            continue;
        }
        match answer {
            Ok(SubmitOutcome::Created(p)) => {
                assert_eq!((&p.tenant, &p.spec.reason), (&tenant.to_string(), reason));
                if !key.is_empty() {
                    let earlier = created.insert((*tenant, key.clone()), p.clone());
                    assert!(earlier.is_none(), "{key} created twice");
                }
            }
            Ok(SubmitOutcome::Deduplicated(_)) | Err(StoreError::AlreadyExists(_)) => {
                assert!(!key.is_empty(), "only a taken key is answered from before");
            }
            other => panic!("{tenant}/{key}: {other:?}"),
        }
    }
    for ((tenant, key, reason), answer) in submissions.iter().zip(&answers) {
        let Some(first) = created.get(&(*tenant, key.clone())) else {
            continue;
        };
        match answer {
            Ok(SubmitOutcome::Deduplicated(p)) => {
                assert_eq!(p.id, first.id);
                assert_eq!(reason, &first.spec.reason, "same spec, same proposal");
            }
            Err(StoreError::AlreadyExists(_)) => assert_ne!(reason, &first.spec.reason),
            Ok(SubmitOutcome::Created(p)) => assert_eq!(p.id, first.id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(created.len(), 24, "every key created once");
    let rows: usize = answers
        .iter()
        .filter(|a| matches!(a, Ok(SubmitOutcome::Created(_))))
        .count();
    assert_eq!(rows, 48, "24 without a key, 24 keys");
    let events = store.events_after(0, None, 1_000).await.unwrap();
    let submitted = events
        .iter()
        .filter(|e| e.kind == EventKind::Submitted)
        .count();
    assert_eq!(submitted, 48, "one SUBMITTED event per proposal created");
}

pub async fn a_cancelled_proposal_stays_cancelled(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let id = p.proposal().id.clone();
    let cancelled = store
        .cancel_proposal("a", &id, "changed my mind", None)
        .await
        .unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled);
    assert_eq!(cancelled.cancel_reason.as_deref(), Some("changed my mind"));
    assert!(matches!(
        store.cancel_proposal("a", &id, "again", None).await,
        Err(StoreError::FailedPrecondition(_))
    ));
}

/// An operation overlaps others while it is open, PENDING or REVIEWING, and
/// never again once it is cancelled or rejected.
pub async fn an_operation_overlaps_while_open_and_not_after_its_cancel(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    put_online(&store, "a", "n1", "c1").await;
    let pending = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    let reviewing = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    begin_review(&store, "a", &reviewing.id).await.unwrap();
    let cancelled = propose(&store, "a", "n1", BlastRadius::TenantWide).await;
    let cancelled_in_review = propose(&store, "a", "n1", BlastRadius::Cluster).await;
    begin_review(&store, "a", &cancelled_in_review.id)
        .await
        .unwrap();
    let rejected = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    begin_review(&store, "a", &rejected.id).await.unwrap();
    store
        .record_decision("a", &rejected.id, rejection(&rejected.spec))
        .await
        .unwrap();
    for p in [&cancelled, &cancelled_in_review] {
        store
            .cancel_proposal("a", &p.id, "not now", None)
            .await
            .unwrap();
    }
    for tenant_wide in [false, true] {
        let radius = if tenant_wide {
            BlastRadius::TenantWide
        } else {
            BlastRadius::SingleDevice
        };
        let later = propose(&store, "a", "n1", radius).await;
        let facts = review_facts(&store, &later).await.unwrap();
        let open: std::collections::BTreeSet<String> = [&pending, &reviewing]
            .iter()
            .map(|p| p.id.clone())
            .collect();
        assert!(ids(&facts).is_superset(&open), "{:?}", ids(&facts));
        for ended in [&cancelled, &cancelled_in_review, &rejected] {
            assert!(
                !ids(&facts).contains(&ended.id),
                "tenant_wide={tenant_wide}: {}",
                ended.id
            );
        }
        store
            .cancel_proposal("a", &later.id, "done", None)
            .await
            .unwrap();
    }
}

pub async fn a_key_cancels_only_what_it_submitted(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let submit = |key: Option<&str>| {
        let mut new = new_proposal("a", "");
        new.submitted_key = key.map(str::to_owned);
        let store = store.clone();
        async move {
            store
                .insert_proposal(new)
                .await
                .unwrap()
                .proposal()
                .id
                .clone()
        }
    };
    let mine = submit(Some("k1")).await;
    let state = |id: String| {
        let store = store.clone();
        async move { store.get_proposal("a", &id).await.unwrap().unwrap().state }
    };

    let denied = store.cancel_proposal("a", &mine, "no", Some("k2")).await;
    match denied {
        Err(StoreError::PermissionDenied(message)) => {
            assert!(message.contains("another key"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(mine.clone()).await, ProposalState::Pending);
    let cancelled = store
        .cancel_proposal("a", &mine, "mine", Some("k1"))
        .await
        .unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled);
    // Once terminal: the owner hears it is too late, another key still may not.
    assert!(matches!(
        store.cancel_proposal("a", &mine, "again", Some("k1")).await,
        Err(StoreError::FailedPrecondition(_))
    ));
    assert!(matches!(
        store.cancel_proposal("a", &mine, "again", Some("k2")).await,
        Err(StoreError::PermissionDenied(_))
    ));

    // No key recorded: only a cancel for anyone's may.
    let unowned = submit(None).await;
    assert!(matches!(
        store.cancel_proposal("a", &unowned, "no", Some("k1")).await,
        Err(StoreError::PermissionDenied(_))
    ));
    store
        .cancel_proposal("a", &unowned, "anyone's", None)
        .await
        .unwrap();

    let other = submit(Some("k1")).await;
    for (tenant, id) in [("b", other.as_str()), ("a", "01NOSUCHPROPOSAL")] {
        assert!(matches!(
            store.cancel_proposal(tenant, id, "no", Some("k1")).await,
            Err(StoreError::NotFound(_))
        ));
    }
    assert_eq!(state(other).await, ProposalState::Pending);
}

pub async fn an_idempotency_key_is_found_before_any_insert(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    assert!(
        store
            .find_idempotent("a", &spec(""))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .find_idempotent("a", &spec("k"))
            .await
            .unwrap()
            .is_none()
    );
    let first = store.insert_proposal(new_proposal("a", "k")).await.unwrap();
    let first = first.proposal().clone();

    let found = store.find_idempotent("a", &spec("k")).await.unwrap();
    assert_eq!(found.map(|p| p.id), Some(first.id.clone()));
    let mut reworded = spec("k");
    reworded.reason = "reworded".into();
    match store.find_idempotent("a", &reworded).await {
        Err(StoreError::AlreadyExists(message)) => {
            assert!(message.contains(&first.id), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        store
            .find_idempotent("b", &spec("k"))
            .await
            .unwrap()
            .is_none()
    );

    // A decided proposal comes with its decision, as Submit would answer it.
    reject_on_target_state(&store, &first).await;
    let found = store
        .find_idempotent("a", &spec("k"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.state, ProposalState::Rejected);
    assert!(found.decision.is_some());
}

pub async fn events_are_read_in_cursor_order_per_tenant_with_the_proposal_as_it_was(
    store: DynStore,
) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let first = store.insert_proposal(new_proposal("a", "")).await.unwrap();
    store.insert_proposal(new_proposal("b", "")).await.unwrap();
    let first = first.proposal().id.clone();
    store
        .cancel_proposal("a", &first, "no", None)
        .await
        .unwrap();

    let all = store.events_after(0, None, 100).await.unwrap();
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    let of_a = store.events_after(0, Some("a"), 100).await.unwrap();
    let kinds: Vec<_> = of_a.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Submitted, EventKind::Cancelled]);
    assert_eq!(of_a[0].proposal.state, ProposalState::Pending);
    assert_eq!(
        of_a[0].proposal.cancel_reason, None,
        "not cancelled yet then"
    );
    assert_eq!(of_a[1].proposal.state, ProposalState::Cancelled);
    assert_eq!(of_a[1].proposal.cancel_reason.as_deref(), Some("no"));
    let after_first = store
        .events_after(of_a[0].cursor, Some("a"), 100)
        .await
        .unwrap();
    assert_eq!(after_first, of_a[1..]);
    assert_eq!(store.events_after(0, None, 1).await.unwrap().len(), 1);
    let horizon = store.event_horizon(None).await.unwrap();
    assert_eq!(
        (horizon.pruned_through, horizon.latest),
        (0, all[2].position)
    );
}

/// A read by heads gives exactly the picked events, whole and as
/// `events_after` gives them (a decided proposal with its decision), says how
/// far it examined, and pages by heads, not by picked events.
pub async fn a_read_by_heads_gives_the_picked_events_whole_and_how_far_it_looked(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let first = store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let first = first.proposal().clone();
    store.insert_proposal(new_proposal("b", "")).await.unwrap();
    reject_on_target_state(&store, &first).await;
    let all = store.events_after(0, None, 100).await.unwrap();
    let last = all.last().unwrap().position;

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let heads = seen.clone();
    let rejections: countersign_store::Pick = std::sync::Arc::new(move |head| {
        heads.lock().unwrap().push(head.clone());
        head.kind == EventKind::Rejected
    });
    let page = store.events_picked(0, 100, rejections).await.unwrap();
    let rejected: Vec<_> = all
        .iter()
        .filter(|e| e.kind == EventKind::Rejected)
        .cloned()
        .collect();
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].proposal.decision.is_some());
    assert_eq!(
        page.events, rejected,
        "picked, whole, as events_after reads them"
    );
    assert_eq!((page.examined, page.through), (all.len() as u32, last));
    let heads: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| (h.position, h.tenant.clone(), h.proposal_id.clone(), h.kind))
        .collect();
    let expected: Vec<_> = all
        .iter()
        .map(|e| {
            (
                e.position,
                e.tenant().to_owned(),
                e.proposal.id.clone(),
                e.kind,
            )
        })
        .collect();
    assert_eq!(heads, expected, "every head, in log order");

    let none: countersign_store::Pick = std::sync::Arc::new(|_| false);
    let first_two = store.events_picked(0, 2, none.clone()).await.unwrap();
    assert!(first_two.events.is_empty());
    assert_eq!(
        (first_two.examined, first_two.through),
        (2, all[1].position)
    );
    let rest = store
        .events_picked(first_two.through, 100, none.clone())
        .await
        .unwrap();
    assert_eq!((rest.examined, rest.through), (all.len() as u32 - 2, last));
    let past = store.events_picked(last, 100, none).await.unwrap();
    assert_eq!((past.examined, past.through), (0, last));
}

pub async fn pruning_moves_the_horizon_and_keeps_newer_events(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    for _ in 0..3 {
        store.insert_proposal(new_proposal("a", "")).await.unwrap();
    }
    let before = store.events_after(0, None, 100).await.unwrap();
    let cutoff = before[2].created_at + 1;
    assert_eq!(store.prune_events(cutoff).await.unwrap(), 3);
    assert_eq!(store.prune_events(cutoff).await.unwrap(), 0, "idempotent");
    let horizon = store.event_horizon(None).await.unwrap();
    assert_eq!(horizon.pruned_through, before[2].position);
    assert_eq!(
        horizon.latest, before[2].position,
        "the newest position is kept"
    );
    assert!(horizon.is_pruned(before[0].position));
    store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let kept = store.events_after(0, None, 100).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert!(
        kept[0].position > before[2].position,
        "positions never go back"
    );
}

/// (cursor, kind) of each of `tenant`'s events, oldest first.
async fn tenant_log(store: &DynStore, tenant: &str) -> Vec<(u64, EventKind)> {
    store
        .events_after(0, Some(tenant), 1_000)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.cursor, e.kind))
        .collect()
}

/// Tenant `b` writes between each of `a`'s writes: every kind of write (a
/// submission, a batch of review starts, a batch of decisions, counted
/// retries, a cancel), some of them one batch over both tenants.
async fn interleave(store: &DynStore) -> Vec<countersign_domain::Proposal> {
    let mut of_a = Vec::new();
    for round in 0..3 {
        let a = store
            .insert_proposal(new_proposal("a", ""))
            .await
            .unwrap()
            .proposal()
            .clone();
        let mut b_ids = Vec::new();
        for _ in 0..round + 2 {
            let b = store.insert_proposal(new_proposal("b", "")).await.unwrap();
            b_ids.push(b.proposal().id.clone());
        }
        let keys: Vec<countersign_store::ReviewKey> = [("a", &a.id), ("b", &b_ids[0])]
            .into_iter()
            .map(|(tenant, id)| countersign_store::ReviewKey {
                tenant: tenant.into(),
                id: id.clone(),
            })
            .collect();
        store.begin_reviews(&keys).await.unwrap();
        let decisions = keys
            .iter()
            .map(|k| (k.clone(), rejection(&a.spec)))
            .collect();
        store.record_decisions(decisions).await.unwrap();
        store
            .record_suppressed(keys.iter().map(|k| (k.clone(), 2)).collect())
            .await
            .unwrap();
        store
            .cancel_proposal("b", b_ids.last().unwrap(), "no", None)
            .await
            .unwrap();
        of_a.push(a);
    }
    of_a
}

pub async fn each_tenant_numbers_its_own_events_one_by_one_whatever_another_writes(
    store: DynStore,
) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let of_a = interleave(&store).await;

    // a: SUBMITTED, REVIEW_STARTED, REJECTED, SUPPRESSED per round, and the
    // breaker's trip on the third rejection.
    let a = tenant_log(&store, "a").await;
    let kinds: Vec<EventKind> = a.iter().map(|e| e.1).collect();
    assert_eq!(
        kinds[8..],
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Rejected,
            EventKind::BreakerTripped,
            EventKind::Suppressed
        ]
    );
    let cursors: Vec<u64> = a.iter().map(|e| e.0).collect();
    assert_eq!(
        cursors,
        (1..=13).collect::<Vec<_>>(),
        "no gap for b's events"
    );
    let b = tenant_log(&store, "b").await;
    let b_cursors: Vec<u64> = b.iter().map(|e| e.0).collect();
    assert_eq!(b_cursors, (1..=b.len() as u64).collect::<Vec<_>>());
    for (tenant, n) in [("a", 13), ("b", b.len() as u64)] {
        let horizon = store.event_horizon(Some(tenant)).await.unwrap();
        assert_eq!((horizon.pruned_through, horizon.latest), (0, n), "{tenant}");
    }
    assert_eq!(
        store.event_horizon(Some("nobody")).await.unwrap(),
        Default::default()
    );

    // The whole log, by position: both tenants, in the same order.
    let all = store.events_after(0, None, 1_000).await.unwrap();
    assert_eq!(all.len(), a.len() + b.len());
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    let a_by_position: Vec<(u64, EventKind)> = all
        .iter()
        .filter(|e| e.tenant() == "a")
        .map(|e| (e.cursor, e.kind))
        .collect();
    assert_eq!(
        a_by_position, a,
        "a tenant's cursors follow the log's order"
    );

    // Resuming after a tenant cursor gives the rest of that tenant's events.
    let rest = store.events_after(5, Some("a"), 1_000).await.unwrap();
    let rest: Vec<(u64, EventKind)> = rest.iter().map(|e| (e.cursor, e.kind)).collect();
    assert_eq!(rest, a[5..]);
    let paged = store.events_after(5, Some("a"), 2).await.unwrap();
    assert_eq!(paged.iter().map(|e| e.cursor).collect::<Vec<_>>(), [6, 7]);
    let events = proposal_events(&store, "a", &of_a[1].id).await.unwrap();
    let cursors: Vec<u64> = events.iter().map(|e| e.cursor).collect();
    assert_eq!(cursors, [5, 6, 7, 8]);
}

pub async fn pruning_keeps_each_tenants_numbering_and_moves_its_own_horizon(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    for tenant in ["a", "b", "a"] {
        store
            .insert_proposal(new_proposal(tenant, ""))
            .await
            .unwrap();
    }
    let before = store.events_after(0, None, 100).await.unwrap();
    let cutoff = before.iter().map(|e| e.created_at).max().unwrap() + 1;
    assert_eq!(store.prune_events(cutoff).await.unwrap(), 3);
    for (tenant, n) in [("a", 2), ("b", 1)] {
        let horizon = store.event_horizon(Some(tenant)).await.unwrap();
        assert_eq!(
            (horizon.pruned_through, horizon.latest),
            (n, n),
            "{tenant}: its newest cursor is kept once all its events are pruned"
        );
    }
    for tenant in ["a", "b"] {
        store
            .insert_proposal(new_proposal(tenant, ""))
            .await
            .unwrap();
    }
    assert_eq!(
        tenant_log(&store, "a").await,
        [(3, EventKind::Submitted)],
        "a tenant's cursors never go back"
    );
    assert_eq!(tenant_log(&store, "b").await, [(2, EventKind::Submitted)]);
    let a = store.event_horizon(Some("a")).await.unwrap();
    assert_eq!((a.pruned_through, a.latest), (2, 3));
    assert!(a.is_pruned(1), "a's first event is gone");
    assert!(!a.is_pruned(2) && !a.is_pruned(0));
    assert_eq!(store.events_after(2, Some("a"), 10).await.unwrap().len(), 1);
    let b = store.event_horizon(Some("b")).await.unwrap();
    assert_eq!((b.pruned_through, b.latest), (1, 2));
    assert!(!b.is_pruned(1), "b's retention is its own");
}

async fn put_online(store: &DynStore, tenant: &str, id: &str, cluster: &str) {
    store
        .put_target(
            tenant,
            id,
            countersign_domain::TargetStatus::Online,
            [("cluster".to_owned(), cluster.to_owned())].into(),
        )
        .await
        .unwrap();
}

async fn propose(
    store: &DynStore,
    tenant: &str,
    target: &str,
    radius: BlastRadius,
) -> countersign_domain::Proposal {
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    let mut new = new_proposal(tenant, "");
    new.spec.target = target.into();
    new.spec.blast_radius = radius;
    store.insert_proposal(new).await.unwrap().proposal().clone()
}

fn ids(facts: &countersign_domain::gates::ReviewFacts) -> std::collections::BTreeSet<String> {
    facts.others.iter().map(|o| o.id.clone()).collect()
}

pub async fn review_facts_find_exactly_the_overlapping_earlier_operations(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    put_online(&store, "a", "n1", "c1").await;
    put_online(&store, "a", "n2", "c1").await;
    put_online(&store, "a", "n3", "c2").await;
    let single_n1 = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    let cluster_n2 = propose(&store, "a", "n2", BlastRadius::Cluster).await;
    let single_n3 = propose(&store, "a", "n3", BlastRadius::SingleDevice).await;
    let tenant_n3 = propose(&store, "a", "n3", BlastRadius::TenantWide).await;
    // Another tenant's operations never count.
    put_online(&store, "b", "n2", "c1").await;
    propose(&store, "b", "n2", BlastRadius::TenantWide).await;

    let set = |ps: &[&countersign_domain::Proposal]| ps.iter().map(|p| p.id.clone()).collect();
    let single_n2 = propose(&store, "a", "n2", BlastRadius::SingleDevice).await;
    let facts = review_facts(&store, &single_n2).await.unwrap();
    assert_eq!(ids(&facts), set(&[&cluster_n2, &tenant_n3]));

    // A cluster operation overlaps every device of its cluster, not another cluster's.
    let subject = propose(&store, "a", "n1", BlastRadius::Cluster).await;
    let facts = review_facts(&store, &subject).await.unwrap();
    assert_eq!(
        ids(&facts),
        set(&[&single_n1, &cluster_n2, &tenant_n3, &single_n2])
    );

    let subject = propose(&store, "a", "n3", BlastRadius::TenantWide).await;
    let facts = review_facts(&store, &subject).await.unwrap();
    assert_eq!(ids(&facts).len(), 7.min(facts.others.len()));
    assert!(ids(&facts).is_superset(&set(&[&single_n1, &cluster_n2, &single_n3, &tenant_n3])));
    assert!(
        facts
            .others
            .iter()
            .all(|o| countersign_domain::gates::blocks(&facts, o))
    );

    // Gathered as one batch (several radii, two tenants), each proposal's
    // facts are what it gets alone.
    let other_tenant = propose(&store, "b", "n2", BlastRadius::SingleDevice).await;
    let batch = [single_n2.clone(), subject.clone(), other_tenant, single_n1];
    let together = store.review_facts_many(&batch).await.unwrap();
    assert_eq!(together.len(), batch.len());
    for (proposal, facts) in batch.iter().zip(together) {
        let alone = review_facts(&store, proposal).await.unwrap();
        assert_eq!(
            ids(&facts.unwrap()),
            ids(&alone),
            "{}",
            proposal.spec.target
        );
    }
}

pub async fn an_operation_whose_cluster_is_unknown_overlaps_every_later_one(store: DynStore) {
    use countersign_domain::gates::{self, NO_PARALLEL_OPERATION};
    store.create_tenant("a").await.unwrap();
    put_online(&store, "a", "n1", "c1").await;
    store
        .put_target(
            "a",
            "n9",
            countersign_domain::TargetStatus::Online,
            [("env".to_owned(), "production".to_owned())].into(),
        )
        .await
        .unwrap();
    put_online(&store, "a", "n8", " ").await;
    let unknown = propose(&store, "a", "n9", BlastRadius::Cluster).await;
    let blank = propose(&store, "a", "n8", BlastRadius::Cluster).await;
    let gate = |facts: &gates::ReviewFacts| {
        gates::evaluate(facts)
            .gates
            .into_iter()
            .find(|g| g.gate == NO_PARALLEL_OPERATION)
            .unwrap()
    };

    // Its own scope is unknown: its gate fails, whatever else is open.
    for p in [&unknown, &blank] {
        let own = gate(&review_facts(&store, p).await.unwrap());
        assert!(!own.passed);
        assert_eq!(
            own.detail,
            "target has no cluster label: the operation's scope is unknown"
        );
    }

    // Open and earlier, it may reach any target: a later operation elsewhere
    // finds it among its facts and waits for it.
    let later = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    let facts = review_facts(&store, &later).await.unwrap();
    assert_eq!(ids(&facts), [unknown.id.clone(), blank.id.clone()].into());
    let blocked = gate(&facts);
    assert!(!blocked.passed);
    assert!(
        blocked.detail.contains(&format!("wait for {}", unknown.id)),
        "{}",
        blocked.detail
    );
}

pub async fn an_approval_blocks_overlapping_operations_for_the_window(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    put_online(&store, "a", "n1", "c1").await;
    let first = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    begin_review(&store, "a", &first.id).await.unwrap();
    let verdict = countersign_domain::gates::Verdict {
        gates: countersign_domain::gates::GATES
            .iter()
            .map(|g| countersign_domain::GateResult {
                gate: (*g).into(),
                passed: true,
                detail: String::new(),
            })
            .collect(),
        sop: None,
        rollback_path: Some("undo".into()),
    };
    let stamp = countersign_domain::review::ReviewStamp {
        reviewer: "w".into(),
        decided_at: 0,
        latency_ms: 0,
    };
    let mut decision = countersign_domain::review::decide(&verdict, &(&first.spec).into(), stamp);
    decision.decided_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(matches!(
        store
            .record_decision("a", &first.id, decision)
            .await
            .unwrap(),
        countersign_store::RecordOutcome::Recorded
    ));
    let later = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    let facts = review_facts(&store, &later).await.unwrap();
    assert_eq!(facts.others.len(), 1);
    assert_eq!(facts.others[0].state, ProposalState::Approved);
    assert!(countersign_domain::gates::blocks(&facts, &facts.others[0]));
    // With no window, the approval no longer blocks.
    store
        .set_tenant_policy(
            "a",
            TenantPolicy {
                parallel_window_ms: 0,
                ..TenantPolicy::default()
            },
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(
        review_facts(&store, &later)
            .await
            .unwrap()
            .others
            .is_empty()
    );
}

pub async fn an_approval_whose_sop_was_retired_before_commit_is_stale(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    put_online(&store, "a", "n1", "c1").await;
    let sop = store
        .put_sop(
            "a",
            countersign_store::SopInput {
                id: "SOP-1".into(),
                action: "host_restart_service".into(),
                title: "t".into(),
                covers: String::new(),
                rollback_path: "undo".into(),
                max_blast_radius: BlastRadius::Cluster,
                selector: Default::default(),
            },
        )
        .await
        .unwrap();
    let p = propose(&store, "a", "n1", BlastRadius::SingleDevice).await;
    let countersign_store::BeginReview::Reviewing { proposal, .. } =
        begin_review(&store, "a", &p.id).await.unwrap()
    else {
        panic!("reviewable")
    };
    let facts = review_facts(&store, &proposal).await.unwrap();
    let verdict = countersign_domain::gates::evaluate(&facts);
    assert!(verdict.approves(), "{verdict:?}");
    assert_eq!(verdict.sop.as_ref().unwrap().version, sop.version);
    store.retire_sop("a", "SOP-1").await.unwrap();
    let stamp = countersign_domain::review::ReviewStamp {
        reviewer: "w".into(),
        decided_at: 1,
        latency_ms: 0,
    };
    let decision = countersign_domain::review::decide(&verdict, &(&proposal.spec).into(), stamp);
    let outcome = store.record_decision("a", &p.id, decision).await.unwrap();
    assert!(
        matches!(outcome, countersign_store::RecordOutcome::Stale(ref why) if why.contains("retired")),
        "{outcome:?}"
    );
    assert_eq!(
        store.get_proposal("a", &p.id).await.unwrap().unwrap().state,
        ProposalState::Reviewing
    );
}

pub async fn a_time_window_finds_decisions_committed_out_of_time_order(store: DynStore) {
    use countersign_domain::audit::AuditFilter;

    store.create_tenant("a").await.unwrap();
    // Commit order vs decision time: some reviews commit after later ones.
    let stamped = [
        1_000, 1_050, 1_010, 1_060, 1_020, 1_100, 1_100, 1_030, 1_200, 1_150,
    ];
    for (i, at) in stamped.into_iter().enumerate() {
        let p = propose(&store, "a", &format!("n{i}"), BlastRadius::SingleDevice).await;
        reject(&store, &p, at).await;
        store.append_audit(1).await.unwrap();
    }
    let windows = [
        (None, None),
        (Some(1_000), Some(1_001)),
        (Some(1_010), Some(1_031)),
        (Some(1_021), Some(1_050)),
        (Some(1_100), Some(1_101)),
        (Some(1_150), None),
        (None, Some(1_025)),
        (Some(1_201), None),
        (None, Some(1_000)),
    ];
    for (from, until) in windows {
        let filter = AuditFilter {
            decided_from: from,
            decided_until: until,
            ..AuditFilter::default()
        };
        let want: Vec<u64> = (1..=stamped.len() as u64)
            .rev()
            .filter(|&seq| {
                let at = stamped[seq as usize - 1];
                from.is_none_or(|f| at >= f) && until.is_none_or(|u| at < u)
            })
            .collect();
        let got: Vec<u64> = store
            .list_audit("a", &filter, None, 100)
            .await
            .unwrap()
            .iter()
            .map(|e| e.sequence)
            .collect();
        assert_eq!(got, want, "window {from:?}..{until:?}");
        // Page by two: the same entries, none twice.
        let mut paged = Vec::new();
        let mut before = None;
        loop {
            let page = store.list_audit("a", &filter, before, 2).await.unwrap();
            paged.extend(page.iter().map(|e| e.sequence));
            match page.last() {
                Some(last) if page.len() == 2 => before = Some(last.sequence),
                _ => break,
            }
        }
        assert_eq!(paged, want, "paged window {from:?}..{until:?}");
    }
    let with_target = AuditFilter {
        decided_from: Some(1_000),
        decided_until: Some(1_025),
        target: Some("n4".into()),
        ..AuditFilter::default()
    };
    let found = store.list_audit("a", &with_target, None, 10).await.unwrap();
    assert_eq!(found.iter().map(|e| e.sequence).collect::<Vec<_>>(), [5]);
}

/// Decides `p` as failed (a rejection) at `decided_at`.
async fn reject(store: &DynStore, p: &countersign_domain::Proposal, decided_at: i64) {
    begin_review(store, &p.tenant, &p.id).await.unwrap();
    let stamp = countersign_domain::review::ReviewStamp {
        reviewer: "w".into(),
        decided_at,
        latency_ms: 1,
    };
    let decision = countersign_domain::review::failed("worker lost", stamp);
    let outcome = store
        .record_decision(&p.tenant, &p.id, decision)
        .await
        .unwrap();
    assert!(
        matches!(outcome, countersign_store::RecordOutcome::Recorded),
        "{outcome:?}"
    );
}

pub async fn the_audit_log_chains_each_tenants_decisions_in_commit_order(store: DynStore) {
    use countersign_domain::audit::{AuditFilter, Verifier};

    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut order = Vec::new();
    for (i, tenant) in ["a", "b", "a", "a", "b"].into_iter().enumerate() {
        let p = propose(&store, tenant, &format!("n{i}"), BlastRadius::SingleDevice).await;
        reject(&store, &p, 1_000 + i as i64).await;
        order.push(p);
    }
    assert_eq!(store.append_audit(2).await.unwrap(), 2, "a batch at most");
    assert_eq!(store.append_audit(100).await.unwrap(), 3);
    assert_eq!(
        store.append_audit(100).await.unwrap(),
        0,
        "each decision once"
    );

    let a = store
        .list_audit("a", &AuditFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(a.iter().map(|e| e.sequence).collect::<Vec<_>>(), [3, 2, 1]);
    assert_eq!(
        a.iter()
            .map(|e| e.record.proposal_id.as_str())
            .collect::<Vec<_>>(),
        [&order[3].id, &order[2].id, &order[0].id]
    );
    assert_eq!(a[0].record.target, "n3");
    let b = store
        .list_audit("b", &AuditFilter::default(), Some(2), 10)
        .await
        .unwrap();
    assert_eq!(
        b.iter()
            .map(|e| e.record.proposal_id.as_str())
            .collect::<Vec<_>>(),
        [&order[1].id]
    );

    let filter = AuditFilter {
        target: Some("n2".into()),
        ..AuditFilter::default()
    };
    let only = store.list_audit("a", &filter, None, 10).await.unwrap();
    assert_eq!(only.iter().map(|e| e.sequence).collect::<Vec<_>>(), [2]);
    let window = AuditFilter {
        decided_from: Some(1_002),
        decided_until: Some(1_003),
        ..AuditFilter::default()
    };
    assert_eq!(
        store
            .list_audit("a", &window, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store
            .get_audit("a", &order[2].id)
            .await
            .unwrap()
            .unwrap()
            .sequence,
        2
    );
    assert!(
        store.get_audit("b", &order[2].id).await.unwrap().is_none(),
        "tenant-scoped"
    );

    // Each entry comes with the copies of its fields (filter columns, decision
    // row, proposal), and they say what the chained record says.
    let mut verifier = Verifier::new();
    for entry in store.audit_range("a", 0, 100).await.unwrap() {
        let copies = entry.copies.as_ref().expect("the store's copies");
        assert!(copies.decision.is_some() && copies.proposal.is_some());
        verifier.push_checked(
            entry.sequence,
            &entry.digest,
            Ok(entry.leaf()),
            entry.check_copies(),
        );
    }
    let verified = verifier.finish();
    assert!(verified.ok(), "{verified:?}");
    assert_eq!(verified.entries_checked, 3);
    let (size, head) = store.audit_head("a").await.unwrap();
    assert_eq!((size, head), (3, verified.head_digest));
    assert_eq!(
        store.audit_head("nobody").await.unwrap(),
        (0, "0".repeat(64))
    );

    let key = countersign_domain::audit::SigningKey::from_seed([1; 32]);
    let checkpoint = key.sign("a", 3, &a[0].digest, 5_000);
    assert_eq!(
        store.save_checkpoint(&checkpoint).await.unwrap(),
        checkpoint
    );
    assert_eq!(
        store.latest_checkpoint("a").await.unwrap(),
        Some(checkpoint.clone())
    );
    // The log has not grown: a later checkpoint of the same size is not
    // kept, and the one there is answers.
    for later in [6_000, 7_000] {
        let unchanged = key.sign("a", 3, &a[0].digest, later);
        assert_eq!(store.save_checkpoint(&unchanged).await.unwrap(), checkpoint);
    }
    assert_eq!(
        store.latest_checkpoint("a").await.unwrap(),
        Some(checkpoint.clone())
    );
    assert_eq!(store.latest_checkpoint("b").await.unwrap(), None);

    // Once the log grew, a checkpoint is kept; two at once keep one.
    let p = propose(&store, "a", "n9", BlastRadius::SingleDevice).await;
    reject(&store, &p, 2_000).await;
    assert_eq!(store.append_audit(100).await.unwrap(), 1);
    let (size, head) = store.audit_head("a").await.unwrap();
    assert_eq!(size, 4);
    let racing = [8_000, 8_001].map(|at| {
        let (store, grown) = (store.clone(), key.sign("a", size, &head, at));
        tokio::spawn(async move { store.save_checkpoint(&grown).await.unwrap() })
    });
    let kept: Vec<_> = futures::future::join_all(racing)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(kept[0], kept[1], "one kept, answered to both");
    assert_eq!(kept[0].size, 4);
    assert_eq!(
        store.latest_checkpoint("a").await.unwrap(),
        Some(kept[0].clone())
    );
}

/// The newest checkpoint of any tenant is the one signed last, whichever
/// tenant's it is; none before the first.
pub async fn the_newest_checkpoint_is_the_last_signed_of_any_tenant(store: DynStore) {
    assert_eq!(store.newest_checkpoint().await.unwrap(), None);
    for tenant in ["a", "b"] {
        store.create_tenant(tenant).await.unwrap();
    }
    let key = countersign_domain::audit::SigningKey::from_seed([2; 32]);
    let head = "0".repeat(64);
    let b = key.sign("b", 1, &head, 6_000);
    let a = key.sign("a", 1, &head, 5_000);
    for checkpoint in [&b, &a] {
        store.save_checkpoint(checkpoint).await.unwrap();
    }
    assert_eq!(store.newest_checkpoint().await.unwrap(), Some(b));
    let a_grown = key.sign("a", 2, &head, 7_000);
    store.save_checkpoint(&a_grown).await.unwrap();
    assert_eq!(store.newest_checkpoint().await.unwrap(), Some(a_grown));
}

/// The store names its backend, and refreshing the planner's statistics
/// answers how many tables it did (none on SQLite, which plans without
/// them).
pub async fn the_store_names_its_backend_and_refreshes_statistics(store: DynStore) {
    let backend = store.backend();
    assert!(["sqlite", "postgres"].contains(&backend), "{backend}");
    let refreshed = store.refresh_statistics().await.unwrap();
    if backend == "sqlite" {
        assert_eq!(refreshed, 0);
    }
}

/// Appends that overlap (the sequencer, a second process, a drain at stop)
/// put each decision in the log once, in one unbroken chain per tenant.
pub async fn overlapping_appends_put_each_decision_in_the_log_once(store: DynStore) {
    use countersign_domain::audit::Verifier;

    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    for i in 0..30 {
        let tenant = if i % 3 == 0 { "b" } else { "a" };
        let p = propose(&store, tenant, &format!("n{i}"), BlastRadius::SingleDevice).await;
        reject(&store, &p, 1_000 + i).await;
    }
    let appenders = (0..4).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut appended = 0;
            loop {
                match store.append_audit(3).await.unwrap() {
                    0 => return appended,
                    n => appended += n,
                }
            }
        })
    });
    let appended: u64 = futures::future::join_all(appenders)
        .await
        .into_iter()
        .map(Result::unwrap)
        .sum();
    assert_eq!(appended, 30, "each decision appended once");
    assert_eq!(store.append_audit(100).await.unwrap(), 0);
    for (tenant, count) in [("a", 20), ("b", 10)] {
        let entries = store.audit_range(tenant, 0, 100).await.unwrap();
        assert_eq!(
            entries.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            (1..=count).collect::<Vec<u64>>()
        );
        let mut verifier = Verifier::new();
        for entry in &entries {
            verifier.push(entry.sequence, &entry.digest, Ok(entry.leaf()));
        }
        let verified = verifier.finish();
        assert!(verified.ok(), "{tenant}: {verified:?}");
    }
}

fn rejection(spec: &ProposalSpec) -> countersign_domain::Decision {
    fixtures::rejection(spec, "sop")
}

async fn reviewing(store: &DynStore, tenant: &str, operator: &str) -> countersign_domain::Proposal {
    let mut new = new_proposal(tenant, "");
    new.spec.operator = operator.into();
    let p = store.insert_proposal(new).await.unwrap().proposal().clone();
    begin_review(store, tenant, &p.id).await.unwrap();
    p
}

fn kinds(events: &[countersign_domain::Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind).collect()
}

pub async fn a_decision_is_recorded_once_and_a_late_result_is_discarded(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = reviewing(&store, "a", "user_42").await;
    let decision = rejection(&p.spec);
    let first = store
        .record_decision("a", &p.id, decision.clone())
        .await
        .unwrap();
    assert!(matches!(first, countersign_store::RecordOutcome::Recorded));
    let late = store.record_decision("a", &p.id, decision).await.unwrap();
    assert!(
        matches!(
            late,
            countersign_store::RecordOutcome::Discarded(ProposalState::Rejected)
        ),
        "{late:?}"
    );
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.state, ProposalState::Rejected);
    let recorded = stored
        .decision
        .expect("a terminal proposal carries its decision");
    assert_eq!(recorded.reviewer, "w");
    assert_eq!(recorded.review_latency_ms, 3);
    assert_eq!(recorded.missing_gates, ["sop"]);
    assert!(matches!(
        store.cancel_proposal("a", &p.id, "too late", None).await,
        Err(StoreError::FailedPrecondition(_))
    ));
    let events = proposal_events(&store, "a", &p.id).await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Rejected
        ]
    );
    assert!(
        proposal_events(&store, "b", &p.id)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_result_after_a_cancel_is_discarded_not_applied(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = reviewing(&store, "a", "user_42").await;
    store
        .cancel_proposal("a", &p.id, "stop", None)
        .await
        .unwrap();
    let late = store
        .record_decision("a", &p.id, rejection(&p.spec))
        .await
        .unwrap();
    assert!(matches!(
        late,
        countersign_store::RecordOutcome::Discarded(ProposalState::Cancelled)
    ));
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.state, ProposalState::Cancelled);
    assert!(stored.decision.is_none());
    assert!(matches!(
        store.record_decision("b", &p.id, rejection(&p.spec)).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn racing_results_and_a_cancel_leave_exactly_one_terminal_state(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = reviewing(&store, "a", "o").await;
    let mut racers = Vec::new();
    for _ in 0..6 {
        let (store, id, decision) = (store.clone(), p.id.clone(), rejection(&p.spec));
        racers.push(tokio::spawn(async move {
            match store.record_decision("a", &id, decision).await.unwrap() {
                countersign_store::RecordOutcome::Recorded => 1_usize,
                countersign_store::RecordOutcome::Discarded(_) => 0_usize,
                stale => panic!("{stale:?}"),
            }
        }));
    }
    let cancel = {
        let (store, id) = (store.clone(), p.id.clone());
        tokio::spawn(async move { store.cancel_proposal("a", &id, "race", None).await.is_ok() })
    };
    let mut recorded = 0;
    for racer in racers {
        recorded += racer.await.unwrap();
    }
    let cancelled = cancel.await.unwrap();
    assert_eq!(
        recorded + usize::from(cancelled),
        1,
        "one terminal state wins"
    );
    let terminal: Vec<_> = proposal_events(&store, "a", &p.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.is_terminal())
        .collect();
    assert_eq!(terminal.len(), 1);
}

pub async fn a_redelivered_review_keeps_its_first_start_time(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = store
        .insert_proposal(new_proposal("a", ""))
        .await
        .unwrap()
        .proposal()
        .clone();
    let countersign_store::BeginReview::Reviewing { started_at, .. } =
        begin_review(&store, "a", &p.id).await.unwrap()
    else {
        panic!("a pending proposal starts its review")
    };
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let countersign_store::BeginReview::Reviewing {
        started_at: again, ..
    } = begin_review(&store, "a", &p.id).await.unwrap()
    else {
        panic!("a reviewing proposal is resumed")
    };
    assert_eq!(again, started_at);
    store
        .record_decision("a", &p.id, rejection(&p.spec))
        .await
        .unwrap();
    assert!(matches!(
        begin_review(&store, "a", &p.id).await.unwrap(),
        countersign_store::BeginReview::Terminal(ProposalState::Rejected)
    ));
    assert!(matches!(
        begin_review(&store, "b", &p.id).await,
        Err(StoreError::NotFound(_))
    ));
    let events = proposal_events(&store, "a", &p.id).await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Rejected
        ],
        "a redelivery logs no second start"
    );
}

pub async fn batches_of_reviews_and_decisions_may_span_tenants(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut keys = Vec::new();
    let mut specs = Vec::new();
    for tenant in ["a", "b", "a"] {
        let p = store
            .insert_proposal(new_proposal(tenant, ""))
            .await
            .unwrap()
            .proposal()
            .clone();
        keys.push(countersign_store::ReviewKey {
            tenant: tenant.into(),
            id: p.id.clone(),
        });
        specs.push(p.spec);
    }
    let begun = store.begin_reviews(&keys).await.unwrap();
    assert_eq!(begun.len(), 3);
    for (key, begun) in keys.iter().zip(&begun) {
        let countersign_store::BeginReview::Reviewing { proposal, .. } = begun else {
            panic!("every proposal of the batch starts")
        };
        assert_eq!((&proposal.tenant, &proposal.id), (&key.tenant, &key.id));
    }
    let items = keys
        .iter()
        .zip(&specs)
        .map(|(k, s)| (k.clone(), rejection(s)))
        .collect();
    let recorded = store.record_decisions(items).await.unwrap();
    assert!(
        recorded
            .iter()
            .all(|r| matches!(r, countersign_store::RecordOutcome::Recorded))
    );
    for key in &keys {
        let p = store.get_proposal(&key.tenant, &key.id).await.unwrap();
        assert_eq!(p.unwrap().state, ProposalState::Rejected);
    }
    assert_eq!(
        store.events_after(0, Some("b"), 100).await.unwrap().len(),
        3
    );
}

pub async fn overdue_reviews_are_found_in_every_tenant(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let pa = reviewing(&store, "a", "o").await;
    let pb = reviewing(&store, "b", "o").await;
    store.insert_proposal(new_proposal("a", "")).await.unwrap();
    let now = countersign_domain::now_ms() + 1;
    let overdue = store.overdue_reviews(now, 10).await.unwrap();
    let found: std::collections::BTreeSet<_> = overdue
        .iter()
        .map(|o| (o.tenant.clone(), o.proposal_id.clone()))
        .collect();
    assert_eq!(
        found,
        [("a".to_owned(), pa.id), ("b".to_owned(), pb.id)].into()
    );
    assert_eq!(store.overdue_reviews(now, 1).await.unwrap().len(), 1);
    assert!(store.overdue_reviews(0, 10).await.unwrap().is_empty());
}

pub async fn suppressed_retries_are_counted_and_logged(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let p = reviewing(&store, "a", "o").await;
    store
        .record_decision("a", &p.id, rejection(&p.spec))
        .await
        .unwrap();
    let key = countersign_store::ReviewKey {
        tenant: "a".into(),
        id: p.id.clone(),
    };
    store
        .record_suppressed(vec![(key.clone(), 2)])
        .await
        .unwrap();
    store.record_suppressed(vec![(key, 3)]).await.unwrap();
    store.record_suppressed(Vec::new()).await.unwrap();
    let stored = store.get_proposal("a", &p.id).await.unwrap().unwrap();
    assert_eq!(stored.suppressed_retries, 5);
    let events = store.events_after(0, Some("a"), 100).await.unwrap();
    let suppressed: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Suppressed)
        .collect();
    assert_eq!(suppressed.len(), 2);
    assert!(
        suppressed
            .iter()
            .all(|e| e.proposal.state == ProposalState::Rejected && e.proposal.decision.is_some())
    );
}

pub async fn the_breaker_trips_on_the_threshold_rejection_and_can_be_reset(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store
        .set_tenant_policy(
            "a",
            TenantPolicy {
                breaker_threshold: 2,
                ..TenantPolicy::default()
            },
        )
        .await
        .unwrap();
    let since = countersign_domain::now_ms();
    let mut rejected = Vec::new();
    for _ in 0..3 {
        // Rejections a millisecond apart: the count orders them by time.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let p = reviewing(&store, "a", "loop").await;
        store
            .record_decision("a", &p.id, rejection(&p.spec))
            .await
            .unwrap();
        rejected.push(p.id);
    }
    let tripped: Vec<_> = store
        .events_after(0, Some("a"), 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::BreakerTripped)
        .map(|e| e.proposal.id)
        .collect();
    assert_eq!(
        tripped,
        [rejected[1].clone()],
        "exactly the second trips it"
    );
    // On the stream, the rejection comes first, then the trip it caused.
    let second: Vec<EventKind> = proposal_events(&store, "a", &rejected[1])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        second[second.len() - 2..],
        [EventKind::Rejected, EventKind::BreakerTripped]
    );
    let rejections = store.rejections_since(since).await.unwrap();
    assert_eq!(rejections.len(), 3);
    assert!(
        rejections
            .iter()
            .all(|r| r.tenant == "a" && r.operator == "loop")
    );
    store.reset_breaker("a", "loop").await.unwrap();
    let resets = store.breaker_resets(since).await.unwrap();
    assert_eq!(resets.len(), 1);
    assert_eq!(
        (resets[0].tenant.as_str(), resets[0].operator.as_str()),
        ("a", "loop")
    );
    assert!(matches!(
        store.reset_breaker("ghost", "loop").await,
        Err(StoreError::NotFound(_))
    ));
    // After the reset the count starts again: the next two rejections trip it once more.
    for _ in 0..2 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let p = reviewing(&store, "a", "loop").await;
        store
            .record_decision("a", &p.id, rejection(&p.spec))
            .await
            .unwrap();
    }
    let trips = store
        .events_after(0, Some("a"), 100)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventKind::BreakerTripped)
        .count();
    assert_eq!(trips, 2);
}

pub async fn sops_are_versioned_and_targets_replaced_per_tenant(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let input = countersign_store::SopInput {
        id: "SOP-1".into(),
        action: "host_restart_service".into(),
        title: "t".into(),
        covers: "c".into(),
        rollback_path: "undo".into(),
        max_blast_radius: BlastRadius::Cluster,
        selector: [("role".to_owned(), "web".to_owned())].into(),
    };
    assert_eq!(store.put_sop("a", input.clone()).await.unwrap().version, 1);
    let second = store.put_sop("a", input).await.unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(store.get_sop("a", "SOP-1").await.unwrap().unwrap(), second);
    assert!(store.get_sop("b", "SOP-1").await.unwrap().is_none());
    assert!(matches!(
        store.retire_sop("b", "SOP-1").await,
        Err(StoreError::NotFound(_))
    ));
    let retired = store.retire_sop("a", "SOP-1").await.unwrap();
    assert!(retired.retired && retired.version == 3);
    assert_eq!(store.retire_sop("a", "SOP-1").await.unwrap().version, 3);
    assert_eq!(
        store.list_sops("a", true, None, 10).await.unwrap(),
        [retired]
    );
    assert!(
        store
            .list_sops("a", false, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_sops("b", true, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    put_online(&store, "a", "n1", "c1").await;
    store
        .put_target(
            "a",
            "n1",
            countersign_domain::TargetStatus::Maintenance,
            Default::default(),
        )
        .await
        .unwrap();
    let target = store.get_target("a", "n1").await.unwrap().unwrap();
    assert_eq!(target.status, countersign_domain::TargetStatus::Maintenance);
    assert!(target.labels.is_empty());
    assert_eq!(store.list_targets("a", None, 10).await.unwrap(), [target]);
    assert!(store.get_target("b", "n1").await.unwrap().is_none());
    assert!(store.list_targets("b", None, 10).await.unwrap().is_empty());
}

pub async fn sops_and_targets_are_listed_in_pages_by_id(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    // Byte order on both backends: upper case before lower, `-` before digits.
    let ids = ["A-9", "a-1", "a-10", "a-2", "b", "Z", "n-1"];
    for id in ids {
        put_online(&store, "a", id, "c1").await;
        let input = countersign_store::SopInput {
            id: id.into(),
            action: "host_restart_service".into(),
            title: "t".into(),
            covers: String::new(),
            rollback_path: String::new(),
            max_blast_radius: BlastRadius::Cluster,
            selector: Default::default(),
        };
        store.put_sop("a", input).await.unwrap();
    }
    put_online(&store, "b", "a-5", "c1").await;
    store.retire_sop("a", "a-10").await.unwrap();
    let mut sorted: Vec<&str> = ids.to_vec();
    sorted.sort_unstable();

    let mut targets = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_targets("a", after.as_deref(), 3).await.unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        targets.extend(page.into_iter().map(|t| t.id));
    }
    assert_eq!(targets, sorted, "every target once, in byte order");

    let listed = |include_retired| {
        let store = store.clone();
        async move {
            let mut ids = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = store
                    .list_sops("a", include_retired, after.as_deref(), 2)
                    .await
                    .unwrap();
                assert!(page.len() <= 2);
                let Some(last) = page.last() else { break };
                after = Some(last.id.clone());
                ids.extend(page.into_iter().map(|s| s.id));
            }
            ids
        }
    };
    assert_eq!(listed(true).await, sorted);
    let active: Vec<&str> = sorted.iter().copied().filter(|id| *id != "a-10").collect();
    assert_eq!(
        listed(false).await,
        active,
        "a retired SOP only when asked for"
    );

    // A page after an id that no longer exists goes on from where it was.
    let page = store.list_targets("a", Some("a-15"), 10).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a-2", "b", "n-1"]);
    assert!(
        store
            .list_targets("a", Some("n-1"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Another tenant's rows are never on a page.
    let b = store.list_targets("b", None, 10).await.unwrap();
    assert_eq!(b.len(), 1);
}

/// Puts of one SOP at once each take a version of their own, consecutive,
/// and each is kept in the history; retires at once make one retired version.
pub async fn concurrent_puts_and_retires_of_one_sop_take_consecutive_versions(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let input = countersign_store::SopInput {
        id: "SOP-1".into(),
        action: "host_restart_service".into(),
        title: "t".into(),
        covers: String::new(),
        rollback_path: "undo".into(),
        max_blast_radius: BlastRadius::Cluster,
        selector: Default::default(),
    };
    let puts = (0..24).map(|i| {
        let (store, mut input) = (store.clone(), input.clone());
        input.title = format!("put {i}");
        tokio::spawn(async move { store.put_sop("a", input).await })
    });
    let mut versions: Vec<u32> = futures::future::join_all(puts)
        .await
        .into_iter()
        .map(|put| put.unwrap().expect("every put succeeds").version)
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=24).collect::<Vec<u32>>());
    let current = store.get_sop("a", "SOP-1").await.unwrap().unwrap();
    assert_eq!(current.version, 24);

    let retires = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.retire_sop("a", "SOP-1").await })
    });
    for retired in futures::future::join_all(retires).await {
        let retired = retired.unwrap().expect("every retire succeeds");
        assert!(retired.retired && retired.version == 25, "{retired:?}");
    }
    let again = store.put_sop("a", input).await.unwrap();
    assert!(!again.retired && again.version == 26, "{again:?}");
}

pub async fn tenants_and_keys_are_listed_across_tenants_for_administration(store: DynStore) {
    for tenant in ["b", "a"] {
        store.create_tenant(tenant).await.unwrap();
        store
            .create_api_key(NewApiKey {
                tenant: tenant.into(),
                name: String::new(),
                role: Role::Auditor,
                agent: false,
                person: None,
            })
            .await
            .unwrap();
    }
    let names: Vec<_> = store
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["a", "b"]);
    let keys = store.list_api_keys(None).await.unwrap();
    let tenants: Vec<_> = keys.iter().map(|k| k.tenant.as_str()).collect();
    assert_eq!(tenants, ["a", "b"]);
    assert!(keys[0].name.starts_with("auditor-"));
    assert!(store.get_tenant("c").await.unwrap().is_none());
}

pub async fn subscribers_hear_of_each_change_after_it_commits(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let mut changes = store.subscribe();
    let p = store
        .insert_proposal(new_proposal("a", ""))
        .await
        .unwrap()
        .proposal()
        .clone();
    store.cancel_proposal("a", &p.id, "no", None).await.unwrap();
    let first = changes.recv().await.unwrap();
    assert_eq!(
        (
            first.tenant.as_str(),
            first.proposal_id.as_str(),
            first.kind
        ),
        ("a", p.id.as_str(), EventKind::Submitted)
    );
    let second = changes.recv().await.unwrap();
    assert_eq!(
        (second.kind, second.state),
        (EventKind::Cancelled, ProposalState::Cancelled)
    );
    let deduplicated = store.insert_proposal(new_proposal("a", "k")).await.unwrap();
    store.insert_proposal(new_proposal("a", "k")).await.unwrap();
    let third = changes.recv().await.unwrap();
    assert_eq!(third.proposal_id, deduplicated.proposal().id);
    assert!(
        changes.try_recv().is_err(),
        "a deduplicated submission changes nothing"
    );
}

/// The submitting call's `traceparent` is kept with the proposal and handed to
/// the reviewer when the review begins, and again when it is redelivered.
pub async fn a_proposals_trace_parent_comes_back_when_its_review_begins(store: DynStore) {
    store.create_tenant("a").await.unwrap();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = new_proposal("a", "traced");
    traced.trace_parent = Some(traceparent.into());
    let traced = store.insert_proposal(traced).await.unwrap();
    let untraced = store
        .insert_proposal(new_proposal("a", "untraced"))
        .await
        .unwrap();
    for _ in 0..2 {
        let countersign_store::BeginReview::Reviewing { trace_parent, .. } =
            begin_review(&store, "a", &traced.proposal().id)
                .await
                .unwrap()
        else {
            panic!("reviewable")
        };
        assert_eq!(trace_parent.as_deref(), Some(traceparent));
    }
    let countersign_store::BeginReview::Reviewing { trace_parent, .. } =
        begin_review(&store, "a", &untraced.proposal().id)
            .await
            .unwrap()
    else {
        panic!("reviewable")
    };
    assert_eq!(trace_parent, None);
}

pub async fn console_sessions_are_found_by_hash_revoked_per_tenant_and_pruned_when_expired(
    store: DynStore,
) {
    use countersign_store::ConsoleSession;
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut keys = Vec::new();
    for tenant in ["a", "b"] {
        let (record, _) = store
            .create_api_key(NewApiKey {
                tenant: tenant.into(),
                name: "oncall".into(),
                role: Role::Oncall,
                agent: false,
                person: Some("ann@example.com".into()),
            })
            .await
            .unwrap();
        keys.push(record.id);
    }
    let session = |tenant: &str, key_id: &str, byte: u8, created_at: i64| ConsoleSession {
        token_hash: vec![byte; 32],
        tenant: tenant.into(),
        key_id: key_id.into(),
        created_at,
        expires_at: created_at + 1_000,
        revoked_at: None,
    };
    let old = session("a", &keys[0], 1, 1_000);
    store.open_console_session(old.clone()).await.unwrap();
    assert_eq!(
        store.find_console_session(&[1; 32]).await.unwrap(),
        Some(old)
    );
    assert_eq!(store.find_console_session(&[9; 32]).await.unwrap(), None);

    // Another tenant cannot revoke it; its own tenant can, once.
    let theirs = session("b", &keys[1], 2, 1_500);
    store.open_console_session(theirs.clone()).await.unwrap();
    assert!(
        !store
            .revoke_console_session("b", &[1; 32], 1_600)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .find_console_session(&[1; 32])
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    assert!(
        store
            .revoke_console_session("a", &[1; 32], 1_700)
            .await
            .unwrap()
    );
    assert!(
        store
            .revoke_console_session("a", &[1; 32], 1_800)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .find_console_session(&[1; 32])
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(1_700),
        "revoked at its first revocation"
    );

    // A later sign-in to tenant a drops a's expired sessions, not b's.
    let later = session("a", &keys[0], 3, 5_000);
    store.open_console_session(later.clone()).await.unwrap();
    assert_eq!(store.find_console_session(&[1; 32]).await.unwrap(), None);
    assert_eq!(
        store.find_console_session(&[2; 32]).await.unwrap(),
        Some(theirs)
    );
    assert_eq!(
        store.find_console_session(&[3; 32]).await.unwrap(),
        Some(later)
    );
}

#[path = "suite/escalation.rs"]
mod escalation;
use escalation::*;

#[path = "suite/model.rs"]
mod model;
use model::*;

/// Decides every submission it sees as "review failed", or panics on
/// the ones whose target is `boom`.
struct PanicsOnBoom;

impl countersign_store::SubmitReview for PanicsOnBoom {
    fn review(
        &self,
        proposal: &countersign_domain::Proposal,
        _: &countersign_domain::gates::ReviewFacts,
    ) -> Option<countersign_domain::Decision> {
        assert_ne!(proposal.spec.target, "boom", "a review that panics");
        let stamp = countersign_domain::review::ReviewStamp {
            reviewer: "t/submit".into(),
            decided_at: countersign_domain::now_ms(),
            latency_ms: 0,
        };
        Some(countersign_domain::review::failed("no", stamp))
    }

    fn recorded(&self, _: &countersign_domain::Decision) {}
}

/// A review at submission that panics leaves its submission PENDING for the
/// reviewers, and the next submission of the tenant is reviewed as ever:
/// the committer that ran it serves on.
async fn a_review_at_submission_that_panics_leaves_it_queued_and_the_store_serving(
    store: DynStore,
) {
    store.create_tenant("t").await.unwrap();
    let review: std::sync::Arc<dyn countersign_store::SubmitReview> =
        std::sync::Arc::new(PanicsOnBoom);
    let mut boom = new_proposal("t", "");
    boom.spec.target = "boom".into();
    let queued = store.submit_reviewed(boom, review.clone()).await.unwrap();
    assert_eq!(queued.proposal().state, ProposalState::Pending);
    assert!(queued.proposal().decision.is_none());
    let decided = store
        .submit_reviewed(new_proposal("t", ""), review)
        .await
        .unwrap();
    assert_eq!(decided.proposal().state, ProposalState::Rejected);
    let stored = store
        .get_proposal("t", &decided.proposal().id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, ProposalState::Rejected);
}

/// A submission decided as it is stored is announced as answered: its
/// decision is the answer to the call that stored it, and no other call
/// awaits it. A queued submission, and a decision a worker records, are not.
async fn a_submission_decided_as_it_is_stored_is_announced_as_answered(store: DynStore) {
    store.create_tenant("t").await.unwrap();
    let review: std::sync::Arc<dyn countersign_store::SubmitReview> =
        std::sync::Arc::new(PanicsOnBoom);
    let mut changes = store.subscribe();
    let decided = store
        .submit_reviewed(new_proposal("t", ""), review.clone())
        .await
        .unwrap();
    let mut boom = new_proposal("t", "");
    boom.spec.target = "boom".into();
    let queued = store.submit_reviewed(boom, review).await.unwrap();
    let plain = store.insert_proposal(new_proposal("t", "")).await.unwrap();
    reject_on_target_state(&store, plain.proposal()).await;
    let mut heard = Vec::new();
    while heard.len() < 5 {
        let change = changes.recv().await.unwrap();
        heard.push((change.proposal_id, change.kind, change.answered));
    }
    let (decided, queued, plain) = (
        decided.proposal().id.clone(),
        queued.proposal().id.clone(),
        plain.proposal().id.clone(),
    );
    assert_eq!(
        heard,
        [
            (decided, EventKind::Rejected, true),
            (queued, EventKind::Submitted, false),
            (plain.clone(), EventKind::Submitted, false),
            (plain.clone(), EventKind::ReviewStarted, false),
            (plain, EventKind::Rejected, false),
        ]
    );
}

macro_rules! store_suite {
    ($backend:ident, $make:path; $($test:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $test() {
                    let (store, _guard) = $make().await;
                    super::$test(store).await;
                }
            )+
        }
    };
}

mod backends {
    use std::sync::Arc;

    use countersign_store::DynStore;
    pub use countersign_test_support::postgres::store as postgres;

    pub async fn sqlite() -> (DynStore, tempfile::TempDir) {
        let (store, dir) = countersign_test_support::sqlite::store().await;
        (Arc::new(store), dir)
    }
}

/// Every test of the suite, for one backend.
macro_rules! every_store_test {
    ($backend:ident, $make:path) => {
        store_suite!($backend, $make;
            first_bootstrap_creates_the_default_tenant_and_an_admin_key_once,
            tenants_are_unique_and_well_named,
            keys_are_stored_hashed_and_can_be_revoked,
            a_proposal_is_visible_only_to_its_own_tenant,
            a_name_outside_the_tenant_rules_names_no_tenant_and_no_rows,
            an_idempotency_key_returns_the_same_proposal_or_conflicts,
            concurrent_submissions_are_each_answered_as_if_alone,
            a_cancelled_proposal_stays_cancelled,
            an_operation_overlaps_while_open_and_not_after_its_cancel,
            a_key_cancels_only_what_it_submitted,
            an_idempotency_key_is_found_before_any_insert,
            review_facts_find_exactly_the_overlapping_earlier_operations,
            an_operation_whose_cluster_is_unknown_overlaps_every_later_one,
            an_approval_blocks_overlapping_operations_for_the_window,
            an_approval_whose_sop_was_retired_before_commit_is_stale,
            events_are_read_in_cursor_order_per_tenant_with_the_proposal_as_it_was,
            a_read_by_heads_gives_the_picked_events_whole_and_how_far_it_looked,
            pruning_moves_the_horizon_and_keeps_newer_events,
            each_tenant_numbers_its_own_events_one_by_one_whatever_another_writes,
            pruning_keeps_each_tenants_numbering_and_moves_its_own_horizon,
            a_decision_is_recorded_once_and_a_late_result_is_discarded,
            a_result_after_a_cancel_is_discarded_not_applied,
            racing_results_and_a_cancel_leave_exactly_one_terminal_state,
            a_redelivered_review_keeps_its_first_start_time,
            a_proposals_trace_parent_comes_back_when_its_review_begins,
            batches_of_reviews_and_decisions_may_span_tenants,
            overdue_reviews_are_found_in_every_tenant,
            suppressed_retries_are_counted_and_logged,
            the_breaker_trips_on_the_threshold_rejection_and_can_be_reset,
            sops_are_versioned_and_targets_replaced_per_tenant,
            concurrent_puts_and_retires_of_one_sop_take_consecutive_versions,
            sops_and_targets_are_listed_in_pages_by_id,
            tenants_and_keys_are_listed_across_tenants_for_administration,
            subscribers_hear_of_each_change_after_it_commits,
            the_audit_log_chains_each_tenants_decisions_in_commit_order,
            overlapping_appends_put_each_decision_in_the_log_once,
            a_time_window_finds_decisions_committed_out_of_time_order,
            the_newest_checkpoint_is_the_last_signed_of_any_tenant,
            the_store_names_its_backend_and_refreshes_statistics,
            routes_are_put_listed_replaced_and_deleted_per_tenant,
            keys_and_proposals_carry_their_persons,
            an_escalation_opens_once_and_only_from_review,
            open_escalations_are_listed_oldest_first_in_pages_and_counted,
            the_inbox_keeps_what_its_filters_match_and_pages_through_it,
            an_escalation_is_read_as_it_stood_at_each_of_its_events,
            every_refused_vote_writes_nothing,
            a_repeated_vote_answers_with_the_proposal_as_it_is,
            two_distinct_approvals_approve_under_a_quorum_of_two,
            one_rejection_among_approvals_rejects,
            two_concurrent_first_votes_decide_once,
            a_vote_after_expiry_applies_the_expiry,
            a_vote_after_a_cancel_is_refused_by_state,
            a_final_approval_is_rechecked_against_the_facts_at_commit,
            the_janitors_expiry_decides_what_ran_out_and_nothing_else,
            an_escalated_proposal_blocks_overlapping_operations,
            review_facts_carry_the_tenants_routes,
            a_decided_escalation_is_chained_with_its_votes,
            model_profiles_are_put_listed_replaced_and_deleted_per_tenant,
            review_facts_carry_the_tenants_model_profiles_beside_its_routes,
            a_decisions_model_review_is_kept_beside_it_and_in_its_record,
            an_escalations_model_review_reaches_the_decision_people_make,
            console_sessions_are_found_by_hash_revoked_per_tenant_and_pruned_when_expired,
            review_facts_carry_the_whole_sop_catalogue_where_a_model_reviews,
            a_tenants_model_calls_are_capped_per_minute_for_every_caller,
            a_review_at_submission_that_panics_leaves_it_queued_and_the_store_serving,
            a_submission_decided_as_it_is_stored_is_announced_as_answered,
        );
    };
}

every_store_test!(sqlite, crate::backends::sqlite);
every_store_test!(postgres, crate::backends::postgres);
