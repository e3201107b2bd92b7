//! The metrics endpoint and the worker role's gRPC health, on the real
//! binary (port 0 for both listeners), driven through the generated client.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use countersign::client::BearerAuth;
use countersign_proto::v1::{
    self, PutModelProfileRequest, PutSopRequest, PutTargetRequest, SubmitRequest, WatchRequest,
    notification_service_client::NotificationServiceClient,
    policy_service_client::PolicyServiceClient, proposal_service_client::ProposalServiceClient,
    sop_service_client::SopServiceClient, target_service_client::TargetServiceClient,
};
use countersign_test_support::{
    fake_model::{Answer, FakeModel},
    fixtures,
};
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

const BIN: &str = env!("CARGO_BIN_EXE_countersign");

/// `countersign serve` with both listeners on port 0, and their addresses.
struct Served {
    child: Child,
    grpc: String,
    metrics: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, role: &str) -> Served {
    serve_with(dir, role, &[])
}

/// [`serve`] with more flags.
fn serve_with(dir: &Path, role: &str, flags: &[&std::ffi::OsStr]) -> Served {
    let mut child = Command::new(BIN)
        .args(["serve", "--role", role, "--listen", "127.0.0.1:0"])
        .args(flags)
        .args(["--metrics-listen", "127.0.0.1:0", "--reviewers", "2"])
        .args(["--console-listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .env_remove("COUNTERSIGN_REDIS_URL")
        .env_remove("COUNTERSIGN_DATA_DIR")
        .env_remove("COUNTERSIGN_METRICS_LISTEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start countersign serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = |prefix: &str| {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("expected {prefix:?}…, got {line:?}"))
            .to_owned()
    };
    let grpc = line("countersign listening on ");
    let metrics = line("countersign metrics on ");
    Served {
        child,
        grpc: format!("http://{grpc}"),
        metrics,
    }
}

/// `GET /metrics` over a plain TCP connection: (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Every sample of the scrape: `name{labels}` -> value.
fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let (status, body) = get(addr, "/metrics");
    assert!(status.contains("200"), "{status}\n{body}");
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels contain every one of `labels`.
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            let (series_name, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
            series_name == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, value)| value)
        .sum()
}

/// The requests counted with labels `rpc` and `code`.
fn requests(samples: &BTreeMap<String, f64>, rpc: &str, code: &str) -> f64 {
    let (rpc, code) = (format!("rpc=\"{rpc}\""), format!("code=\"{code}\""));
    sum(samples, "countersign_grpc_requests_total", &[&rpc, &code])
}

