//! Several `serve` processes on one PostgreSQL and one Redis, as a deployment
//! runs them: api replicas and worker replicas. What one process does reaches
//! the others through Redis (wake-ups, the shared suppression tier) with the
//! event log in PostgreSQL as the record.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use countersign::client::BearerAuth;
use countersign_domain::Role;
use countersign_proto::v1::{
    EventKind, Notification, ProposalState, PutTargetRequest, SubmitRequest, SubmitResponse,
    Target, TargetStatus, WatchRequest, notification_service_client::NotificationServiceClient,
    target_service_client::TargetServiceClient,
};
use tonic::Streaming;

use crate::production_support::{
    Backend, Client, Database, await_decision, channel, client, env_url, key_for, random_name,
    redis_count, seed, seed_tenant, serve_as, spec, submit,
};

const WITHIN: Duration = Duration::from_secs(60);

async fn watch(server: &crate::production_support::Server, key: &str) -> Streaming<Notification> {
    let mut watcher = NotificationServiceClient::with_interceptor(
        channel(server).await,
        BearerAuth::new(key).unwrap(),
    );
    watcher
        .watch(WatchRequest::default())
        .await
        .expect("Watch")
        .into_inner()
}

/// Reads `stream` until every id in `ids` has ended (a terminal event);
/// returns each id's events in the order they came.
async fn follow_until_decided(
    stream: &mut Streaming<Notification>,
    ids: &HashSet<String>,
) -> HashMap<String, Vec<(u64, EventKind)>> {
    let mut seen: HashMap<String, Vec<(u64, EventKind)>> = HashMap::new();
    let mut ended = HashSet::new();
    let mut last_cursor = 0;
    let deadline = Instant::now() + WITHIN;
    while ended.len() < ids.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.message())
            .await
            .unwrap_or_else(|_| panic!("only {} of {} decided in time", ended.len(), ids.len()))
            .expect("the stream stays up")
            .expect("the stream does not end");
        if n.heartbeat {
            continue;
        }
        assert!(n.cursor > last_cursor, "cursors strictly increase: {n:?}");
        last_cursor = n.cursor;
        let id = n.proposal.as_ref().expect("a proposal").id.clone();
        if !ids.contains(&id) {
            continue;
        }
        let kind = n.event();
        if matches!(
            kind,
            EventKind::Approved | EventKind::Rejected | EventKind::Cancelled | EventKind::TimedOut
        ) {
            ended.insert(id.clone());
        }
        seen.entry(id).or_default().push((n.cursor, kind));
    }
    seen
}

/// Puts `id` as an ONLINE production target through `server`, as `admin`.
async fn put_online_target(server: &crate::production_support::Server, admin: &str, id: &str) {
    let mut targets = TargetServiceClient::with_interceptor(
        channel(server).await,
        BearerAuth::new(admin).unwrap(),
    );
    targets
        .put_target(PutTargetRequest {
            target: Some(Target {
                id: id.to_owned(),
                status: TargetStatus::Online as i32,
                labels: [("env".to_owned(), "production".to_owned())].into(),
                updated_at: None,
            }),
        })
        .await
        .expect("PutTarget");
}

fn backend<'a>(db: &'a Database, redis: &'a str, prefix: &'a str) -> Backend<'a> {
    Backend {
        database_url: &db.app_url,
        redis_url: Some(redis),
        redis_prefix: prefix,
    }
}

