//! Proposal specs, SOPs and targets, as domain values and on the wire. The
//! three agree: [`spec`] is the write that SOP-007 covers on `node-01`, which
//! [`seed_reference`] puts in place, so it passes every gate.

use std::collections::BTreeMap;

use countersign_domain::{
    BlastRadius, Decision, GateResult, OperationClass, ProposalSpec, TargetStatus,
    gates::{GATES, Verdict},
    reference::SopInput,
    review::{ReviewStamp, decide},
};
use countersign_proto::{convert::spec_to_proto, v1};
use countersign_store::{NewProposal, Store};

/// The labels of production targets, which SOP-007 selects.
pub fn production() -> BTreeMap<String, String> {
    [("env".to_owned(), "production".to_owned())].into()
}

/// `spec` submitted for `tenant` by the key `tester` (no person, trace or
/// key id), as a store's `insert_proposal` takes it.
pub fn new_proposal(tenant: &str, spec: ProposalSpec) -> NewProposal {
    NewProposal {
        id: NewProposal::new_id(),
        tenant: tenant.into(),
        spec,
        submitted_by: "tester".into(),
        submitted_by_person: None,
        trace_parent: None,
        submitted_key: None,
    }
}

/// A single-device restart of nginx on `node-01` that passes every
/// validation rule; tests change the fields they are about
/// (`ProposalSpec { target: …, ..spec() }`).
pub fn spec() -> ProposalSpec {
    ProposalSpec {
        action: "host_restart_service".into(),
        class: OperationClass::Write,
        target: "node-01".into(),
        parameters: serde_json::json!({"service": "nginx"})
            .as_object()
            .cloned()
            .expect("an object"),
        reason: "User reported 502; nginx error log shows OOM".into(),
        blast_radius: BlastRadius::SingleDevice,
        operator: "user_42".into(),
        context_summary: "coordinator summary".into(),
        incident_id: "INC-7".into(),
        labels: production(),
        rollback_plan: "systemctl start nginx".into(),
        force_approve_no_sop: false,
        idempotency_key: String::new(),
    }
}

/// [`spec`] on `target` (one operator per target, so that rejections of
/// unknown targets never open one operator's breaker).
pub fn spec_on(target: &str) -> ProposalSpec {
    ProposalSpec {
        target: target.into(),
        reason: format!("restart nginx on {target}"),
        operator: format!("op-{target}"),
        ..spec()
    }
}

/// [`spec`] as a client sends it.
pub fn wire_spec() -> v1::ProposalSpec {
    spec_to_proto(&spec())
}

/// [`spec_on`] as a client sends it.
pub fn wire_spec_on(target: &str) -> v1::ProposalSpec {
    spec_to_proto(&spec_on(target))
}

/// SOP-007: restarting a service on a single production device.
pub fn sop() -> SopInput {
    SopInput {
        id: "SOP-007".into(),
        action: "host_restart_service".into(),
        title: "Restart a systemd service".into(),
        covers: "a service that is down or leaking memory".into(),
        rollback_path: "systemctl start nginx".into(),
        max_blast_radius: BlastRadius::SingleDevice,
        selector: production(),
    }
}

/// `id` covering the same action as [`sop`], on the wire, up to a cluster.
pub fn wire_sop(id: &str) -> v1::Sop {
    let sop = sop();
    v1::Sop {
        id: id.into(),
        action: sop.action,
        title: "Restart".into(),
        rollback_path: sop.rollback_path,
        max_blast_radius: v1::BlastRadius::Cluster as i32,
        selector: sop.selector.into_iter().collect(),
        ..Default::default()
    }
}

/// The targets [`seed_reference`] puts: ONLINE, production, cluster `eu-1`.
pub const TARGETS: [&str; 3] = ["node-01", "node-02", "node-03"];

/// Puts [`sop`] and the ONLINE production [`TARGETS`] for `tenant`, creating
/// the tenant first if it does not exist.
pub async fn seed_reference(store: &dyn Store, tenant: &str) {
    if store.get_tenant(tenant).await.unwrap().is_none() {
        store.create_tenant(tenant).await.unwrap();
    }
    store.put_sop(tenant, sop()).await.unwrap();
    for node in TARGETS {
        let mut labels = production();
        labels.insert("cluster".into(), "eu-1".into());
        store
            .put_target(tenant, node, TargetStatus::Online, labels)
            .await
            .unwrap();
    }
}

/// A decision that rejects `spec` on `gate` alone (every other gate passed).
pub fn rejection(spec: &ProposalSpec, gate: &str) -> Decision {
    let verdict = Verdict {
        gates: GATES
            .iter()
            .map(|g| GateResult {
                gate: (*g).into(),
                passed: *g != gate,
                detail: "checked".into(),
            })
            .collect(),
        sop: None,
        rollback_path: None,
    };
    let stamp = ReviewStamp {
        reviewer: "w".into(),
        decided_at: countersign_domain::now_ms(),
        latency_ms: 3,
    };
    decide(&verdict, &spec.into(), stamp)
}