fn has(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> bool {
    samples.keys().any(|series| {
        let (series_name, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
        series_name == name && labels.iter().all(|l| rest.contains(l))
    })
}

async fn channel(endpoint: &str) -> Channel {
    Channel::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// `n` proposals on targets nobody knows (each rejected: no SOP, no target),
/// each with its own operator so that no breaker opens; waits for them all.
async fn submit_rejected(
    client: &mut ProposalServiceClient<
        tonic::service::interceptor::InterceptedService<Channel, BearerAuth>,
    >,
    round: usize,
    n: usize,
) {
    for i in 0..n {
        let mut spec = crate::helpers::valid_spec();
        spec.target = format!("unknown-{round}-{i}");
        spec.operator = format!("op-{round}-{i}");
        let id = client
            .submit(SubmitRequest {
                spec: Some(spec),
                ..Default::default()
            })
            .await
            .expect("Submit answers OK")
            .into_inner()
            .proposal
            .expect("a proposal")
            .id;
        let mut request =
            tonic::Request::new(countersign_proto::v1::AwaitDecisionRequest { id: id.clone() });
        request.set_timeout(Duration::from_secs(20));
        client
            .await_decision(request)
            .await
            .unwrap_or_else(|status| panic!("no decision for {id}: {status}"));
    }
}

#[tokio::test]
async fn the_metrics_endpoint_exposes_the_named_series_and_they_move_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "all");
    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let auth = BearerAuth::new(key.trim()).unwrap();
    let channel = channel(&served.grpc).await;
    let mut client = ProposalServiceClient::with_interceptor(channel.clone(), auth.clone());
    let mut watcher = NotificationServiceClient::with_interceptor(channel, auth);
    let _stream = watcher
        .watch(WatchRequest::default())
        .await
        .expect("Watch opens")
        .into_inner();

    submit_rejected(&mut client, 1, 3).await;
    let first = scrape(&served.metrics);
    submit_rejected(&mut client, 2, 3).await;
    let second = scrape(&served.metrics);

    let submits = [
        "rpc=\"/countersign.v1.ProposalService/Submit\"",
        "code=\"Ok\"",
    ];
    assert!(sum(&first, "countersign_grpc_requests_total", &submits) >= 3.0);
    assert!(
        sum(&second, "countersign_grpc_requests_total", &submits)
            >= sum(&first, "countersign_grpc_requests_total", &submits) + 3.0,
        "requests counted"
    );
    let rejected = ["outcome=\"reject\""];
    assert!(
        sum(&second, "countersign_reviews_total", &rejected)
            >= sum(&first, "countersign_reviews_total", &rejected) + 3.0,
        "reviews by outcome counted"
    );
    let target_state = ["gate=\"target_state\""];
    assert!(
        sum(
            &second,
            "countersign_review_failed_gates_total",
            &target_state
        ) >= sum(
            &first,
            "countersign_review_failed_gates_total",
            &target_state
        ) + 3.0,
        "failed gates counted"
    );
    // Histograms are Prometheus histograms: buckets, a sum and a count.
    for histogram in [
        "countersign_review_duration_seconds",
        "countersign_grpc_request_duration_seconds",
    ] {
        assert!(
            has(&second, &format!("{histogram}_bucket"), &["le=\"+Inf\""]),
            "{histogram} buckets"
        );
        assert!(
            sum(&second, &format!("{histogram}_count"), &[])
                > sum(&first, &format!("{histogram}_count"), &[]),
            "{histogram} observed"
        );
    }
    assert!(sum(&second, "countersign_review_duration_seconds_count", &[]) >= 6.0);
    // Gauges: the queue (sampled from the start, every tenant present) and watchers.
    let default = ["tenant=\"default\""];
    assert!(
        has(&second, "countersign_queue_depth", &default),
        "{second:?}"
    );
    assert!(has(
        &second,
        "countersign_queue_oldest_age_seconds",
        &default
    ));
    assert_eq!(
        sum(&second, "countersign_watchers_connected", &default),
        1.0
    );
}

#[tokio::test]
async fn the_worker_role_answers_health_checks_and_refuses_the_proposal_service() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "worker");
    let channel = channel(&served.grpc).await;

    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("the health check answers")
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let mut client =
        ProposalServiceClient::with_interceptor(channel, BearerAuth::new(key.trim()).unwrap());
    let refused = client
        .submit(SubmitRequest {
            spec: Some(crate::helpers::valid_spec()),
            ..Default::default()
        })
        .await
        .expect_err("a worker serves no API");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");

    // Its metrics are served too (the queue gauges from their first sample on).
    let mut samples = scrape(&served.metrics);
    for _ in 0..50 {
        if has(&samples, "countersign_queue_depth", &["tenant=\"default\""]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        samples = scrape(&served.metrics);
    }
    assert!(
        has(&samples, "countersign_queue_depth", &["tenant=\"default\""]),
        "{samples:?}"
    );
}

#[test]
fn the_metrics_endpoint_answers_not_found_beside_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "api");
    let (status, _) = get(&served.metrics, "/");
    assert!(status.contains("404"), "{status}");
}

#[tokio::test]
async fn refused_credentials_and_undecodable_requests_are_counted_by_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "api");
    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let channel = channel(&served.grpc).await;
    let unknown = format!("cs_{}_{}", "0".repeat(16), "a".repeat(64));
    let mut stranger = ProposalServiceClient::with_interceptor(
        channel.clone(),
        BearerAuth::new(&unknown).unwrap(),
    );
    for _ in 0..3 {
        let status = stranger
            .submit(SubmitRequest {
                spec: Some(crate::helpers::valid_spec()),
                ..Default::default()
            })
            .await
            .expect_err("an unknown key is refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }
    for (_, message) in crate::service::undecodable() {
        let status = crate::service::raw_call(
            channel.clone(),
            key.trim(),
            "/countersign.v1.ProposalService/Submit",
            message,
        )
        .await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }
    let status = crate::service::raw_call(
        channel,
        key.trim(),
        "/countersign.v1.ProposalService/Submit",
        vec![0; 1024 * 1024 + 1],
    )
    .await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    let samples = scrape(&served.metrics);
    let count = |code| requests(&samples, "/countersign.v1.ProposalService/Submit", code);
    assert_eq!(count("Unauthenticated"), 3.0, "{samples:?}");
    assert_eq!(count("InvalidArgument"), 3.0, "{samples:?}");
    assert_eq!(count("ResourceExhausted"), 1.0, "{samples:?}");
    assert_eq!(count("Internal"), 0.0, "{samples:?}");
}

#[tokio::test]
async fn a_path_not_in_the_rpc_table_is_unimplemented_and_counted_once_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "api");
    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let channel = channel(&served.grpc).await;
    for path in [
        "/countersign.v1.ProposalService/Nope",
        "/grpc.health.v1.Health/Nope",
    ] {
        let status = crate::service::raw_call(channel.clone(), key.trim(), path, vec![]).await;
        assert_eq!(
            status.code(),
            tonic::Code::Unimplemented,
            "{path}: {status:?}"
        );
    }
    let status = crate::service::raw_call(
        channel,
        "not-a-key",
        "/countersign.v1.ProposalService/Nope",
        vec![],
    )
    .await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");

    let samples = scrape(&served.metrics);
    let count = |code| requests(&samples, "unknown", code);
    assert_eq!(count("Unimplemented"), 2.0, "{samples:?}");
    assert_eq!(count("Unauthenticated"), 1.0, "{samples:?}");
    assert!(
        !samples.keys().any(|series| series.contains("Nope")),
        "a made-up path mints no series: {samples:?}"
    );
}

