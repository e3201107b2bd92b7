//! The production backends through the real binary: PostgreSQL (a fresh
//! database per test) and Redis Streams (a random key prefix on the shared
//! test Redis, or a `redis-server` of the test's own), `serve` in one process
//! or as separate api and worker processes.

use std::time::Duration;

use countersign_proto::v1::ProposalState;

use crate::production_support::{
    Backend, Database, RedisServer, await_decision, client, env_url, free_port, random_name, seed,
    serve, spec, submit,
};

const DECIDED_WITHIN: Duration = Duration::from_secs(25);

fn state(proposal: &countersign_proto::v1::Proposal) -> ProposalState {
    ProposalState::try_from(proposal.state).unwrap()
}

/// Whether a wire state is one a proposal never leaves.
pub(crate) fn is_terminal(state: ProposalState) -> bool {
    matches!(
        state,
        ProposalState::Approved
            | ProposalState::Rejected
            | ProposalState::Cancelled
            | ProposalState::TimedOut
    )
}

/// Every id has exactly one terminal event in the database.
async fn assert_decided_once(db: &Database, ids: &[String]) {
    let counts = db.terminal_event_counts().await;
    for id in ids {
        let n = counts.iter().find(|(p, _)| p == id).map_or(0, |(_, n)| *n);
        assert_eq!(n, 1, "proposal {id} has {n} terminal events");
    }
}

#[tokio::test]
async fn serve_on_postgres_and_redis_approves_and_rejects_submitted_proposals() {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let server = serve(
        dir.path(),
        "all",
        &Backend {
            database_url: &db.app_url,
            redis_url: Some(&redis),
            redis_prefix: &prefix,
        },
    );
    let mut client = client(&server, &key).await;

    let approved = submit(&mut client, spec("node-01")).await;
    let rejected = submit(&mut client, spec("node-77")).await;
    let approved = await_decision(&mut client, &approved, DECIDED_WITHIN).await;
    let rejected = await_decision(&mut client, &rejected, DECIDED_WITHIN).await;

    assert_eq!(state(&approved), ProposalState::Approved, "{approved:?}");
    assert_eq!(approved.decision.as_ref().unwrap().sop_id, "SOP-007");
    assert_eq!(state(&rejected), ProposalState::Rejected, "{rejected:?}");
    assert!(
        rejected
            .decision
            .as_ref()
            .unwrap()
            .missing_gates
            .contains(&"target_state".to_owned()),
        "{rejected:?}"
    );
    assert_decided_once(&db, &[approved.id, rejected.id]).await;
}

