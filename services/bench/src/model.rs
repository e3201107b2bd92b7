//! `model`: one tenant's proposals reviewed by a model endpoint that answers
//! after a fixed delay (the test support's fake provider, started in this
//! process and named to the server in a `--config` file), while a gate-only
//! tenant submits a trickle (measured alone as well, before and after the
//! loads). Model reviews run concurrently up to the endpoint's limit, so
//! the model tenant's decisions per second should come to min(clients, the
//! endpoint's concurrency) ÷ the delay; the gate-only tenant's p99 beside it
//! should be its p99 alone. The same closed loop on
//! the gate-only tenant, measured first, gives the cycle (submit to
//! decision) every proposal pays besides the model on this machine, and a
//! second ratio with it added to the delay: the model stage's own share.
//! Last, a gate-only tenant decides as many proposals a second as the model
//! tenant did, open loop, with the trickle beside it: the trickle's p99
//! beside the model load over its p99 beside that is what the model stage
//! itself costs a neighbour, apart from the cores and the writer being
//! shared at all.

use std::{
    collections::BTreeMap,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use countersign_proto::{
    client::BearerAuth,
    v1::{self, PutModelProfileRequest, policy_service_client::PolicyServiceClient},
};
use countersign_test_support::fake_model::{Answer, FakeModel};
use serde_json::json;
use tokio::sync::Mutex;

use crate::{
    BenchArgs, LoadArgs, ModelArgs, Via,
    report::{Machine, Percentiles, Report},
    scenario::{
        MAX_TARGETS, Stop, Tally, backend_name, channel, drive, now_rfc3339, seed, trickle,
        usage_between,
    },
    server::Server,
};

/// The endpoint's name in the server's configuration and the tenant's profile.
const ENDPOINT: &str = "bench";

/// The `[[model.endpoints]]` file naming the fake provider.
fn endpoint_config(base_url: &str, model: &ModelArgs) -> String {
    format!(
        "[[model.endpoints]]\nname = \"{ENDPOINT}\"\nbase_url = \"{base_url}\"\nmodel = \"fake\"\n\
         timeout = \"60s\"\nmax_concurrency = {}\n",
        model.model_concurrency
    )
}

/// A profile that sends every `bench_restart` of `tenant` to the endpoint.
async fn put_profile(server: &Server, tenant: &str) -> anyhow::Result<()> {
    let admin = server.admin(&[
        "admin", "key", "create", "--tenant", tenant, "--role", "admin",
    ])?;
    let mut policy = PolicyServiceClient::with_interceptor(
        channel(&server.endpoint).await?,
        BearerAuth::new(&admin)?,
    );
    policy
        .put_model_profile(PutModelProfileRequest {
            profile: Some(v1::ModelProfile {
                id: "bench".into(),
                r#match: Some(v1::RouteMatch {
                    actions: vec!["bench_restart".into()],
                    ..Default::default()
                }),
                endpoint: ENDPOINT.into(),
                on_unsure: v1::OnUnsure::Reject as i32,
                calls_per_minute: 0,
            }),
        })
        .await?;
    Ok(())
}

pub async fn model(args: &BenchArgs, model: &ModelArgs) -> anyhow::Result<Report> {
    args.production
        .run(args, |production| model_on(args, model, production))
        .await
}

