//! The reviewer's step after the gates and the janitor's expiry, on the
//! embedded store and queue: a matching route escalates instead of deciding
//! (`escalate_on` read literally), no route leaves today's decision, and an
//! escalation nobody completes is rejected at its `expires_at`, also when the
//! reviewers were restarted while it was open.

use std::{sync::Arc, time::Duration};

use countersign_domain::{
    DecisionOutcome, Millis, Proposal, ProposalState, TargetStatus,
    escalation::{InboxFilter, Route, RouteInput, RouteMatch, validate_route},
    gates::{BLAST_RADIUS, HUMAN, SOP, TARGET_STATE},
    now_ms,
};
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_store::{DynStore, EmbeddedQueue, EventKind, NewProposal};
use countersign_test_support::{fixtures, sqlite::SqliteDatabase};
use tokio_util::sync::CancellationToken;

/// The store on `db` and its embedded queue.
async fn open(db: &SqliteDatabase) -> (DynStore, Arc<EmbeddedQueue>) {
    let sqlite = db.store().await;
    let queue = Arc::new(EmbeddedQueue::new(sqlite.writer()));
    (Arc::new(sqlite), queue)
}

/// One worker, quick to notice work; sweeps every `janitor_every`.
fn config(janitor_every: Duration) -> ReviewerConfig {
    let mut config = ReviewerConfig::with_workers(1);
    config.express_workers = 0;
    config.idle_poll = Duration::from_millis(20);
    config.retry_delay = Duration::from_millis(10);
    config.janitor_every = janitor_every;
    config
}

fn start(store: &DynStore, queue: &Arc<EmbeddedQueue>, config: ReviewerConfig) -> Reviewers {
    Reviewers::start(
        store.clone(),
        queue.clone(),
        config,
        &CancellationToken::new(),
    )
}

fn route(id: &str, escalate_on: &[&str], expires_after_ms: Millis) -> Route {
    validate_route(RouteInput {
        id: id.into(),
        matcher: RouteMatch {
            actions: vec!["host_*".into()],
            ..Default::default()
        },
        approvals_required: 1,
        approver_roles: Vec::new(),
        expires_after_ms: Some(expires_after_ms),
        escalate_on: escalate_on.iter().map(|g| (*g).to_owned()).collect(),
    })
    .unwrap()
}

const HOUR: Millis = 60 * 60 * 1000;

/// `tenant` with node-01 in `status`, with or without SOP-007.
async fn tenant(store: &DynStore, tenant: &str, status: TargetStatus, with_sop: bool) {
    store.create_tenant(tenant).await.unwrap();
    if with_sop {
        store.put_sop(tenant, fixtures::sop()).await.unwrap();
    }
    let mut labels = fixtures::production();
    labels.insert("cluster".into(), "eu-1".into());
    store
        .put_target(tenant, "node-01", status, labels)
        .await
        .unwrap();
}

async fn submit(store: &DynStore, tenant: &str) -> String {
    store
        .insert_proposal(NewProposal {
            id: NewProposal::new_id(),
            tenant: tenant.into(),
            spec: fixtures::spec(),
            submitted_by: "tester".into(),
            submitted_by_person: Some("sam@example.com".into()),
            trace_parent: None,
            submitted_key: None,
        })
        .await
        .unwrap()
        .proposal()
        .id
        .clone()
}

async fn proposal(store: &DynStore, tenant: &str, id: &str) -> Proposal {
    store.get_proposal(tenant, id).await.unwrap().unwrap()
}

/// Polls until the proposal leaves PENDING and REVIEWING (at most 20 s).
async fn reviewed(store: &DynStore, tenant: &str, id: &str) -> Proposal {
    until(store, tenant, id, |p| {
        !matches!(p.state, ProposalState::Pending | ProposalState::Reviewing)
    })
    .await
}

