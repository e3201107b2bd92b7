//! Smoke runs of the load generator, so the harness cannot rot. They check
//! that a run completes and accounts for every proposal; they assert no timing.
//! The server is the `countersign` binary beside `countersign-bench` (a
//! workspace build or test run builds both; alone: `cargo build -p countersign`).

use std::process::Command;

use countersign_test_support::{env_var, postgres, redis};

/// Runs `countersign-bench <args>` and returns its JSON report.
fn bench(args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_countersign-bench"))
        .arg("--out-dir")
        .arg(out.path())
        .args(["--baseline-time", "200ms", "--reviewers", "2"])
        .args(args)
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(args[0]) && stdout.contains("ratio"),
        "{stdout}"
    );
    let file = std::fs::read_dir(out.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(report["scenario"], args[0]);
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    let production = args.contains(&"--production");
    let baseline = match args[0] {
        "noisy-neighbour" => "trickle_p99_ms_beside_spinning_threads",
        "model" => "model_expected_decisions_per_s",
        _ if production => "pgbench_single_row_insert_tps_4_clients",
        _ => "sqlite_single_row_inserts_per_s",
    };
    assert!(
        report["baselines"][baseline].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    report
}

#[test]
fn a_tiny_submit_decide_run_on_postgres_and_redis_reports_pgbench_and_redis_benchmark_beside_it() {
    // The test servers' URLs, given explicitly: without them the test fails.
    let owner = env_var(postgres::OWNER_URL);
    let app = env_var(postgres::APP_URL);
    let redis = redis::url();
    let report = bench(&[
        "submit-decide",
        "--production",
        "--pg-owner-url",
        &owner,
        "--pg-app-url",
        &app,
        "--redis-url",
        &redis,
        "--pgbench-clients",
        "4",
        "--redis-benchmark-requests",
        "2000",
        "--proposals",
        "20",
        "--clients",
        "4",
        "--reject-ratio",
        "0.25",
        "--via",
        "await",
    ]);
    assert_eq!(report["outcomes"]["approved"], 15, "{report}");
    assert_eq!(report["outcomes"]["rejected"], 5, "{report}");
    assert!(
        report["baselines"]["redis_benchmark_xadd_per_s"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
    assert!(
        report["ratios"]["decisions_per_s / pgbench_tps"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
    assert_eq!(
        report["params"]["backend"],
        "production (PostgreSQL + Redis Streams)"
    );
    // The transport's floor, same run: two health checks per proposal (Submit
    // and AwaitDecision), and the ceiling it sets beside pgbench.
    assert_eq!(report["latencies"]["health check (floor)"]["count"], 40);
    for ratio in [
        "transport_ceiling / pgbench_tps",
        "decisions_per_s / transport_ceiling",
    ] {
        assert!(report["ratios"][ratio].as_f64().unwrap() > 0.0, "{report}");
    }
    assert!(
        report["baselines"]["transport_ceiling_decisions_per_s"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
    // What each decision wrote, from PostgreSQL's own counts, and its CPU
    // beside pgbench's per transaction.
    // (PostgreSQL publishes a backend's counts up to 10 s after it goes
    // idle: the snapshots wait that out, so no warm-up row falls inside.)
    let writes = &report["writes_per_decision"];
    for figure in ["rows decisions insert", "rows proposals insert"] {
        let rows = writes[figure].as_f64().unwrap();
        assert!((0.9..1.1).contains(&rows), "{figure}: {report}");
    }
    for figure in ["rows", "index_entries", "log_bytes", "transactions"] {
        assert!(writes[figure].as_f64().unwrap() > 0.0, "{figure}: {report}");
    }
    assert!(
        report["ratios"]["postgres cpu per decision / per pgbench transaction"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
    // A decision's rows written alone, same run: their rate and CPU, and the
    // run's beside them.
    for figure in [
        "decision_rows_alone_per_s",
        "decision_rows_alone_postgres_cpu_ms_per_decision",
    ] {
        assert!(
            report["baselines"][figure].as_f64().unwrap() > 0.0,
            "{figure}: {report}"
        );
    }
    for ratio in [
        "decisions_per_s / decision_rows_alone_per_s",
        "postgres cpu per decision / per decision of its rows alone",
        "postgres cpu per decision of its rows alone / per pgbench transaction",
    ] {
        assert!(
            report["ratios"][ratio].as_f64().unwrap() > 0.0,
            "{ratio}: {report}"
        );
    }
}

#[test]
fn a_tiny_submit_decide_run_accounts_for_every_proposal() {
    for via in ["await", "watch", "submit-wait"] {
        // 42: the floor's four blocks share the proposals out unevenly.
        let report = bench(&[
            "submit-decide",
            "--proposals",
            "42",
            "--clients",
            "4",
            "--reject-ratio",
            "0.25",
            "--via",
            via,
        ]);
        assert_eq!(report["outcomes"]["approved"], 32, "{report}");
        assert_eq!(report["outcomes"]["rejected"], 10, "{report}");
        assert_eq!(report["latencies"]["submit → decision"]["count"], 42);
        // The floor takes turns with the run, in four blocks a side.
        assert_eq!(report["baselines"]["floor_blocks"], 4.0, "{report}");
        let calls_per_proposal = if via == "await" { 2 } else { 1 };
        assert_eq!(
            report["latencies"]["health check (floor)"]["count"],
            42 * calls_per_proposal,
            "{report}"
        );
        // What each decision wrote, from the server's own count: one
        // proposal, decision and audit entry, three events each written once
        // (submitted, review started, decided) and two updates of the
        // proposal; a Submit that waits is decided as it is stored: the
        // proposal inserted decided, two events, no update of it and no
        // queue entry.
        let writes = &report["writes_per_decision"];
        for (figure, rows) in [
            ("rows proposals insert", 1.0),
            ("rows decisions insert", 1.0),
            ("rows audit_log insert", 1.0),
        ] {
            assert_eq!(writes[figure], rows, "{figure}: {report}");
        }
        assert!(writes["rows events update"].is_null(), "{report}");
        if via == "submit-wait" {
            assert_eq!(writes["rows events insert"], 2.0, "{report}");
            assert!(writes["rows proposals update"].is_null(), "{report}");
            assert!(writes["rows queue_entries insert"].is_null(), "{report}");
        } else {
            assert_eq!(writes["rows events insert"], 3.0, "{report}");
            assert_eq!(writes["rows proposals update"], 2.0, "{report}");
            assert_eq!(writes["rows queue_entries insert"], 1.0, "{report}");
        }
        assert!(writes["log_bytes"].as_f64().unwrap() > 0.0, "{report}");
        // The contract's rows alone on one SQLite connection, same run.
        assert!(
            report["baselines"]["decision_rows_alone_per_s"]
                .as_f64()
                .unwrap()
                > 0.0,
            "{report}"
        );
        assert!(
            report["ratios"]["decision_rows_alone_per_s / grpc_health_checks_per_s"]
                .as_f64()
                .unwrap()
                > 0.0,
            "{report}"
        );
        // The machine's CPU a decision and a health check, the generator's
        // beside the server's: both in ticks of 10 ms, which a run this small
        // may round to nothing, so they are only known to be there.
        for figure in [
            "server_cpu_us_per_health_check",
            "generator_cpu_us_per_health_check",
        ] {
            assert!(
                report["baselines"][figure].as_f64().is_some(),
                "{figure}: {report}"
            );
        }
        assert!(
            report["server"]["generator_cpu_seconds"].as_f64().is_some(),
            "{report}"
        );
        assert!(
            report["ratios"]["machine cpu per decision / per health check"]
                .as_f64()
                .is_some(),
            "{report}"
        );
    }
}

#[test]
fn a_tiny_noisy_neighbour_run_measures_the_trickle_alone_beside_busy_cores_and_flooded() {
    let report = bench(&[
        "noisy-neighbour",
        "--flood-clients",
        "2",
        "--trickle-rate",
        "20",
        "--duration",
        "1s",
    ]);
    for phase in [
        "trickle alone",
        "trickle beside spinning threads",
        "trickle while flooded",
        "flood",
    ] {
        assert!(
            report["latencies"][phase]["count"].as_u64().unwrap_or(0) > 0,
            "{phase}: {report}"
        );
    }
    assert!(
        report["ratios"]["trickle p99 beside spinning threads / alone"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(report["params"]["spinning_threads"], cores, "{report}");
    // Busy cores and the flood take turns for the same spans: each side's
    // p99 is over about as many trickle decisions as the other's.
    let blocks = report["params"]["blocks"].as_u64().expect("blocks");
    assert!(blocks > 1, "{report}");
    let count = |phase: &str| report["latencies"][phase]["count"].as_u64().unwrap_or(0);
    let (beside, flooded) = (
        count("trickle beside spinning threads"),
        count("trickle while flooded"),
    );
    assert!(
        beside.abs_diff(flooded) <= 2 * blocks,
        "beside busy cores {beside}, flooded {flooded}: {report}"
    );
}

#[test]
fn a_tiny_model_run_decides_every_proposal_through_the_endpoint_beside_a_gate_only_trickle() {
    let report = bench(&[
        "model",
        "--proposals",
        "20",
        "--clients",
        "4",
        "--model-latency",
        "50ms",
        "--model-concurrency",
        "2",
        "--trickle-rate",
        "20",
        "--trickle-alone",
        "300ms",
    ]);
    assert_eq!(report["outcomes"]["model tenant approved"], 20, "{report}");
    assert_eq!(
        report["latencies"]["model tenant submit → decision"]["count"], 20,
        "{report}"
    );
    // The endpoint's limit holds: 4 clients, 2 requests in flight at most.
    let in_flight = report["outcomes"]["most model requests in flight"]
        .as_u64()
        .unwrap();
    assert!((1..=2).contains(&in_flight), "{report}");
    // As many gate-only decisions as the model tenant's, at its rate.
    assert_eq!(
        report["outcomes"]["same-rate gate-only tenant approved"], 20,
        "{report}"
    );
    let same_rate = report["latencies"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.starts_with("gate-only beside a gate-only load of "))
        .cloned()
        .unwrap_or_else(|| panic!("no same-rate phase: {report}"));
    for phase in [
        "gate-only alone",
        "gate-only beside model load",
        "gate-only alone: submit",
        "gate-only beside model load: submit",
        same_rate.as_str(),
    ] {
        assert!(
            report["latencies"][phase]["count"].as_u64().unwrap_or(0) > 0,
            "{phase}: {report}"
        );
    }
    for ratio in [
        "decisions_per_s / (concurrency ÷ model latency)",
        "decisions_per_s / (concurrency ÷ (model latency + gate-only cycle))",
        "gate-only p99 beside model load / alone",
        "gate-only p99 beside model load / beside a gate-only load at its rate",
    ] {
        assert!(
            report["ratios"][ratio].as_f64().unwrap_or(0.0) > 0.0,
            "{ratio}: {report}"
        );
    }
}

#[test]
fn a_tiny_growth_run_measures_an_empty_and_a_grown_server_in_turns() {
    let report = bench(&[
        "submit-decide",
        "--proposals",
        "20",
        "--clients",
        "2",
        "--growth",
        "500",
    ]);
    assert_eq!(report["outcomes"]["approved"], 16, "{report}");
    assert_eq!(report["outcomes"]["grown approved"], 16, "{report}");
    // The empty side's turns beside the grown one's: as many proposals, in
    // as many blocks.
    assert_eq!(report["outcomes"]["empty beside approved"], 16, "{report}");
    assert_eq!(report["baselines"]["growth_blocks"], 4.0, "{report}");
    assert_eq!(
        report["latencies"]["submit → decision after 500 decided"]["count"],
        20
    );
    assert!(
        report["ratios"]["grown / empty decisions_per_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Each half's server CPU per decision; the grown half's is the headline
    // server usage over its 20 decisions.
    let per_decision = |half: &str| {
        report["baselines"][format!("{half}_server_cpu_ms_per_decision")]
            .as_f64()
            .unwrap_or_else(|| panic!("{half}: {report}"))
    };
    assert!(per_decision("empty").is_finite(), "{report}");
    let grown_cpu = report["server"]["cpu_seconds"].as_f64().unwrap() * 1000.0 / 20.0;
    assert!((per_decision("grown") - grown_cpu).abs() < 1e-9, "{report}");
    assert!(report["ratios"]["grown / empty server cpu per decision"].is_number());
}

#[test]
fn a_tiny_watch_fanout_run_delivers_every_decision_to_every_watcher() {
    // One more watcher than a key may hold by default: the server under test
    // is started with the stream caps lifted.
    let report = bench(&[
        "watch-fanout",
        "--watchers",
        "65",
        "--rate",
        "20",
        "--duration",
        "1s",
    ]);
    assert_eq!(report["outcomes"]["decisions submitted"], 20, "{report}");
    assert_eq!(
        report["outcomes"]["decisions delivered (all watchers)"], 1300,
        "{report}"
    );
}

#[test]
fn a_tiny_suppressed_run_answers_every_retry_from_the_cache() {
    let report = bench(&["suppressed", "--submits", "202", "--clients", "4"]);
    assert_eq!(report["outcomes"]["suppressed"], 202, "{report}");
    assert_eq!(report["latencies"]["suppressed submit"]["count"], 202);
    // The transport floor, measured from the same clients in the same run,
    // in blocks that alternate with the retries'.
    assert_eq!(report["latencies"]["health check (floor)"]["count"], 202);
    assert_eq!(report["params"]["blocks"], 4, "{report}");
    // The load generator's own CPU a call, on each side (it shares the cores).
    for side in ["suppressed_submit", "health_check"] {
        assert!(
            report["params"][format!("generator_cpu_us_per_{side}")].is_number(),
            "{report}"
        );
    }
    assert!(
        report["baselines"]["grpc_health_checks_per_s"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
}

#[test]
fn a_tiny_audit_query_run_pages_the_log_and_verifies_every_entry() {
    let report = bench(&[
        "audit-query",
        "--decisions",
        "3000",
        "--small",
        "500",
        "--queries",
        "40",
        "--clients",
        "2",
    ]);
    assert_eq!(report["outcomes"]["verified_entries"], 3000, "{report}");
    assert!(
        report["outcomes"]["pages"].as_u64().unwrap() >= 40,
        "{report}"
    );
    assert!(
        report["baselines"]["sequencer_entries_per_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(
        report["latencies"]["page, any filter (3000 entries)"]["count"]
            .as_u64()
            .unwrap()
            >= 40
    );
}

#[test]
fn without_a_countersign_binary_the_run_says_where_it_looked_and_how_to_build_one() {
    let out = tempfile::tempdir().unwrap();
    let missing = out.path().join("no-such-countersign");
    let output = Command::new(env!("CARGO_BIN_EXE_countersign-bench"))
        .arg("--out-dir")
        .arg(out.path())
        .arg("--countersign")
        .arg(&missing)
        .args(["submit-decide", "--proposals", "1"])
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&missing.display().to_string()) && stderr.contains("cargo build"),
        "{stderr}"
    );
}

#[test]
fn a_tiny_escalation_run_decides_every_proposal_by_two_approvals() {
    let report = bench(&["escalation", "--proposals", "20", "--clients", "2"]);
    assert_eq!(report["outcomes"]["approved"], 20, "{report}");
    assert_eq!(
        report["latencies"]["resolution (deciding Resolve -> decision on Watch)"]["count"], 20,
        "{report}"
    );
    assert_eq!(report["latencies"]["first vote (Resolve)"]["count"], 20);
    assert!(
        report["ratios"]["resolution_p99_ms / health_check_p99_ms"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0,
        "{report}"
    );
}
