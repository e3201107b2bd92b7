//! `Watch`: the review stream, resumable from a cursor with no gap and no
//! duplicate, cut off (never silently skipped) when it falls behind.

use std::time::Duration;

use countersign_domain::Role;
use countersign_proto::v1::{EventKind, Notification, ProposalState, WatchRequest};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tonic::{Code, Streaming};

use crate::helpers::{Options, TestApp, assert_code, test_reviewers, valid_spec};

const WAIT: Duration = Duration::from_secs(30);

fn from(after: u64) -> WatchRequest {
    WatchRequest {
        after_cursor: Some(after),
        ..Default::default()
    }
}

fn live() -> WatchRequest {
    WatchRequest::default()
}

/// The next notification that is not a heartbeat.
async fn next_event(stream: &mut Streaming<Notification>) -> Notification {
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("an event in time")
            .expect("the stream stays healthy")
            .expect("the stream stays open");
        if !n.heartbeat {
            return n;
        }
    }
}

/// Submits `n` proposals from `clients` concurrent callers; half fail a gate.
async fn submit_many(app: &TestApp, key: &str, n: usize, clients: usize) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let client = app.client(key).await;
        tasks.spawn(async move {
            let mut client = client;
            let mut ids = Vec::new();
            for i in (c..n).step_by(clients) {
                let mut spec = valid_spec();
                // Every rejection its own call and its own operator: neither
                // suppressed nor counted against one operator's breaker.
                spec.target = if i % 2 == 0 {
                    "node-01".to_owned()
                } else {
                    format!("ghost-{i}")
                };
                spec.operator = format!("op-{i}");
                spec.parameters = None;
                spec.reason = format!("change {i}");
                let response = client
                    .submit(countersign_proto::v1::SubmitRequest {
                        spec: Some(spec),
                        ..Default::default()
                    })
                    .await
                    .expect("accepted");
                ids.push(response.into_inner().proposal.unwrap().id);
            }
            ids
        });
    }
    let mut ids = Vec::new();
    while let Some(done) = tasks.join_next().await {
        ids.extend(done.unwrap());
    }
    ids
}

/// The events a watcher must have seen: (cursor, proposal id, kind name).
fn log_of(events: &[countersign_store::Event]) -> Vec<(u64, String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.cursor,
                e.proposal.id.clone(),
                format!("EVENT_KIND_{}", e.kind.as_str()),
            )
        })
        .collect()
}

fn seen(n: &Notification) -> (u64, String, String) {
    (
        n.cursor,
        n.proposal.as_ref().unwrap().id.clone(),
        EventKind::try_from(n.event)
            .unwrap()
            .as_str_name()
            .to_owned(),
    )
}

#[tokio::test]
async fn a_watcher_that_drops_its_stream_100_times_receives_exactly_the_event_log() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let proposals = 1_667; // three events each: 5,001
    let submitting = submit_many(&app, &key, proposals, 8);
    let watching = async {
        let mut rng = StdRng::seed_from_u64(7);
        let mut received = Vec::new();
        let mut cursor = 0;
        let mut reconnects = 0;
        while received.len() < proposals * 3 {
            let mut stream = app.watch(&key, from(cursor)).await.expect("watch");
            let take = if reconnects < 100 {
                rng.random_range(1..60)
            } else {
                usize::MAX
            };
            for _ in 0..take {
                if received.len() == proposals * 3 {
                    break;
                }
                let n = next_event(&mut stream).await;
                cursor = n.cursor;
                received.push(seen(&n));
            }
            reconnects += 1;
        }
        (received, reconnects)
    };
    let (ids, (received, reconnects)) = tokio::join!(submitting, watching);
    assert_eq!(ids.len(), proposals);
    assert!(reconnects > 100, "{reconnects}");
    let log = log_of(&app.event_log("acme").await);
    assert_eq!(log.len(), proposals * 3);
    assert_eq!(received, log, "exactly the stored log, in order");
}