#[tokio::test]
async fn two_api_and_two_worker_processes_decide_every_proposal_once_and_both_apis_stream_every_event()
 {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let api_a = serve_as(dir.path(), "api-a", "api", &backend, &[]);
    let api_b = serve_as(dir.path(), "api-b", "api", &backend, &[]);
    let _worker_1 = serve_as(dir.path(), "worker-1", "worker", &backend, &[]);
    let _worker_2 = serve_as(dir.path(), "worker-2", "worker", &backend, &[]);
    let mut watch_a = watch(&api_a, &key).await;
    let mut watch_b = watch(&api_b, &key).await;
    let mut clients = [client(&api_a, &key).await, client(&api_b, &key).await];

    let mut ids = HashSet::new();
    for n in 0..40 {
        // Half approved (node-01), half rejected (unknown targets), through both apis.
        let target = if n % 2 == 0 {
            "node-01".to_owned()
        } else {
            format!("node-{n:02}")
        };
        let mut spec = spec(&target);
        spec.idempotency_key = format!("replicas-{n}");
        // An operator each: the rejections must not open a breaker.
        spec.operator = format!("op-{n}");
        ids.insert(submit(&mut clients[n % 2], spec).await);
    }

    for (name, stream) in [("api-a", &mut watch_a), ("api-b", &mut watch_b)] {
        let seen = follow_until_decided(stream, &ids).await;
        assert_eq!(seen.len(), ids.len(), "{name} saw every proposal");
        for (id, events) in &seen {
            let kinds: Vec<EventKind> = events.iter().map(|(_, kind)| *kind).collect();
            let terminal = kinds
                .iter()
                .filter(|k| matches!(k, EventKind::Approved | EventKind::Rejected))
                .count();
            assert_eq!(
                terminal, 1,
                "{name}: one decision event for {id}: {kinds:?}"
            );
            assert_eq!(
                kinds.first(),
                Some(&EventKind::Submitted),
                "{name}: {id}: {kinds:?}"
            );
        }
    }
    let decided = db.terminal_event_counts().await;
    let ours: Vec<_> = decided.iter().filter(|(id, _)| ids.contains(id)).collect();
    assert_eq!(ours.len(), ids.len(), "{decided:?}");
    assert!(ours.iter().all(|(_, n)| *n == 1), "decided once: {ours:?}");
}

/// Waiting submissions of one operation through two api replicas at once:
/// each replica reviews its submissions in the transaction that stores
/// them, and a tenant's submissions commit one transaction at a time across
/// replicas, so exactly one of each target's is approved and every other is
/// told to wait for an earlier one.
#[tokio::test]
async fn overlapping_waiting_submits_through_two_api_replicas_approve_exactly_one() {
    let db = Database::migrated().await;
    let store = db.store().await;
    let key = seed(&store).await;
    let admin = key_for(&store, "acme", Role::Admin).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let api_a = serve_as(dir.path(), "api-a", "api", &backend, &[]);
    let api_b = serve_as(dir.path(), "api-b", "api", &backend, &[]);
    let clients = [client(&api_a, &key).await, client(&api_b, &key).await];
    // Ten ONLINE production targets, one burst on each.
    let ids: Vec<String> = (10..20).map(|n| format!("node-{n}")).collect();
    for id in &ids {
        put_online_target(&api_a, &admin, id).await;
    }
    for target in &ids {
        let calls = (0..32).map(|n| {
            let mut client = clients[n % 2].clone();
            let mut spec = spec(target);
            // An operator each: the rejections must not open a breaker.
            spec.operator = format!("op-{target}-{n}");
            async move {
                client
                    .submit(SubmitRequest {
                        spec: Some(spec),
                        wait_for_decision: Some(WITHIN.try_into().unwrap()),
                    })
                    .await
                    .expect("Submit")
                    .into_inner()
                    .proposal
                    .expect("a proposal")
            }
        });
        let answers = futures::future::join_all(calls).await;
        let approved: Vec<_> = answers
            .iter()
            .filter(|p| p.state() == ProposalState::Approved)
            .collect();
        assert_eq!(approved.len(), 1, "{target}: {answers:#?}");
        for p in &answers {
            let decision = p.decision.as_ref().expect("decided");
            assert!(decision.reviewer.ends_with("/submit"), "{p:?}");
            if p.id != approved[0].id {
                assert_eq!(p.state(), ProposalState::Rejected, "{p:?}");
                assert_eq!(decision.missing_gates, ["no_parallel_operation"], "{p:?}");
            }
        }
    }
}