/// Polls until `done` holds for the proposal (at most 20 s).
async fn until(
    store: &DynStore,
    tenant: &str,
    id: &str,
    done: impl Fn(&Proposal) -> bool,
) -> Proposal {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let p = proposal(store, tenant, id).await;
            if done(&p) {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{tenant}/{id} did not get there"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_route_escalates_and_without_one_the_gates_decide() {
    let db = SqliteDatabase::new();
    let (store, queue) = open(&db).await;
    tenant(&store, "routed", TargetStatus::Online, true).await;
    tenant(&store, "plain", TargetStatus::Online, true).await;
    tenant(&store, "elsewhere", TargetStatus::Online, true).await;
    store
        .put_route("routed", &route("hosts", &[], HOUR))
        .await
        .unwrap();
    let mut databases = route("databases", &[SOP], HOUR);
    databases.matcher.actions = vec!["db_*".into()];
    store.put_route("elsewhere", &databases).await.unwrap();
    let reviewers = start(&store, &queue, config(Duration::from_millis(50)));

    let routed = submit(&store, "routed").await;
    let escalated = reviewed(&store, "routed", &routed).await;
    assert_eq!(escalated.state, ProposalState::Escalated);
    assert_eq!(escalated.decision, None);
    let record = store
        .get_escalation("routed", &routed)
        .await
        .unwrap()
        .expect("its escalation");
    assert_eq!(record.escalation.route_id, "hosts");
    assert_eq!(record.escalation.gates.len(), 5);
    assert!(record.escalation.gates.iter().all(|g| g.passed));
    assert_eq!(record.escalation.sop_id.as_deref(), Some("SOP-007"));
    assert_eq!(
        record.escalation.expires_at - record.escalation.opened_at,
        HOUR
    );
    let kinds: Vec<EventKind> = store
        .events_after(0, Some("routed"), 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.proposal.id == routed)
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Escalated
        ]
    );

    for tenant in ["plain", "elsewhere"] {
        let id = submit(&store, tenant).await;
        let decided = reviewed(&store, tenant, &id).await;
        assert_eq!(decided.state, ProposalState::Approved, "{tenant}");
        assert_eq!(decided.decision.unwrap().route_id, None);
        assert!(store.get_escalation(tenant, &id).await.unwrap().is_none());
    }
    reviewers.shutdown().await;
    // Escalated, it is not reviewed again: its queue entry was acked.
    assert_eq!(
        proposal(&store, "routed", &routed).await.state,
        ProposalState::Escalated
    );
}

/// A route naming every gate an SOP's absence fails escalates a proposal
/// without one; a route naming `sop` alone does not (its other failed gates
/// are not named); neither escalates a proposal whose target is offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalate_on_is_read_literally() {
    let db = SqliteDatabase::new();
    let (store, queue) = open(&db).await;
    let all_three = route("no-sop", &[SOP, "rollback", BLAST_RADIUS], HOUR);
    let cases = [
        ("all-three", TargetStatus::Online, all_three.clone()),
        (
            "sop-alone",
            TargetStatus::Online,
            route("no-sop", &[SOP], HOUR),
        ),
        ("offline", TargetStatus::Offline, all_three),
    ];
    for (name, status, route) in &cases {
        tenant(&store, name, *status, false).await;
        store.put_route(name, route).await.unwrap();
    }
    let reviewers = start(&store, &queue, config(Duration::from_millis(50)));
    let mut ids = Vec::new();
    for (name, _, _) in &cases {
        ids.push(submit(&store, name).await);
    }

    let escalated = reviewed(&store, "all-three", &ids[0]).await;
    assert_eq!(escalated.state, ProposalState::Escalated);
    let record = store
        .get_escalation("all-three", &ids[0])
        .await
        .unwrap()
        .unwrap();
    let failed: Vec<&str> = record
        .escalation
        .gates
        .iter()
        .filter(|g| !g.passed)
        .map(|g| g.gate.as_str())
        .collect();
    assert!(
        failed.contains(&SOP) && failed.contains(&BLAST_RADIUS),
        "{failed:?}"
    );

    for (i, (tenant, failing)) in [
        (1, ("sop-alone", BLAST_RADIUS)),
        (2, ("offline", TARGET_STATE)),
    ] {
        let decided = reviewed(&store, tenant, &ids[i]).await;
        assert_eq!(decided.state, ProposalState::Rejected, "{tenant}");
        let decision = decided.decision.unwrap();
        assert!(
            decision.missing_gates.iter().any(|g| g == failing),
            "{tenant}: {decision:?}"
        );
        assert!(
            store
                .get_escalation(tenant, &ids[i])
                .await
                .unwrap()
                .is_none()
        );
    }
    reviewers.shutdown().await;
}