#[tokio::test]
async fn events_committed_during_a_replay_are_not_lost_at_the_handover() {
    let app = TestApp::spawn().await; // SUBMITTED events only, many of them
    let key = app.key("acme", Role::Coordinator).await;
    submit_many(&app, &key, 1_500, 8).await;
    let mut stream = app.watch(&key, from(0)).await.unwrap();
    let (more, received) = tokio::join!(submit_many(&app, &key, 1_000, 4), async {
        let mut received = Vec::new();
        while received.len() < 2_500 {
            received.push(seen(&next_event(&mut stream).await));
        }
        received
    });
    assert_eq!(more.len(), 1_000);
    assert_eq!(received, log_of(&app.event_log("acme").await));
}

#[tokio::test]
async fn live_from_now_skips_history_and_delivers_what_follows() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    app.submit_id(&key, valid_spec()).await;
    let mut stream = app.watch(&key, live()).await.unwrap();
    let id = app.submit_id(&key, valid_spec()).await;
    let n = next_event(&mut stream).await;
    assert_eq!(n.proposal.unwrap().id, id);
    assert_eq!(n.event, EventKind::Submitted as i32);
    assert!(n.emitted_at.is_some());
}

#[tokio::test]
async fn a_cursor_older_than_retention_is_out_of_range_and_names_the_oldest() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    for _ in 0..3 {
        app.submit_id(&key, valid_spec()).await;
    }
    let pruned = app
        .store
        .prune_events(countersign_domain::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(pruned, 3);
    let kept = app.submit_id(&key, valid_spec()).await;
    let status = assert_code(app.watch(&key, from(1)).await, Code::OutOfRange);
    assert!(
        status.message().contains("oldest event available is 4"),
        "{status:?}"
    );
    for ok in [0, 3] {
        let mut stream = app.watch(&key, from(ok)).await.expect("in range");
        assert_eq!(next_event(&mut stream).await.proposal.unwrap().id, kept);
    }
}