async fn model_on(
    args: &BenchArgs,
    model: &ModelArgs,
    production: Option<crate::production::Production>,
) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let backend = backend_name(production.as_ref());
    let delay = model.model_latency;
    let answer = Answer::After(
        delay,
        Box::new(Answer::Completion(
            r#"{"verdict": "approve", "reason": "benchmark"}"#.into(),
        )),
    );
    let fake = FakeModel::start(move |_| answer.clone()).await;
    let config_dir = tempfile::tempdir()?;
    let config = config_dir.path().join("countersign.toml");
    std::fs::write(&config, endpoint_config(&fake.base_url(), model))?;
    let server = Server::start_configured(args, production, Some(config))?;
    let pool = model.proposals.clamp(model.clients.max(1), MAX_TARGETS);
    let model_key = seed(&server, "default", pool).await?;
    put_profile(&server, "default").await?;
    let quiet_key = seed(&server, "quiet", MAX_TARGETS).await?;
    let steady_key = seed(&server, "steady", MAX_TARGETS).await?;

    // The gate-only tenant alone: the latency it should keep. Half of it is
    // measured here and half after the loads, so that the machine's own
    // slow and quick spells fall on the baseline as they fall on the loads.
    let alone = Arc::new(Mutex::new(Tally::new()));
    let alone_half = || {
        trickle(
            &server.endpoint,
            &quiet_key,
            model.trickle_rate,
            Stop::after(model.trickle_alone / 2),
            alone.clone(),
            Via::Await,
        )
    };
    alone_half().await?;

    let load = LoadArgs {
        proposals: model.proposals,
        clients: model.clients,
        rate: None,
        reject_ratio: 0.0,
        decision_timeout: model.decision_timeout,
        via: model.via,
        growth: None,
        warmup: 0,
    };
    // The same closed loop on the gate-only tenant: the cycle (submit to
    // decision) every proposal pays besides the model, on this machine now.
    let gated = Arc::new(Mutex::new(Tally::new()));
    let gated_wall = drive(
        &server.endpoint,
        &quiet_key,
        &load,
        (MAX_TARGETS, 2 << 40),
        gated.clone(),
    )
    .await?;
    let gated_per_s = gated.lock().await.outcomes.values().sum::<u64>() as f64
        / gated_wall.as_secs_f64().max(1e-9);

    // A warm-up of one proposal per client, not counted.
    let warmup = LoadArgs {
        proposals: model.clients,
        ..load.clone()
    };
    let warm = Arc::new(Mutex::new(Tally::new()));
    drive(&server.endpoint, &model_key, &warmup, (pool, 1 << 40), warm).await?;

    // The model tenant's load, and the gate-only trickle beside it until
    // the load is over.
    let loaded = Arc::new(Mutex::new(Tally::new()));
    let beside = Arc::new(Mutex::new(Tally::new()));
    let written_before = crate::writes::Snapshot::take(&server).await?;
    let before = server.usage();
    let running = {
        let (endpoint, key, load) = (server.endpoint.clone(), model_key.clone(), load.clone());
        let loaded = loaded.clone();
        tokio::spawn(async move { drive(&endpoint, &key, &load, (pool, 0), loaded).await })
    };
    let wall = trickle_beside(&server.endpoint, &quiet_key, model, running, &beside).await?;
    let after = server.usage();
    let written_after = crate::writes::Snapshot::take(&server).await?;

    // A gate-only tenant deciding as many proposals a second as the model
    // tenant did, open loop, with the trickle beside it: what the same rate
    // of decisions costs a neighbour on this machine without a model, so
    // that what the model stage adds is told apart from the machine's cores
    // and its one writer being shared at all.
    let decided_so_far = loaded.lock().await.outcomes.values().sum::<u64>();
    let same_rate = (decided_so_far as f64 / wall.as_secs_f64().max(1e-9)).round() as u64;
    let steady_load = LoadArgs {
        rate: Some(same_rate.max(1)),
        proposals: decided_so_far,
        ..load.clone()
    };
    let steady = Arc::new(Mutex::new(Tally::new()));
    let beside_steady = Arc::new(Mutex::new(Tally::new()));
    let running = {
        let (endpoint, key, steady) = (server.endpoint.clone(), steady_key.clone(), steady.clone());
        tokio::spawn(async move {
            drive(
                &endpoint,
                &key,
                &steady_load,
                (MAX_TARGETS, 3 << 40),
                steady,
            )
            .await
        })
    };
    trickle_beside(&server.endpoint, &quiet_key, model, running, &beside_steady).await?;
    alone_half().await?;

    let (loaded, alone, beside) = (loaded.lock().await, alone.lock().await, beside.lock().await);
    let (steady, beside_steady) = (steady.lock().await, beside_steady.lock().await);
    let of = |tally: &Tally| Percentiles::of(tally.decision.as_ref().expect("histogram"));
    let (loaded_p, alone_p, beside_p) = (of(&loaded), of(&alone), of(&beside));
    let beside_steady_p = of(&beside_steady);
    // The trickle's Submit alone (its submission's commit): what of its wait
    // is the write path rather than the review.
    let submitted = |tally: &Tally| Percentiles::of(tally.submit.as_ref().expect("histogram"));
    let decided = loaded.outcomes.values().sum::<u64>();
    // Both tenants' decisions of the loaded phase wrote what it wrote.
    let written = crate::writes::per_decision(
        &server,
        &written_before,
        &written_after,
        decided + beside.outcomes.values().sum::<u64>(),
    )
    .await?;
    let throughput = decided as f64 / wall.as_secs_f64().max(1e-9);
    let in_flight = model.clients.min(model.model_concurrency as u64);
    let expected = in_flight as f64 / delay.as_secs_f64().max(1e-9);
    // With the gate-only cycle added to each model call.
    let cycle = model.clients as f64 / gated_per_s.max(1e-9);
    let expected_with_cycle = in_flight as f64 / (delay.as_secs_f64() + cycle).max(1e-9);
    let mut outcomes = BTreeMap::new();
    for (k, v) in &loaded.outcomes {
        outcomes.insert(format!("model tenant {k}"), *v);
    }
    for (k, v) in &beside.outcomes {
        outcomes.insert(format!("gate-only tenant {k}"), *v);
    }
    for (k, v) in &steady.outcomes {
        outcomes.insert(format!("same-rate gate-only tenant {k}"), *v);
    }
    outcomes.insert(
        "most model requests in flight".to_owned(),
        fake.most_in_flight() as u64,
    );
    let mut errors = BTreeMap::new();
    let gated = gated.lock().await;
    for (name, tally) in [
        ("model", &loaded),
        ("alone", &alone),
        ("beside", &beside),
        ("gate-only closed loop", &gated),
        ("gate-only load at the model tenant's rate", &steady),
        ("beside the gate-only load", &beside_steady),
    ] {
        for (k, v) in &tally.errors {
            errors.insert(format!("{name} {k}"), *v);
        }
    }
    Ok(Report {
        scenario: "model".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "proposals": model.proposals, "clients": model.clients,
            "model_latency_ms": delay.as_millis() as u64,
            "model_concurrency": model.model_concurrency,
            "trickle_rate": model.trickle_rate, "reviewers": args.reviewers,
            "backend": backend, "via": model.via,
        }),
        duration_s: wall.as_secs_f64(),
        throughput_per_s: throughput,
        latencies: BTreeMap::from([
            ("model tenant submit → decision".to_owned(), loaded_p),
            ("gate-only alone".to_owned(), alone_p.clone()),
            ("gate-only beside model load".to_owned(), beside_p.clone()),
            (
                format!("gate-only beside a gate-only load of {same_rate}/s"),
                beside_steady_p.clone(),
            ),
            ("gate-only alone: submit".to_owned(), submitted(&alone)),
            (
                "gate-only beside model load: submit".to_owned(),
                submitted(&beside),
            ),
        ]),
        outcomes,
        errors,
        server: usage_between(before, after, wall),
        // The figure the model tenant's rate is held to: as many reviews
        // in flight as clients (up to the endpoint's limit), each taking the
        // endpoint's delay.
        baselines: BTreeMap::from([
            ("model_expected_decisions_per_s".to_owned(), expected),
            (
                format!("gate_only_decisions_per_s_{}_clients", model.clients),
                gated_per_s,
            ),
            ("gate_only_cycle_ms".to_owned(), cycle * 1000.0),
        ]),
        ratios: BTreeMap::from([
            (
                "decisions_per_s / (concurrency ÷ model latency)".to_owned(),
                throughput / expected.max(1e-9),
            ),
            // The model stage's own share: what is left once every call also
            // pays the gate-only cycle measured in the same run.
            (
                "decisions_per_s / (concurrency ÷ (model latency + gate-only cycle))".to_owned(),
                throughput / expected_with_cycle.max(1e-9),
            ),
            (
                "gate-only p99 beside model load / alone".to_owned(),
                beside_p.p99_ms / alone_p.p99_ms.max(1e-9),
            ),
            // The model stage's own share of a neighbour's wait: beside the
            // model tenant against beside as many gate-only decisions.
            (
                "gate-only p99 beside model load / beside a gate-only load at its rate".to_owned(),
                beside_p.p99_ms / beside_steady_p.p99_ms.max(1e-9),
            ),
        ]),
        writes_per_decision: written,
    })
}

/// The gate-only trickle until `running` (a load) is over: the load's wall
/// time.
async fn trickle_beside(
    endpoint: &str,
    key: &str,
    model: &ModelArgs,
    running: tokio::task::JoinHandle<anyhow::Result<Duration>>,
    tally: &Arc<Mutex<Tally>>,
) -> anyhow::Result<Duration> {
    let stop = Stop::when_flagged();
    let over = stop.flag();
    let load = tokio::spawn(async move {
        let wall = running.await;
        over.store(true, Ordering::Relaxed);
        wall
    });
    let probed = trickle(
        endpoint,
        key,
        model.trickle_rate,
        stop,
        tally.clone(),
        Via::Await,
    )
    .await;
    let wall = load.await???;
    probed?;
    Ok(wall)
}
