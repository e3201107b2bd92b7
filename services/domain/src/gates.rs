//! The reviewer's five steps as pure functions of the gathered facts.
//! All gates always run; approval needs every one of them (see [`Verdict::approves`]).

use std::time::Duration;

use serde::Serialize;

use crate::{
    Millis,
    decision::GateResult,
    proposal::{BlastRadius, OperationClass, ProposalSpec},
    reference::{Sop, Target, TargetStatus, TenantPolicy},
    state::ProposalState,
};

pub const SOP: &str = "sop";
pub const TARGET_STATE: &str = "target_state";
pub const NO_PARALLEL_OPERATION: &str = "no_parallel_operation";
pub const ROLLBACK: &str = "rollback";
pub const BLAST_RADIUS: &str = "blast_radius";
/// Not a gate the reviewer evaluates: the review itself failed.
pub const REVIEW: &str = "review";
/// People's countersignature on an escalated proposal (`crate::escalation`):
/// reported after the five, always the last gate of a decision, and only on
/// decisions of proposals that were escalated.
pub const HUMAN: &str = "human";
/// A language model's opinion (`crate::model`): reported after the five and
/// before `human`, only on decisions of proposals a tenant's model profile
/// sent to a model.
pub const MODEL: &str = "model";

/// The gates, in the fixed order they run and are reported.
pub const GATES: [&str; 5] = [
    SOP,
    TARGET_STATE,
    NO_PARALLEL_OPERATION,
    ROLLBACK,
    BLAST_RADIUS,
];

/// What the review sees of a proposal's spec: every field a gate or a route
/// reads, and nothing else. [`ReviewFacts`] carries this, not the spec, so a
/// gate cannot read a field that is not here; the suppression fingerprint
/// hashes all of it (`suppression::fingerprint`), so whatever the review
/// reads, the fingerprint covers. The class is here for the routes, which
/// match on it. The spec's free text (reason, context summary, incident id,
/// labels, operator, idempotency key) is not: nothing in a review reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateSpec {
    pub action: String,
    #[serde(with = "crate::proposal::by_name::class")]
    pub class: OperationClass,
    pub target: String,
    #[serde(with = "crate::proposal::by_name::blast_radius")]
    pub blast_radius: BlastRadius,
    /// Trimmed: whitespace around a plan changes nothing a gate decides.
    pub rollback_plan: String,
    pub force_approve_no_sop: bool,
}

impl From<&ProposalSpec> for GateSpec {
    fn from(spec: &ProposalSpec) -> Self {
        // Every field is named, so a field added to the spec must be sorted
        // here: read by the gates (and so fingerprinted), or not.
        let ProposalSpec {
            action,
            class,
            target,
            parameters: _,
            reason: _,
            blast_radius,
            operator: _,
            context_summary: _,
            incident_id: _,
            labels: _,
            rollback_plan,
            force_approve_no_sop,
            idempotency_key: _,
        } = spec;
        GateSpec {
            action: action.clone(),
            class: *class,
            target: target.clone(),
            blast_radius: *blast_radius,
            rollback_plan: rollback_plan.trim().to_owned(),
            force_approve_no_sop: *force_approve_no_sop,
        }
    }
}

/// Another operation of the same tenant that might overlap this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherOperation {
    pub id: String,
    pub action: String,
    pub target: String,
    /// The `cluster` label of the other operation's target, if known.
    pub target_cluster: Option<String>,
    pub blast_radius: BlastRadius,
    pub state: ProposalState,
    pub created_at: Millis,
    /// When it was approved, for approved operations.
    pub decided_at: Option<Millis>,
}