#[tokio::test]
async fn an_idle_stream_gets_heartbeats_at_its_position() {
    let app = TestApp::spawn_with(|c| c.watch.heartbeat = Duration::from_millis(200)).await;
    let key = app.key("acme", Role::Oncall).await;
    let coordinator = app.key("acme", Role::Coordinator).await;
    app.submit_id(&coordinator, valid_spec()).await;
    let mut stream = app.watch(&key, from(0)).await.unwrap();
    let first = next_event(&mut stream).await;
    for _ in 0..2 {
        let beat = tokio::time::timeout(WAIT, stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(beat.heartbeat, "{beat:?}");
        assert!(beat.proposal.is_none());
        assert_eq!(beat.cursor, first.cursor);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_cut_off_while_another_watcher_and_the_reviewers_keep_pace() {
    let app = TestApp::start(
        Options {
            reviewers: Some(test_reviewers(2)),
            dir: None,
        },
        // Room for a burst of decided batches while the test itself is
        // descheduled; the stalled watcher still overruns it many times over.
        |c| c.watch.buffer = 512,
    )
    .await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    // A client that buffers little (64 KiB windows) and stops reading.
    let small_windows = tonic::transport::Endpoint::from_shared(app.endpoint())
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let mut stalled = app.watch_on(small_windows, &key, live()).await.unwrap();
    let mut keeping_up = app.watch(&key, live()).await.unwrap();
    let proposals = 600;
    let (ids, received) = tokio::join!(submit_many(&app, &key, proposals, 8), async {
        let mut received = Vec::new();
        while received.len() < proposals * 3 {
            received.push(seen(&next_event(&mut keeping_up).await));
        }
        received
    });

    for id in &ids {
        let p = app.await_decision(&key, id, WAIT).await.unwrap();
        assert!(
            p.state == ProposalState::Approved as i32 || p.state == ProposalState::Rejected as i32
        );
    }
    let log = log_of(&app.event_log("acme").await);
    assert_eq!(received, log, "the other watcher missed nothing");

    // The stalled one gets what was queued for it, in order, then the cut-off.
    let mut got = Vec::new();
    let status = loop {
        match tokio::time::timeout(WAIT, stalled.message()).await.unwrap() {
            Ok(Some(n)) if n.heartbeat => continue,
            Ok(Some(n)) => got.push(seen(&n)),
            Ok(None) => panic!("ended without saying why after {} events", got.len()),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(got.len() < log.len(), "it was cut off, not served");
    assert_eq!(
        got,
        log[..got.len()],
        "a prefix of the log: nothing skipped"
    );
    let last = got.last().map(|g| g.0).unwrap_or(0);
    assert!(
        status
            .message()
            .contains(&format!("resume from cursor {last}")),
        "{status:?}"
    );
    // Resuming from there delivers the rest.
    let mut resumed = app.watch(&key, from(last)).await.unwrap();
    let mut rest = Vec::new();
    while got.len() + rest.len() < log.len() {
        rest.push(seen(&next_event(&mut resumed).await));
    }
    assert_eq!(rest, log[got.len()..]);
}

#[tokio::test]
async fn a_tenant_never_sees_another_tenants_events() {
    let app = TestApp::spawn().await;
    let acme = app.key("acme", Role::Coordinator).await;
    let globex = app.key("globex", Role::Oncall).await;
    let globex_coordinator = app.key("globex", Role::Coordinator).await;
    let mut globex_stream = app.watch(&globex, from(0)).await.unwrap();
    for _ in 0..20 {
        app.submit_id(&acme, valid_spec()).await;
    }
    let theirs = app.submit_id(&globex_coordinator, valid_spec()).await;
    let n = next_event(&mut globex_stream).await;
    assert_eq!(n.proposal.as_ref().unwrap().id, theirs);
    assert_eq!(n.proposal.unwrap().tenant, "globex");
    assert!(app.event_log("globex").await.len() == 1);
}

#[tokio::test]
async fn filters_select_proposals_operators_and_endings() {
    let app = TestApp::spawn_reviewing(1).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut other_operator = valid_spec();
    other_operator.operator = "agent_9".into();
    let a = app.submit_id(&key, valid_spec()).await;
    let b = app.submit_id(&key, other_operator).await;
    for id in [&a, &b] {
        app.await_decision(&key, id, WAIT).await.unwrap();
    }
    let mut by_id = app
        .watch(
            &key,
            WatchRequest {
                after_cursor: Some(0),
                proposal_ids: vec![b.clone()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for kind in [
        EventKind::Submitted,
        EventKind::ReviewStarted,
        EventKind::Rejected, // same target, same scope: waits for `a`
    ] {
        let n = next_event(&mut by_id).await;
        assert_eq!((n.proposal.unwrap().id, n.event), (b.clone(), kind as i32));
    }
    let mut endings_of_agent_9 = app
        .watch(
            &key,
            WatchRequest {
                after_cursor: Some(0),
                operator: "agent_9".into(),
                terminal_only: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let n = next_event(&mut endings_of_agent_9).await;
    let p = n.proposal.unwrap();
    assert_eq!(
        (p.id.as_str(), p.state),
        (b.as_str(), ProposalState::Rejected as i32)
    );
    assert!(p.decision.is_some(), "the ending carries its decision");
}

#[tokio::test]
async fn each_event_shows_the_proposal_as_that_event_left_it() {
    let app = TestApp::spawn_reviewing(1).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    app.await_decision(&key, &id, WAIT).await.unwrap();
    let mut stream = app.watch(&key, from(0)).await.unwrap();
    let mut seen_states = Vec::new();
    for _ in 0..3 {
        let p = next_event(&mut stream).await.proposal.unwrap();
        seen_states.push((p.state, p.decision.is_some()));
    }
    assert_eq!(
        seen_states,
        [
            (ProposalState::Pending as i32, false),
            (ProposalState::Reviewing as i32, false),
            (ProposalState::Approved as i32, true),
        ]
    );
}

#[tokio::test]
async fn agent_credentials_see_the_terse_decision_on_the_stream() {
    let app = TestApp::spawn_reviewing(1).await;
    let agent = app.agent_key("acme", Role::Coordinator).await;
    let human = app.key("acme", Role::Oncall).await;
    let id = app.submit_id(&agent, valid_spec()).await; // no SOP: rejected
    app.await_decision(&agent, &id, WAIT).await.unwrap();
    let request = WatchRequest {
        after_cursor: Some(0),
        terminal_only: true,
        ..Default::default()
    };
    let mut agent_stream = app.watch(&agent, request.clone()).await.unwrap();
    let d = next_event(&mut agent_stream)
        .await
        .proposal
        .unwrap()
        .decision
        .unwrap();
    assert!(
        d.reason.is_empty() && d.gates.is_empty() && d.missing_gates.is_empty(),
        "{d:?}"
    );
    assert!(d.agent_message.contains("Do not retry"), "{d:?}");
    let mut human_stream = app.watch(&human, request).await.unwrap();
    let d = next_event(&mut human_stream)
        .await
        .proposal
        .unwrap()
        .decision
        .unwrap();
    assert!(d.reason.contains("no SOP") && d.gates.len() == 5, "{d:?}");
}

#[tokio::test]
async fn auditors_may_not_watch_and_bad_filters_name_their_field() {
    let app = TestApp::spawn().await;
    let auditor = app.key("acme", Role::Auditor).await;
    assert_code(app.watch(&auditor, live()).await, Code::PermissionDenied);
    let oncall = app.key("acme", Role::Oncall).await;
    let status = assert_code(
        app.watch(
            &oncall,
            WatchRequest {
                proposal_ids: vec!["ok".into(), " ".into()],
                ..Default::default()
            },
        )
        .await,
        Code::InvalidArgument,
    );
    assert!(
        status.message().starts_with("proposal_ids[1]"),
        "{status:?}"
    );
}

#[tokio::test]
async fn stopping_the_server_ends_streams_with_a_cursor_to_resume_from() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut stream = app.watch(&key, live()).await.unwrap();
    let id = app.submit_id(&key, valid_spec()).await;
    let n = next_event(&mut stream).await;
    assert_eq!(n.proposal.unwrap().id, id);
    let _dir = app.stop().await;
    let status = loop {
        match tokio::time::timeout(WAIT, stream.message()).await.unwrap() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("resume from cursor {}", n.cursor)),
        "{status:?}"
    );
}

/// The next heartbeat, skipping any event still queued before it.
async fn next_heartbeat(stream: &mut Streaming<Notification>) -> Notification {
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("a heartbeat in time")
            .expect("the stream stays healthy")
            .expect("the stream stays open");
        if n.heartbeat {
            return n;
        }
    }
}

#[tokio::test]
async fn a_tenants_cursors_and_heartbeats_count_its_own_events_only() {
    let app = TestApp::spawn_with(|c| c.watch.heartbeat = Duration::from_millis(200)).await;
    let acme = app.key("acme", Role::Coordinator).await;
    let acme_oncall = app.key("acme", Role::Oncall).await;
    let globex = app.key("globex", Role::Coordinator).await;
    let mut ours = Vec::new();
    for _ in 0..5 {
        ours.push(app.submit_id(&acme, valid_spec()).await);
        for _ in 0..3 {
            app.submit_id(&globex, valid_spec()).await;
        }
    }

    let mut stream = app.watch(&acme_oncall, from(0)).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let n = next_event(&mut stream).await;
        seen.push((n.cursor, n.proposal.unwrap().id));
    }
    let expected: Vec<(u64, String)> = (1..=5).zip(ours.iter().cloned()).collect();
    assert_eq!(seen, expected, "1 to 5, no gap for globex's 15 events");

    // globex keeps writing: acme's position does not move.
    for _ in 0..10 {
        app.submit_id(&globex, valid_spec()).await;
    }
    assert_eq!(next_heartbeat(&mut stream).await.cursor, 5);
    let mut live = app.watch(&acme_oncall, live()).await.unwrap();
    assert_eq!(
        next_heartbeat(&mut live).await.cursor,
        5,
        "live from now: acme's newest cursor, not the log's"
    );

    // Resuming from an acme cursor, and acme's next event, after globex's.
    let mut resumed = app.watch(&acme_oncall, from(3)).await.unwrap();
    for (cursor, id) in &expected[3..] {
        let n = next_event(&mut resumed).await;
        assert_eq!((n.cursor, n.proposal.unwrap().id), (*cursor, id.clone()));
    }
    let sixth = app.submit_id(&acme, valid_spec()).await;
    for stream in [&mut stream, &mut live, &mut resumed] {
        let n = next_event(stream).await;
        assert_eq!((n.cursor, n.proposal.unwrap().id), (6, sixth.clone()));
    }
    let globex_log = app.event_log("globex").await;
    let globex_cursors: Vec<u64> = globex_log.iter().map(|e| e.cursor).collect();
    assert_eq!(globex_cursors, (1..=25).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_tenants_retention_is_counted_in_its_own_cursors() {
    let app = TestApp::spawn().await;
    let acme = app.key("acme", Role::Coordinator).await;
    let globex = app.key("globex", Role::Coordinator).await;
    for key in [&acme, &globex, &acme, &globex, &acme] {
        app.submit_id(key, valid_spec()).await;
    }
    let pruned = app
        .store
        .prune_events(countersign_domain::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(pruned, 5);
    let acme_kept = app.submit_id(&acme, valid_spec()).await;
    let globex_kept = app.submit_id(&globex, valid_spec()).await;
    for (key, stale, oldest, resume, kept) in [
        (&acme, 2, 4, 3, &acme_kept),
        (&globex, 1, 3, 2, &globex_kept),
    ] {
        let status = assert_code(app.watch(key, from(stale)).await, Code::OutOfRange);
        assert!(
            status
                .message()
                .contains(&format!("oldest event available is {oldest}")),
            "{status:?}"
        );
        for ok in [0, resume] {
            let mut stream = app.watch(key, from(ok)).await.expect("in range");
            let n = next_event(&mut stream).await;
            assert_eq!((n.cursor, n.proposal.unwrap().id), (oldest, kept.clone()));
        }
    }
}

/// Opens a stream, or answers the refusal.
async fn try_watch(app: &TestApp, key: &str) -> Result<Streaming<Notification>, tonic::Status> {
    app.watch(key, live()).await
}

#[tokio::test]
async fn open_streams_are_capped_per_key_and_per_tenant_and_a_closed_one_frees_its_slot() {
    let app = TestApp::spawn_with(|c| {
        c.watch.max_streams_per_key = 2;
        c.watch.max_streams_per_tenant = 3;
    })
    .await;
    let first_key = app.key("acme", Role::Oncall).await;
    let second_key = app.key("acme", Role::Coordinator).await;
    let other_tenant = app.key("globex", Role::Oncall).await;

    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            try_watch(&app, &first_key)
                .await
                .expect("within the key's limit"),
        );
    }
    let status = assert_code(try_watch(&app, &first_key).await, Code::ResourceExhausted);
    assert!(
        status.message().contains("watch.max_streams_per_key = 2"),
        "{status:?}"
    );
    held.push(
        try_watch(&app, &second_key)
            .await
            .expect("the tenant's third"),
    );
    let status = assert_code(try_watch(&app, &second_key).await, Code::ResourceExhausted);
    assert!(
        status
            .message()
            .contains("watch.max_streams_per_tenant = 3"),
        "{status:?}"
    );
    let _theirs = try_watch(&app, &other_tenant)
        .await
        .expect("another tenant's keys have their own slots");

    // Closing a stream frees its slot once the server sees it go.
    drop(held.remove(0));
    let deadline = tokio::time::Instant::now() + WAIT;
    let reopened = loop {
        match try_watch(&app, &first_key).await {
            Ok(stream) => break stream,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the slot stayed taken"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    held.push(reopened);
    assert_code(try_watch(&app, &first_key).await, Code::ResourceExhausted);
    // The streams still held work.
    let id = app.submit_id(&second_key, valid_spec()).await;
    for stream in &mut held {
        assert_eq!(next_event(stream).await.proposal.unwrap().id, id);
    }
}