/// Samples of `addr` once `done` holds for them (the gauges are sampled
/// every few seconds).
fn scrape_until(
    addr: &str,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let samples = scrape(addr);
        if done(&samples) {
            return samples;
        }
        assert!(std::time::Instant::now() < deadline, "{samples:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test]
async fn escalations_are_counted_opened_resolved_by_verdict_expired_and_open_by_tenant() {
    use countersign_proto::v1::{
        self, GetProposalRequest, PutRouteRequest, PutSopRequest, PutTargetRequest, ResolveRequest,
        escalation_service_client::EscalationServiceClient,
        policy_service_client::PolicyServiceClient, sop_service_client::SopServiceClient,
        target_service_client::TargetServiceClient,
    };
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), "all");
    let admin = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let admin = BearerAuth::new(admin.trim()).unwrap();
    let output = Command::new(BIN)
        .args([
            "admin", "key", "create", "--tenant", "default", "--role", "oncall",
        ])
        .args(["--person", "ann@example.com"])
        .current_dir(dir.path())
        .env_remove("COUNTERSIGN_DATABASE_URL")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let ann = BearerAuth::new(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
    let channel = channel(&served.grpc).await;
    SopServiceClient::with_interceptor(channel.clone(), admin.clone())
        .put_sop(PutSopRequest {
            sop: Some(countersign_test_support::fixtures::wire_sop("SOP-007")),
        })
        .await
        .unwrap();
    let mut targets = TargetServiceClient::with_interceptor(channel.clone(), admin.clone());
    for node in ["node-01", "node-02", "node-03"] {
        let target = v1::Target {
            id: node.into(),
            status: v1::TargetStatus::Online as i32,
            labels: [
                ("env".to_owned(), "production".to_owned()),
                ("cluster".to_owned(), node.to_owned()),
            ]
            .into(),
            updated_at: None,
        };
        targets
            .put_target(PutTargetRequest {
                target: Some(target),
            })
            .await
            .unwrap();
    }
    let mut policy = PolicyServiceClient::with_interceptor(channel.clone(), admin.clone());
    let route = |id: &str, cluster: &str, seconds: i64| v1::Route {
        id: id.into(),
        r#match: Some(v1::RouteMatch {
            target_selector: [("cluster".to_owned(), cluster.to_owned())].into(),
            ..Default::default()
        }),
        approvals_required: 1,
        expires_after: Some(prost_types::Duration { seconds, nanos: 0 }),
        ..Default::default()
    };
    for route in [
        route("one", "node-01", 3600),
        route("two", "node-02", 3600),
        route("brief", "node-03", 1),
    ] {
        policy
            .put_route(PutRouteRequest { route: Some(route) })
            .await
            .unwrap();
    }
    let mut client = ProposalServiceClient::with_interceptor(channel.clone(), admin);
    let mut ids = Vec::new();
    for node in ["node-01", "node-02", "node-03"] {
        let mut spec = crate::helpers::valid_spec();
        spec.target = node.into();
        spec.operator = format!("op-{node}");
        let submitted = client
            .submit(SubmitRequest {
                spec: Some(spec),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(submitted.into_inner().proposal.unwrap().id);
    }
    for id in &ids[..2] {
        loop {
            let proposal = client
                .get_proposal(GetProposalRequest { id: id.clone() })
                .await
                .unwrap()
                .into_inner();
            if proposal.state == v1::ProposalState::Escalated as i32 {
                break;
            }
            assert_eq!(proposal.decision, None, "{proposal:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let default = ["tenant=\"default\""];
    let open = scrape_until(&served.metrics, |s| {
        sum(s, "countersign_escalations_open", &default) == 2.0
            && sum(s, "countersign_escalations_expired_total", &[]) == 1.0
    });
    assert_eq!(sum(&open, "countersign_escalations_opened_total", &[]), 3.0);

    let mut escalations = EscalationServiceClient::with_interceptor(channel, ann);
    for (id, verdict) in ids[..2]
        .iter()
        .zip([v1::Verdict::Approve, v1::Verdict::Reject])
    {
        escalations
            .resolve(ResolveRequest {
                proposal_id: id.clone(),
                verdict: verdict as i32,
                comment: String::new(),
            })
            .await
            .unwrap();
    }
    let resolved = scrape_until(&served.metrics, |s| {
        sum(s, "countersign_escalations_open", &default) == 0.0
    });
    for verdict in ["approve", "reject"] {
        let label = format!("verdict=\"{verdict}\"");
        assert_eq!(
            sum(
                &resolved,
                "countersign_escalations_resolved_total",
                &[&label]
            ),
            1.0,
            "{verdict}"
        );
        assert_eq!(
            sum(
                &resolved,
                "countersign_escalation_resolution_seconds_count",
                &[&label]
            ),
            1.0,
            "{verdict}"
        );
    }
    assert!(
        has(
            &resolved,
            "countersign_escalation_resolution_seconds_bucket",
            &["le=\"86400\""]
        ),
        "buckets up to a day"
    );
}

#[tokio::test]
async fn model_reviews_are_counted_by_tenant_endpoint_and_verdict_with_their_latency_and_tokens() {
    let fake = FakeModel::start(|_| Answer::Completion(r#"{"verdict": "approve"}"#.into())).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("countersign.toml");
    std::fs::write(
        &config,
        format!(
            "[[model.endpoints]]\nname = \"local\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let served = serve_with(
        dir.path(),
        "all",
        &["--config".as_ref(), config.as_os_str()],
    );
    let key = std::fs::read_to_string(dir.path().join("countersign-data/admin.key")).unwrap();
    let auth = BearerAuth::new(key.trim()).unwrap();
    let channel = channel(&served.grpc).await;
    SopServiceClient::with_interceptor(channel.clone(), auth.clone())
        .put_sop(PutSopRequest {
            sop: Some(fixtures::wire_sop("SOP-007")),
        })
        .await
        .unwrap();
    TargetServiceClient::with_interceptor(channel.clone(), auth.clone())
        .put_target(PutTargetRequest {
            target: Some(v1::Target {
                id: "node-01".into(),
                status: v1::TargetStatus::Online as i32,
                labels: fixtures::production().into_iter().collect(),
                updated_at: None,
            }),
        })
        .await
        .unwrap();
    PolicyServiceClient::with_interceptor(channel.clone(), auth.clone())
        .put_model_profile(PutModelProfileRequest {
            profile: Some(v1::ModelProfile {
                id: "everything".into(),
                r#match: Some(v1::RouteMatch::default()),
                endpoint: "local".into(),
                on_unsure: v1::OnUnsure::Reject as i32,
                calls_per_minute: 0,
            }),
        })
        .await
        .unwrap();
    let mut client = ProposalServiceClient::with_interceptor(channel, auth);
    let id = client
        .submit(SubmitRequest {
            spec: Some(crate::helpers::valid_spec()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .proposal
        .unwrap()
        .id;
    let mut request = tonic::Request::new(v1::AwaitDecisionRequest { id });
    request.set_timeout(Duration::from_secs(20));
    let decided = client.await_decision(request).await.unwrap().into_inner();
    assert_eq!(
        decided.state,
        v1::ProposalState::Approved as i32,
        "{decided:?}"
    );

    let samples = scrape(&served.metrics);
    let labels = ["tenant=\"default\"", "endpoint=\"local\""];
    let calls = [labels[0], labels[1], "verdict=\"approve\""];
    assert_eq!(
        sum(&samples, "countersign_model_calls_total", &calls),
        1.0,
        "{samples:?}"
    );
    for (kind, tokens) in [
        ("prompt", 100.0),
        ("completion", 10.0),
        ("cached_prompt", 64.0),
    ] {
        let kind = format!("kind=\"{kind}\"");
        let tokens_of = [labels[0], labels[1], kind.as_str()];
        assert_eq!(
            sum(&samples, "countersign_model_tokens_total", &tokens_of),
            tokens,
            "{kind}"
        );
    }
    assert_eq!(
        sum(
            &samples,
            "countersign_model_call_duration_seconds_count",
            &[labels[1]]
        ),
        1.0
    );
    assert!(has(
        &samples,
        "countersign_model_call_duration_seconds_bucket",
        &["le=\"+Inf\""]
    ));
}