async fn submit_answer(client: &mut Client, target: &str) -> SubmitResponse {
    client
        .submit(SubmitRequest {
            spec: Some(spec(target)),
            ..Default::default()
        })
        .await
        .expect("Submit")
        .into_inner()
}

#[tokio::test]
async fn a_rejection_suppresses_its_retry_on_every_api_replica_even_one_started_later_until_a_change_on_any_replica()
 {
    let db = Database::migrated().await;
    let store = db.store().await;
    let key = seed(&store).await;
    let admin = key_for(&store, "acme", Role::Admin).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let api_a = serve_as(dir.path(), "api-a", "api", &backend, &[]);
    let api_b = serve_as(dir.path(), "api-b", "api", &backend, &[]);
    let _worker = serve_as(dir.path(), "worker", "worker", &backend, &[]);
    let mut a = client(&api_a, &key).await;
    let mut b = client(&api_b, &key).await;

    // node-77 is unknown: rejected. Replica B hears of it through its fan-out.
    let mut watch_b = watch(&api_b, &key).await;
    let first = submit_answer(&mut a, "node-77").await;
    let first = first.proposal.unwrap();
    let decided = await_decision(&mut a, &first.id, WITHIN).await;
    assert_eq!(decided.state(), ProposalState::Rejected, "{decided:?}");
    let seen = follow_until_decided(&mut watch_b, &HashSet::from([first.id.clone()])).await;
    assert!(seen.contains_key(&first.id));

    // The retry through the other replica is the same rejection, at once.
    let retry = submit_answer(&mut b, "node-77").await;
    assert!(
        retry.suppressed,
        "suppressed on the other replica: {retry:?}"
    );
    assert_eq!(retry.proposal.unwrap().id, first.id);

    // A replica started after the rejection never saw its event: the shared tier answers.
    let api_c = serve_as(dir.path(), "api-c", "api", &backend, &[]);
    let mut c = client(&api_c, &key).await;
    let late = submit_answer(&mut c, "node-77").await;
    assert!(
        late.suppressed,
        "suppressed on a replica started later: {late:?}"
    );
    assert_eq!(late.proposal.unwrap().id, first.id);

    // The target becomes known through replica B: the retry is reviewed on A and C.
    put_online_target(&api_b, &admin, "node-77").await;
    let reviewed_a = wait_for_suppression(&mut a, "node-77", false).await;
    assert_ne!(reviewed_a.proposal.unwrap().id, first.id);
    let reviewed_c = submit_answer(&mut c, "node-77").await;
    assert!(!reviewed_c.suppressed, "{reviewed_c:?}");
}