#[tokio::test]
async fn serve_on_postgres_without_a_redis_url_refuses_to_start() {
    let db = Database::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_countersign"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--console-listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("COUNTERSIGN_REDIS_URL")
        .env("COUNTERSIGN_DATABASE_URL", &db.app_url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("COUNTERSIGN_REDIS_URL") && stderr.contains("SQLite-only"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_api_process_and_a_worker_process_decide_every_proposal_once() {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let redis = env_url("COUNTERSIGN_TEST_REDIS_URL");
    let prefix = random_name("cs-test-");
    let backend = Backend {
        database_url: &db.app_url,
        redis_url: Some(&redis),
        redis_prefix: &prefix,
    };
    let api = serve(dir.path(), "api", &backend);
    let _worker = serve(dir.path(), "worker", &backend);
    let mut client = client(&api, &key).await;

    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(submit(&mut client, spec(&format!("node-{n:02}"))).await);
    }
    for id in &ids {
        let decided = await_decision(&mut client, id, DECIDED_WITHIN).await;
        assert!(is_terminal(state(&decided)), "{decided:?}");
        assert!(decided.decision.is_some(), "{decided:?}");
    }
    assert_decided_once(&db, &ids).await;
}

#[tokio::test]
async fn submit_answers_ok_while_redis_is_down_and_the_proposals_are_decided_once_it_is_up() {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let server = serve(
        dir.path(),
        "all",
        &Backend {
            database_url: &db.app_url,
            redis_url: Some(&url),
            redis_prefix: "countersign",
        },
    );
    let mut client = client(&server, &key).await;

    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(submit(&mut client, spec(&format!("node-{n:02}"))).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &ids {
        let pending = crate::production_support::get(&mut client, id).await;
        assert_eq!(state(&pending), ProposalState::Pending, "{pending:?}");
    }

    let _redis = RedisServer::start_on(port);
    for id in &ids {
        let decided = await_decision(&mut client, id, DECIDED_WITHIN).await;
        assert!(is_terminal(state(&decided)), "{decided:?}");
    }
    assert_decided_once(&db, &ids).await;
}

#[tokio::test]
async fn the_sweeper_republishes_proposals_lost_by_a_redis_restarted_without_persistence() {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start();
    let url = redis.url();
    let backend = Backend {
        database_url: &db.app_url,
        redis_url: Some(&url),
        redis_prefix: "countersign",
    };
    // The API alone: proposals are published to Redis, and nobody reviews them.
    let api = serve(dir.path(), "api", &backend);
    let mut client = client(&api, &key).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(submit(&mut client, spec(&format!("node-{n:02}"))).await);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while redis.queued("countersign", "acme") < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "not all published to Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Redis restarts empty: the published entries are gone.
    let port = redis.port;
    redis.kill();
    let redis = RedisServer::start_on(port);
    assert_eq!(redis.queued("countersign", "acme"), 0);

    // A worker's sweeper finds the undecided proposals missing and re-publishes them.
    let _worker = serve(dir.path(), "worker", &backend);
    for id in &ids {
        let decided = await_decision(&mut client, id, DECIDED_WITHIN).await;
        assert!(is_terminal(state(&decided)), "{decided:?}");
    }
    assert_decided_once(&db, &ids).await;
    let worker_log = std::fs::read_to_string(dir.path().join("worker.log")).unwrap();
    assert!(
        worker_log.contains("undecided proposals were missing from Redis"),
        "{worker_log}"
    );
}

/// The API answers no call before the fan-out knows where the event log ends.
/// Read any later, that position could fall past a decision committed
/// meanwhile, which the fan-out would then never publish: an AwaitDecision
/// that had found its proposal still open would wait out its deadline. Here
/// the log's end cannot be read (its retention mark is locked) until the test
/// lets go.
#[tokio::test]
async fn the_api_answers_no_call_before_the_fan_out_knows_where_the_log_ends() {
    let db = Database::migrated().await;
    let key = seed(&db.store().await).await;
    let mut holder = db.superuser_connection().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE event_retention IN ACCESS EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (path, database_url) = (dir.path().to_owned(), db.app_url.clone());
    let (redis, prefix) = (
        env_url("COUNTERSIGN_TEST_REDIS_URL"),
        random_name("cs-test-"),
    );
    let started = tokio::task::spawn_blocking(move || {
        serve(
            &path,
            "api",
            &Backend {
                database_url: &database_url,
                redis_url: Some(&redis),
                redis_prefix: &prefix,
            },
        )
    });
    let server = tokio::time::timeout(Duration::from_secs(20), started)
        .await
        .expect("serve binds and announces its address with the log locked")
        .unwrap();
    let unknown = || countersign_proto::v1::GetProposalRequest {
        id: "01KNOSUCHPROPOSAL0000000000".into(),
    };

    let early = tokio::time::timeout(Duration::from_millis(1500), async {
        client(&server, &key).await.get_proposal(unknown()).await
    })
    .await;
    assert!(
        early.is_err(),
        "a call was answered before the fan-out's start was known: {early:?}"
    );

    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        client(&server, &key).await.get_proposal(unknown()).await
    })
    .await
    .expect("answered once the log's end is known");
    assert_eq!(answered.unwrap_err().code(), tonic::Code::NotFound);
}