/// Everything a review looks at, gathered before any gate runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewFacts {
    pub proposal_id: String,
    /// The gates' view of the proposal's spec (all they may read of it).
    pub spec: GateSpec,
    pub created_at: Millis,
    pub policy: TenantPolicy,
    /// The tenant's SOPs for the action (retired ones are ignored here too).
    pub sops: Vec<Sop>,
    pub target: Option<Target>,
    pub others: Vec<OtherOperation>,
    pub now: Millis,
    /// The tenant's routes (`crate::escalation`): not read by any gate, only
    /// by the step after them, which may send the proposal to people.
    pub routes: Vec<crate::escalation::Route>,
    /// The tenant's model profiles (`crate::model`), read with its routes in
    /// the same snapshot: not read by any gate, only by the model stage.
    pub model_profiles: Vec<crate::model::ModelProfile>,
    /// The tenant's whole SOP catalogue, every action's, read in the same
    /// snapshot where the tenant has a model profile (the stable prefix of
    /// the model's prompt, `crate::model::prompt`); empty where it has none.
    /// Shared by the reviews of a batch.
    pub sop_catalogue: std::sync::Arc<[Sop]>,
}

/// The gates' results and what the review cites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub gates: Vec<GateResult>,
    pub sop: Option<Sop>,
    pub rollback_path: Option<String>,
}

impl Verdict {
    /// Approve only when exactly the five gates ran, in order, and all passed,
    /// followed by nothing but, where a model reviewed it, a passed `model`
    /// gate. Anything else — a missing, extra, reordered or failed gate — is a
    /// rejection.
    pub fn approves(&self) -> bool {
        let (five, rest) = self.gates.split_at(self.gates.len().min(GATES.len()));
        five.len() == GATES.len()
            && five
                .iter()
                .zip(GATES)
                .all(|(result, name)| result.gate == name && result.passed)
            && match rest {
                [] => true,
                [model] => model.gate == MODEL && model.passed,
                _ => false,
            }
    }

    pub fn missing_gates(&self) -> Vec<String> {
        let mut missing: Vec<String> = GATES
            .iter()
            .filter(|name| !self.gates.iter().any(|g| g.gate == **name && g.passed))
            .map(|name| (*name).to_owned())
            .collect();
        if self.gates.iter().any(|g| g.gate == MODEL && !g.passed) {
            missing.push(MODEL.to_owned());
        }
        if missing.is_empty() && !self.approves() {
            missing.push(REVIEW.to_owned());
        }
        missing
    }

    /// This verdict with the model's opinion reported after the five gates.
    pub fn with_model(&self, model: GateResult) -> Verdict {
        let mut verdict = self.clone();
        verdict.gates.retain(|g| g.gate != MODEL);
        verdict.gates.push(model);
        verdict
    }
}

fn gate(gate: &str, passed: bool, detail: String) -> GateResult {
    GateResult {
        gate: gate.to_owned(),
        passed,
        detail,
    }
}

