use proptest::prelude::*;

use super::*;
use crate::{BlastRadius, GateResult};

/// The crate's spec, with nested parameters (their keys' order must not count).
fn spec() -> ProposalSpec {
    ProposalSpec {
        parameters:
            serde_json::json!({"service": "nginx", "opts": {"b": 1, "a": [2, {"y": 1, "x": 0}]}})
                .as_object()
                .cloned()
                .unwrap(),
        reason: "nginx OOM".into(),
        incident_id: String::new(),
        rollback_plan: String::new(),
        idempotency_key: String::new(),
        ..crate::proposal::tests::spec()
    }
}

fn rejection(missing: &[&str]) -> Decision {
    Decision {
        outcome: DecisionOutcome::Reject,
        reason: "r".into(),
        agent_message: "a".into(),
        sop_id: None,
        sop_version: None,
        rollback_path: None,
        gates: vec![GateResult {
            gate: "sop".into(),
            passed: false,
            detail: "d".into(),
        }],
        missing_gates: missing.iter().map(|g| g.to_string()).collect(),
        reviewer: "w".into(),
        decided_at: 0,
        summary: String::new(),
        sequence: 0,
        digest: String::new(),
        review_latency_ms: 0,
        route_id: None,
        votes: Vec::new(),
        model: None,
    }
}

#[test]
fn the_reason_and_other_prose_do_not_change_the_fingerprint() {
    let a = spec();
    let mut b = spec();
    b.reason = "reworded: please, it is urgent".into();
    b.context_summary = "more context".into();
    b.incident_id = "INC-9".into();
    b.idempotency_key = "retry-2".into();
    b.operator = "someone_else".into();
    assert_eq!(fingerprint("acme", &a), fingerprint("acme", &b));
}

/// The spec's fields as JSON (the names `GateSpec` shares with the spec).
fn fields(value: &impl serde::Serialize) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(value).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// `spec` with one field changed to another valid value, whatever its type
/// (an enum's other names, a string extended, a flag flipped, a map grown).
fn with_changed(spec: &ProposalSpec, field: &str) -> ProposalSpec {
    let mut json = fields(spec);
    let current = json[field].clone();
    let candidates: Vec<serde_json::Value> = match &current {
        serde_json::Value::String(text) => [
            format!("{text} changed"),
            "cluster".into(),
            "tenant_wide".into(),
            "destructive".into(),
        ]
        .into_iter()
        .map(Into::into)
        .collect(),
        serde_json::Value::Bool(flag) => vec![(!flag).into()],
        serde_json::Value::Object(map) => {
            let mut grown = map.clone();
            grown.insert("changed".into(), "yes".into());
            vec![grown.into()]
        }
        other => panic!("{field}: no change known for {other}"),
    };
    for candidate in candidates {
        json.insert(field.to_owned(), candidate);
        if let Ok(changed) = serde_json::from_value::<ProposalSpec>(json.clone().into())
            && changed != *spec
        {
            return changed;
        }
    }
    panic!("{field}: no other valid value found")
}

fn full_spec() -> ProposalSpec {
    let mut s = spec();
    s.context_summary = "summary".into();
    s.incident_id = "INC-1".into();
    s.labels = [("team".to_owned(), "web".to_owned())].into();
    s.rollback_plan = "systemctl start nginx".into();
    s.idempotency_key = "k-1".into();
    s
}

#[test]
fn every_field_the_gates_read_changes_the_fingerprint() {
    let base = full_spec();
    let gate_fields = fields(&GateSpec::from(&base));
    assert_eq!(gate_fields.len(), 6, "{gate_fields:?}");
    for field in gate_fields.keys() {
        let changed = with_changed(&base, field);
        assert_ne!(
            GateSpec::from(&changed),
            GateSpec::from(&base),
            "{field} reaches the gates"
        );
        assert_ne!(
            fingerprint("acme", &changed),
            fingerprint("acme", &base),
            "{field}"
        );
    }
}

#[test]
fn no_field_the_gates_do_not_read_changes_the_fingerprint_but_the_parameters() {
    let base = full_spec();
    let gate_fields = fields(&GateSpec::from(&base));
    for field in fields(&base).keys() {
        if gate_fields.contains_key(field) {
            continue;
        }
        let changed = with_changed(&base, field);
        assert_eq!(
            GateSpec::from(&changed),
            GateSpec::from(&base),
            "{field} is not the gates' to read"
        );
        let same = fingerprint("acme", &changed) == fingerprint("acme", &base);
        assert_eq!(same, field != "parameters", "{field}");
    }
}