/// The expiry of `id`'s escalation, and the decision that ended it, once
/// the janitor rejected it.
async fn expired(
    store: &DynStore,
    tenant: &str,
    id: &str,
) -> (Millis, countersign_domain::Decision) {
    let expires_at = store
        .get_escalation(tenant, id)
        .await
        .unwrap()
        .unwrap()
        .escalation
        .expires_at;
    let rejected = until(store, tenant, id, |p| p.state == ProposalState::Rejected).await;
    let decision = rejected.decision.unwrap();
    assert_eq!(decision.outcome, DecisionOutcome::Reject);
    let human = decision.gates.last().unwrap();
    assert_eq!(
        (human.gate.as_str(), human.passed, human.detail.as_str()),
        (HUMAN, false, "expired: 0 of 1 approvals")
    );
    (expires_at, decision)
}

/// Expired at `expires_at` by the janitor's timer, not its sweep (which
/// comes once a minute here): never before, and within the 2 s the
/// contract allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_expires_an_escalation_at_its_expires_at() {
    let db = SqliteDatabase::new();
    let (store, queue) = open(&db).await;
    tenant(&store, "a", TargetStatus::Online, true).await;
    store
        .put_route("a", &route("quick", &[], 1_500))
        .await
        .unwrap();
    let reviewers = start(&store, &queue, config(Duration::from_secs(60)));
    let id = submit(&store, "a").await;
    assert_eq!(
        reviewed(&store, "a", &id).await.state,
        ProposalState::Escalated
    );
    let (expires_at, decision) = expired(&store, "a", &id).await;
    let late = decision.decided_at - expires_at;
    assert!(
        (0..2_000).contains(&late),
        "decided {late} ms after it expired"
    );
    assert_eq!(decision.route_id.as_deref(), Some("quick"));
    reviewers.shutdown().await;
}

/// Escalations open when the reviewers stop are rows like any other: after
/// a restart (the store reopened from its file, new reviewers), the one
/// that ran out while nothing ran is expired, and one still open stays so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalations_survive_a_restart_and_expire_on_time() {
    let db = SqliteDatabase::new();
    let (store, queue) = open(&db).await;
    for (name, expires_after) in [("soon", 1_500), ("later", HOUR)] {
        tenant(&store, name, TargetStatus::Online, true).await;
        store
            .put_route(name, &route(name, &[], expires_after))
            .await
            .unwrap();
    }
    let reviewers = start(&store, &queue, config(Duration::from_millis(50)));
    let soon = submit(&store, "soon").await;
    let later = submit(&store, "later").await;
    for (tenant, id) in [("soon", &soon), ("later", &later)] {
        assert_eq!(
            reviewed(&store, tenant, id).await.state,
            ProposalState::Escalated
        );
    }
    reviewers.shutdown().await;
    let expires_at = store
        .get_escalation("soon", &soon)
        .await
        .unwrap()
        .unwrap()
        .escalation
        .expires_at;
    drop((store, queue));

    // Nothing runs while it expires.
    let wait = (expires_at - now_ms()).max(0) as u64 + 200;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let (store, queue) = open(&db).await;
    assert_eq!(
        proposal(&store, "soon", &soon).await.state,
        ProposalState::Escalated,
        "no one expired it while stopped"
    );
    let reviewers = start(&store, &queue, config(Duration::from_millis(50)));
    let (expires_at, decision) = expired(&store, "soon", &soon).await;
    assert!(decision.decided_at >= expires_at);
    assert_eq!(
        proposal(&store, "later", &later).await.state,
        ProposalState::Escalated
    );
    let open: Vec<String> = store
        .list_escalations("later", &InboxFilter::default(), None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.proposal.id)
        .collect();
    assert_eq!(open, [later]);
    reviewers.shutdown().await;
}