/// Submits `target`'s spec until the answer's `suppressed` is `wanted` (the
/// replicas hear of rejections and changes moments after they happen).
async fn wait_for_suppression(client: &mut Client, target: &str, wanted: bool) -> SubmitResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = submit_answer(client, target).await;
        if answer.suppressed == wanted {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "suppressed never became {wanted}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_worker_killed_while_holding_leases_leaves_them_to_another_that_decides_each_once_within_two_leases()
 {
    const LEASE: Duration = Duration::from_secs(5);
    const PROPOSALS: usize = 40;
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let lease = ["--review-lease", "5s"];
    let api = serve_as(dir.path(), "api", "api", &backend, &[]);
    let mut client = client(&api, &key).await;
    let mut ids = Vec::new();
    for n in 0..PROPOSALS {
        let mut spec = spec(&format!("node-{n:03}"));
        spec.idempotency_key = format!("kill-{n}");
        ids.push(submit(&mut client, spec).await);
    }

    let mut doomed = serve_as(dir.path(), "worker-1", "worker", &backend, &lease);
    let leased_key = format!("{prefix}:leased:acme");
    let deadline = Instant::now() + WITHIN;
    while redis_count(&redis, "ZCARD", &leased_key) == 0 {
        assert!(Instant::now() < deadline, "the worker never leased");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    doomed.kill();
    let killed_at = Instant::now();
    let held = redis_count(&redis, "ZCARD", &leased_key);
    assert!(held > 0, "the killed worker held leases");

    let _worker_2 = serve_as(dir.path(), "worker-2", "worker", &backend, &lease);
    for id in &ids {
        let decided = await_decision(&mut client, id, WITHIN).await;
        assert!(decided.decision.is_some(), "{decided:?}");
    }
    let took = killed_at.elapsed();
    eprintln!(
        "{held} leases held by the killed worker; all {PROPOSALS} decided {took:?} after the kill"
    );
    assert!(
        took <= 2 * LEASE,
        "decided within two leases of the kill: {took:?}"
    );
    let decided = db.terminal_event_counts().await;
    assert_eq!(decided.len(), ids.len(), "{decided:?}");
    assert!(decided.iter().all(|(_, n)| *n == 1), "{decided:?}");
}

#[tokio::test]
async fn a_tenant_flooding_the_queue_does_not_hold_back_another_tenants_proposals() {
    const FLOOD: usize = 10_000;
    let db = Database::migrated().await;
    let store = db.store().await;
    let flooder = seed(&store).await;
    let trickler = seed_tenant(&store, "quiet").await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let api = serve_as(dir.path(), "api", "api", &backend, &[]);

    // Tenant acme queues 10,000 while no worker runs.
    let mut tasks = Vec::new();
    for c in 0..32 {
        let mut client = client(&api, &flooder).await;
        tasks.push(tokio::spawn(async move {
            for n in (c..FLOOD).step_by(32) {
                let mut spec = spec(&format!("node-{:04}", n % 1000));
                spec.idempotency_key = format!("flood-{n}");
                submit(&mut client, spec).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let queued_key = format!("{prefix}:ids:acme");
    let deadline = Instant::now() + WITHIN;
    while redis_count(&redis, "HLEN", &queued_key) < FLOOD as u64 {
        assert!(Instant::now() < deadline, "the flood never reached Redis");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Then tenant quiet submits 10, and the workers start.
    let mut quiet = client(&api, &trickler).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(submit(&mut quiet, spec(&format!("node-{n:02}"))).await);
    }
    let _worker = serve_as(dir.path(), "worker", "worker", &backend, &[]);
    let started = Instant::now();
    for id in &ids {
        await_decision(&mut quiet, id, WITHIN).await;
    }
    let took = started.elapsed();
    let flood_left = redis_count(&redis, "HLEN", &queued_key);
    eprintln!(
        "tenant quiet's 10 decided {took:?} after the workers started; \
         tenant acme still had {flood_left} of {FLOOD} queued"
    );
    assert!(
        flood_left >= (FLOOD as u64) * 9 / 10,
        "the quiet tenant was served before 10% of the flood: {flood_left} left"
    );
}

/// Human countersignature across replicas: proposals escalated by a worker
/// process, and two people's first votes on each cast at once through
/// different api processes. Each proposal is decided exactly once (the other
/// vote is FAILED_PRECONDITION naming the outcome), and both apis stream its
/// ESCALATED, its one VOTE and its one decision.
#[tokio::test]
async fn concurrent_votes_through_two_api_replicas_decide_each_escalation_once() {
    use countersign_domain::escalation::{RouteInput, validate_route};
    use countersign_proto::v1::{
        ResolveRequest, Verdict, escalation_service_client::EscalationServiceClient,
    };
    use countersign_store::NewApiKey;

    let db = Database::migrated().await;
    let store = db.store().await;
    seed(&store).await;
    let route = validate_route(RouteInput {
        id: "r".into(),
        approvals_required: 1,
        ..Default::default()
    })
    .unwrap();
    store.put_route("acme", &route).await.unwrap();
    let mut keys = HashMap::new();
    for (person, role) in [
        ("sam@example.com", Role::Coordinator),
        ("ann@example.com", Role::Oncall),
        ("bob@example.com", Role::Oncall),
    ] {
        let (_, key) = store
            .create_api_key(NewApiKey {
                tenant: "acme".into(),
                name: random_name("key-"),
                role,
                agent: false,
                person: Some(person.into()),
            })
            .await
            .unwrap();
        keys.insert(person, key);
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = backend(&db, &redis, &prefix);
    let api_a = serve_as(dir.path(), "api-a", "api", &backend, &[]);
    let api_b = serve_as(dir.path(), "api-b", "api", &backend, &[]);
    let _worker = serve_as(dir.path(), "worker-1", "worker", &backend, &[]);
    let sam = &keys["sam@example.com"];
    let mut watch_a = watch(&api_a, sam).await;
    let mut watch_b = watch(&api_b, sam).await;
    let mut submitter = client(&api_a, sam).await;

    let mut ids = Vec::new();
    for n in 0..8 {
        // A target each: an escalated proposal holds its target as a
        // pending one does.
        let target = format!("r-{n}");
        let mut labels: std::collections::BTreeMap<String, String> =
            countersign_test_support::fixtures::production();
        labels.insert("cluster".into(), format!("c-{n}"));
        store
            .put_target(
                "acme",
                &target,
                countersign_domain::TargetStatus::Online,
                labels,
            )
            .await
            .unwrap();
        ids.push(submit(&mut submitter, spec(&target)).await);
    }
    let deadline = Instant::now() + WITHIN;
    for id in &ids {
        while store.get_proposal("acme", id).await.unwrap().unwrap().state
            != countersign_domain::ProposalState::Escalated
        {
            assert!(Instant::now() < deadline, "{id} never escalated");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let voter = |server, person: &'static str| {
        let key = keys[person].clone();
        async move {
            EscalationServiceClient::with_interceptor(
                channel(server).await,
                BearerAuth::new(&key).unwrap(),
            )
        }
    };
    let (mut ann, mut bob) = (
        voter(&api_a, "ann@example.com").await,
        voter(&api_b, "bob@example.com").await,
    );
    for id in &ids {
        let ask = |verdict: Verdict| ResolveRequest {
            proposal_id: id.clone(),
            verdict: verdict as i32,
            comment: String::new(),
        };
        let (a, b) = tokio::join!(
            ann.resolve(ask(Verdict::Approve)),
            bob.resolve(ask(Verdict::Reject))
        );
        let (won, lost) = match (a, b) {
            (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won.into_inner(), lost),
            other => panic!("{id}: exactly one vote decides: {other:?}"),
        };
        let outcome = ProposalState::try_from(won.state).unwrap();
        assert!(
            matches!(outcome, ProposalState::Approved | ProposalState::Rejected),
            "{won:?}"
        );
        assert_eq!(lost.code(), tonic::Code::FailedPrecondition, "{lost:?}");
        let word = if outcome == ProposalState::Approved {
            "approved"
        } else {
            "rejected"
        };
        assert!(lost.message().contains(word), "{id}: {lost:?}");
    }

    let ids: HashSet<String> = ids.into_iter().collect();
    for (name, stream) in [("api-a", &mut watch_a), ("api-b", &mut watch_b)] {
        let seen = follow_until_decided(stream, &ids).await;
        for (id, events) in &seen {
            let count = |kind| events.iter().filter(|(_, k)| *k == kind).count();
            assert_eq!(count(EventKind::Escalated), 1, "{name}: {id}: {events:?}");
            assert_eq!(count(EventKind::Vote), 1, "{name}: {id}: {events:?}");
            assert_eq!(
                count(EventKind::Approved) + count(EventKind::Rejected),
                1,
                "{name}: {id}: {events:?}"
            );
        }
        assert_eq!(seen.len(), ids.len(), "{name} saw every proposal");
    }
    let decided = db.terminal_event_counts().await;
    assert_eq!(decided.len(), ids.len(), "{decided:?}");
    assert!(
        decided.iter().all(|(_, n)| *n == 1),
        "decided once: {decided:?}"
    );
}