#[test]
fn whitespace_around_a_rollback_plan_is_the_same_plan() {
    let mut a = spec();
    a.rollback_plan = "systemctl start nginx".into();
    let mut b = spec();
    b.rollback_plan = "  systemctl start nginx\n".into();
    assert_eq!(fingerprint("acme", &a), fingerprint("acme", &b));
    b.rollback_plan = "  ".into();
    assert_eq!(fingerprint("acme", &spec()), fingerprint("acme", &b));
}

#[test]
fn the_fingerprint_is_stable_across_builds_and_replicas() {
    // Replicas share rejections keyed on it: a change of its encoding is a
    // change every replica must make together. The text hashed, spelled out:
    let text = concat!(
        "\"acme\"\u{1f}",
        r#"{"action":"host_restart_service","class":"write","target":"node-01","#,
        r#""blast_radius":"single_device","#,
        r#""rollback_plan":"systemctl start nginx","force_approve_no_sop":false}"#,
        "\u{1f}",
        r#"{"opts":{"a":[2,{"x":0,"y":1}],"b":1},"service":"nginx"}"#,
        "\u{1f}",
    );
    let expected = hex::encode(Sha256::digest(text.as_bytes()));
    assert_eq!(
        expected,
        "3c28a04cc9d34218f4a72ff9a3a109e94c9c4577d27f99a4a0d2d284c01460b3"
    );
    assert_eq!(fingerprint("acme", &full_spec()), expected);
}

proptest! {
    #[test]
    fn free_text_never_changes_the_fingerprint(
        reason in ".{0,40}",
        context in ".{0,40}",
        incident in ".{0,20}",
        operator in ".{0,20}",
        key in ".{0,20}",
        labels in proptest::collection::btree_map(".{1,8}", ".{0,8}", 0..4),
    ) {
        let mut other = spec();
        other.reason = reason;
        other.context_summary = context;
        other.incident_id = incident;
        other.operator = operator;
        other.idempotency_key = key;
        other.labels = labels;
        prop_assert_eq!(fingerprint("acme", &spec()), fingerprint("acme", &other));
    }

    #[test]
    fn a_change_to_any_gate_input_changes_the_fingerprint(
        base in (".{1,12}", ".{1,12}", 0usize..3, "[a-z ]{0,12}", any::<bool>()),
        change in proptest::array::uniform5(any::<bool>()),
        shift in 1usize..3,
    ) {
        let radii = [BlastRadius::SingleDevice, BlastRadius::Cluster, BlastRadius::TenantWide];
        let (action, target, radius, plan, force) = base;
        let mut a = spec();
        a.action = action;
        a.target = target;
        a.blast_radius = radii[radius];
        a.rollback_plan = plan;
        a.force_approve_no_sop = force;
        let mut b = a.clone();
        if change[0] { b.action.push('x'); }
        if change[1] { b.target.push('x'); }
        if change[2] { b.blast_radius = radii[(radius + shift) % 3]; }
        if change[3] { b.rollback_plan.push('x'); }
        if change[4] { b.force_approve_no_sop = !force; }
        b.reason.push_str(" (again)");
        let changed = change.iter().any(|&c| c);
        prop_assert_eq!(GateSpec::from(&a) != GateSpec::from(&b), changed);
        prop_assert_eq!(fingerprint("acme", &a) != fingerprint("acme", &b), changed);
    }
}

#[test]
fn parameter_key_order_does_not_matter_but_values_do() {
    let a = spec();
    let mut b = spec();
    b.parameters = serde_json::from_str(
        r#"{"opts": {"a": [2, {"x": 0, "y": 1}], "b": 1}, "service": "nginx"}"#,
    )
    .unwrap();
    assert_eq!(fingerprint("acme", &a), fingerprint("acme", &b));
    b.parameters["service"] = "redis".into();
    assert_ne!(fingerprint("acme", &a), fingerprint("acme", &b));
}

#[test]
fn tenant_action_target_and_radius_each_change_the_fingerprint() {
    let base = fingerprint("acme", &spec());
    assert_ne!(base, fingerprint("globex", &spec()));
    let mut s = spec();
    s.action = "host_reboot".into();
    assert_ne!(base, fingerprint("acme", &s));
    let mut s = spec();
    s.target = "node-02".into();
    assert_ne!(base, fingerprint("acme", &s));
    let mut s = spec();
    s.blast_radius = BlastRadius::Cluster;
    assert_ne!(base, fingerprint("acme", &s));
}