fn window_text(ms: Millis) -> String {
    humanize(Duration::from_millis(ms.max(0) as u64))
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else if secs > 0 {
        format!("{secs}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Whether `force_approve_no_sop` may stand in for a missing SOP here.
fn force_allowed(facts: &ReviewFacts) -> bool {
    facts.spec.force_approve_no_sop
        && facts.spec.blast_radius == BlastRadius::SingleDevice
        && facts.policy.allow_force_approve_no_sop
}

/// The SOPs that cover this proposal: active, same action, selector matched.
pub fn matching_sops(facts: &ReviewFacts) -> Vec<&Sop> {
    let empty = Default::default();
    let labels = facts.target.as_ref().map_or(&empty, |t| &t.labels);
    facts
        .sops
        .iter()
        .filter(|s| !s.retired && s.action == facts.spec.action && s.selects(labels))
        .collect()
}

fn sop_gate(facts: &ReviewFacts, sop: Option<&Sop>) -> GateResult {
    let spec = &facts.spec;
    if let Some(sop) = sop {
        return gate(
            SOP,
            true,
            format!(
                "{} v{} \"{}\" covers {} on {}",
                sop.id, sop.version, sop.title, spec.action, spec.target
            ),
        );
    }
    let any_for_action = facts
        .sops
        .iter()
        .any(|s| !s.retired && s.action == spec.action);
    let missing = if any_for_action {
        format!(
            "no active SOP for {} selects target {}'s labels",
            spec.action, spec.target
        )
    } else {
        format!("no SOP for action {}", spec.action)
    };
    if force_allowed(facts) {
        return gate(
            SOP,
            true,
            format!(
                "{missing}; force_approve_no_sop stands in (single_device, allowed by tenant policy)"
            ),
        );
    }
    let why_not_forced = if !spec.force_approve_no_sop {
        String::new()
    } else if spec.blast_radius != BlastRadius::SingleDevice {
        "; force_approve_no_sop applies only to single_device".to_owned()
    } else {
        "; force_approve_no_sop is not allowed for this tenant".to_owned()
    };
    gate(SOP, false, format!("{missing}{why_not_forced}"))
}

fn target_gate(facts: &ReviewFacts) -> GateResult {
    match &facts.target {
        None => gate(
            TARGET_STATE,
            false,
            format!("target {} is unknown", facts.spec.target),
        ),
        Some(t) if t.status == TargetStatus::Online => {
            gate(TARGET_STATE, true, format!("target {} is online", t.id))
        }
        Some(t) => gate(
            TARGET_STATE,
            false,
            format!("target {} is {}", t.id, t.status),
        ),
    }
}

/// Why this proposal's scope cannot be known, if it cannot: a `cluster`
/// operation reaches every target of its target's cluster, and without a
/// `cluster` label (or a known target) that set is unknown.
fn unknown_scope(facts: &ReviewFacts) -> Option<String> {
    if facts.spec.blast_radius != BlastRadius::Cluster {
        return None;
    }
    match &facts.target {
        Some(t) if t.cluster().is_some() => None,
        Some(_) => Some("target has no cluster label: the operation's scope is unknown".to_owned()),
        None => Some(format!(
            "target {} is unknown: the operation's scope is unknown",
            facts.spec.target
        )),
    }
}

/// Whether two operations' scopes share a target. A `cluster` scope whose
/// cluster is unknown (no label) may reach any target: it overlaps everything.
pub fn overlaps(facts: &ReviewFacts, other: &OtherOperation) -> bool {
    scopes_overlap(&facts.spec, facts.target.as_ref(), other)
}

/// [`overlaps`] for an operation of `spec` on `target` (as it is known now;
/// `None`: unknown): the one rule of what two operations share, for the
/// gate and for an approval re-checked at commit.
pub fn scopes_overlap(spec: &GateSpec, target: Option<&Target>, other: &OtherOperation) -> bool {
    let this_radius = spec.blast_radius;
    if this_radius == BlastRadius::TenantWide || other.blast_radius == BlastRadius::TenantWide {
        return true;
    }
    if other.target == spec.target {
        return true;
    }
    let this_cluster = target.and_then(|t| t.cluster());
    let other_cluster = other
        .target_cluster
        .as_deref()
        .filter(|c| !c.trim().is_empty());
    let this_unknown = this_radius == BlastRadius::Cluster && this_cluster.is_none();
    let other_unknown = other.blast_radius == BlastRadius::Cluster && other_cluster.is_none();
    if this_unknown || other_unknown {
        return true;
    }
    let either_cluster =
        this_radius == BlastRadius::Cluster || other.blast_radius == BlastRadius::Cluster;
    match (this_cluster, other_cluster) {
        (Some(a), Some(b)) => either_cluster && a == b,
        _ => false,
    }
}

/// Whether `other` blocks this proposal: it overlaps and is earlier and still
/// open (pending, under review or waiting for people), or was approved within
/// the window.
pub fn blocks(facts: &ReviewFacts, other: &OtherOperation) -> bool {
    if other.id == facts.proposal_id || !overlaps(facts, other) {
        return false;
    }
    match other.state {
        ProposalState::Pending | ProposalState::Reviewing | ProposalState::Escalated => {
            (other.created_at, other.id.as_str()) < (facts.created_at, facts.proposal_id.as_str())
        }
        ProposalState::Approved => other
            .decided_at
            .is_some_and(|at| at >= facts.now - facts.policy.parallel_window_ms),
        _ => false,
    }
}

fn parallel_gate(facts: &ReviewFacts) -> GateResult {
    if let Some(why) = unknown_scope(facts) {
        return gate(NO_PARALLEL_OPERATION, false, why);
    }
    let mut blocking: Vec<&OtherOperation> =
        facts.others.iter().filter(|o| blocks(facts, o)).collect();
    blocking.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    match blocking.first() {
        None => gate(
            NO_PARALLEL_OPERATION,
            true,
            format!(
                "no overlapping operation pending, under review or approved in the last {}",
                window_text(facts.policy.parallel_window_ms)
            ),
        ),
        Some(o) => gate(
            NO_PARALLEL_OPERATION,
            false,
            format!(
                "parallel operation detected: {} ({} on {}, {}, {}); wait for {} to complete",
                o.id, o.action, o.target, o.blast_radius, o.state, o.id
            ),
        ),
    }
}

fn rollback_gate(facts: &ReviewFacts, sop: Option<&Sop>) -> (GateResult, Option<String>) {
    if let Some(sop) = sop.filter(|s| !s.rollback_path.trim().is_empty()) {
        return (
            gate(
                ROLLBACK,
                true,
                format!("{} ({})", sop.rollback_path, sop.id),
            ),
            Some(sop.rollback_path.clone()),
        );
    }
    let plan = facts.spec.rollback_plan.trim();
    if !plan.is_empty() && facts.spec.blast_radius == BlastRadius::SingleDevice {
        return (
            gate(
                ROLLBACK,
                true,
                format!("{plan} (the proposal's own plan, single_device)"),
            ),
            Some(plan.to_owned()),
        );
    }
    let mut detail = match sop {
        Some(s) => format!("no rollback path known: {} has none", s.id),
        None => "no rollback path known: no SOP cited".to_owned(),
    };
    if !plan.is_empty() {
        detail.push_str("; the proposal's own rollback plan counts only for single_device");
    }
    (gate(ROLLBACK, false, detail), None)
}

fn blast_radius_gate(facts: &ReviewFacts, sop: Option<&Sop>) -> GateResult {
    let radius = facts.spec.blast_radius;
    match sop {
        Some(s) if radius.rank() <= s.max_blast_radius.rank() => gate(
            BLAST_RADIUS,
            true,
            format!("{radius} is within {}'s max {}", s.id, s.max_blast_radius),
        ),
        Some(s) => gate(
            BLAST_RADIUS,
            false,
            format!("{radius} exceeds {}'s max {}", s.id, s.max_blast_radius),
        ),
        None if force_allowed(facts) => gate(
            BLAST_RADIUS,
            true,
            "single_device under an allowed force_approve_no_sop".to_owned(),
        ),
        None => gate(
            BLAST_RADIUS,
            false,
            format!("no SOP sets a maximum blast radius for {radius}"),
        ),
    }
}

fn run_gates(facts: &ReviewFacts, sop: Option<&Sop>) -> Verdict {
    let (rollback, rollback_path) = rollback_gate(facts, sop);
    Verdict {
        gates: vec![
            sop_gate(facts, sop),
            target_gate(facts),
            parallel_gate(facts),
            rollback,
            blast_radius_gate(facts, sop),
        ],
        sop: sop.cloned(),
        rollback_path,
    }
}

/// Runs every gate. Where several SOPs match, cites the one that lets the most
/// gates pass (ties: the lowest id).
pub fn evaluate(facts: &ReviewFacts) -> Verdict {
    let mut candidates = matching_sops(facts);
    candidates.sort_by(|a, b| a.id.cmp(&b.id));
    let mut best = run_gates(facts, candidates.first().copied());
    for sop in candidates.iter().skip(1) {
        let verdict = run_gates(facts, Some(sop));
        let passes = |v: &Verdict| v.gates.iter().filter(|g| g.passed).count();
        if passes(&verdict) > passes(&best) {
            best = verdict;
        }
    }
    best
}

#[cfg(test)]
mod tests;