#[test]
fn only_a_review_that_rejected_on_its_merits_suppresses_retries() {
    assert!(suppresses_retries(&rejection(&["sop"])));
    assert!(suppresses_retries(&rejection(&[
        "sop",
        "no_parallel_operation"
    ])));
    assert!(
        !suppresses_retries(&rejection(&["no_parallel_operation"])),
        "told to wait: one who waited is reviewed"
    );
    assert!(
        !suppresses_retries(&rejection(&["review"])),
        "review failed"
    );
    let mut approved = rejection(&[]);
    approved.outcome = DecisionOutcome::Approve;
    assert!(!suppresses_retries(&approved));
    let mut timed_out = rejection(&["review"]);
    timed_out.outcome = DecisionOutcome::TimedOut;
    assert!(!suppresses_retries(&timed_out));
}

#[test]
fn a_model_verdict_suppresses_retries_and_a_model_failure_does_not() {
    let with_model = |detail: &str| {
        let mut decision = rejection(&["model"]);
        decision.gates = vec![GateResult {
            gate: "model".into(),
            passed: false,
            detail: detail.into(),
        }];
        decision
    };
    assert!(suppresses_retries(&with_model(
        "reject: not what SOP-007 covers"
    )));
    assert!(suppresses_retries(&with_model("unsure")));
    assert!(suppresses_retries(&with_model(
        "unsure: the reply is not a verdict (prose)"
    )));
    for failure in Failure::ALL {
        assert!(
            !suppresses_retries(&with_model(failure.as_str())),
            "{failure:?}: no verdict, asked again"
        );
    }
}

#[test]
fn the_breaker_opens_at_the_threshold_within_the_window_and_closes_after() {
    let window = 300_000;
    let mut b = Breaker::default();
    b.record_rejection(1_000, window);
    b.record_rejection(2_000, window);
    assert!(!b.is_open(2_000, 3, window));
    b.record_rejection(3_000, window);
    assert!(b.is_open(3_000, 3, window));
    assert!(b.is_open(1_000 + window - 1, 3, window));
    assert!(!b.is_open(1_000 + window, 3, window), "the first aged out");
    assert!(!b.is_idle(1_000 + window, window));
    assert!(b.is_idle(3_000 + window, window));
}

#[test]
fn a_reset_closes_the_breaker_and_forgets_what_came_before() {
    let window = 300_000;
    let mut b = Breaker::default();
    for t in [1, 2, 3] {
        b.record_rejection(t, window);
    }
    assert!(b.is_open(3, 3, window));
    b.reset(3);
    assert!(!b.is_open(4, 3, window));
    b.record_rejection(5, window);
    assert!(!b.is_open(5, 3, window));
    assert!(!Breaker::default().is_open(0, 0, window), "0 turns it off");
}

/// The fingerprint's text built whole, then hashed: the format as its doc
/// spells it out, which the streamed hash must equal byte for byte.
fn fingerprint_of_text(tenant: &str, spec: &ProposalSpec) -> String {
    fn object(map: &serde_json::Map<String, serde_json::Value>, out: &mut String) {
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        out.push('{');
        for (i, key) in keys.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).unwrap());
            out.push(':');
            value(&map[key], out);
        }
        out.push('}');
    }
    fn value(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(map) => object(map, out),
            serde_json::Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    value(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut text = serde_json::to_string(tenant).unwrap();
    text.push('\u{1f}');
    text.push_str(&serde_json::to_string(&GateSpec::from(spec)).unwrap());
    text.push('\u{1f}');
    object(&spec.parameters, &mut text);
    text.push('\u{1f}');
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A parameter value: scalars of every kind, and objects and arrays of them.
fn parameter() -> impl Strategy<Value = serde_json::Value> {
    let scalar = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e12f64..1e12).prop_map(serde_json::Value::from),
        ".{0,8}".prop_map(serde_json::Value::from),
    ];
    scalar.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::vec((".{0,6}", inner), 0..4)
                .prop_map(|entries| serde_json::Value::Object(entries.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn the_streamed_hash_is_the_hash_of_the_whole_text(
        tenant in ".{0,12}",
        action in ".{0,12}",
        target in ".{0,12}",
        plan in ".{0,12}",
        entries in proptest::collection::vec((".{0,6}", parameter()), 0..6),
        // Long text: writes past the hash's buffer, and longer than it.
        blob in proptest::option::of(".{0,700}"),
    ) {
        let mut spec = spec();
        spec.action = action;
        spec.target = target;
        spec.rollback_plan = plan;
        let mut entries = entries;
        entries.extend(blob.map(|blob| ("blob".to_owned(), serde_json::Value::from(blob))));
        // Inserted in the order drawn and in reverse: whatever order the map
        // keeps, the text sorts its keys.
        for order in [entries.clone(), entries.into_iter().rev().collect()] {
            spec.parameters = order.into_iter().collect();
            prop_assert_eq!(fingerprint(&tenant, &spec), fingerprint_of_text(&tenant, &spec));
        }
    }
}
