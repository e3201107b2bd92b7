use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{route::DEFAULT_EXPIRES_AFTER_MS, *};
use crate::{
    DecisionOutcome, Millis, ProposalState, Role, ServiceError,
    error::ErrorKind,
    gates::{self, GATES, GateSpec, HUMAN, OtherOperation, ReviewFacts},
    proposal::{BlastRadius, OperationClass, ProposalSpec},
    reference::{Sop, Target, TargetStatus, TenantPolicy},
    review::ReviewStamp,
};

const NOW: Millis = 1_000_000_000;
const HOUR: Millis = 60 * 60 * 1000;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

/// The crate's spec as a destructive cluster-wide failover.
fn spec() -> ProposalSpec {
    ProposalSpec {
        action: "db_failover".into(),
        class: OperationClass::Destructive,
        target: "db-01".into(),
        parameters: Default::default(),
        reason: "primary lost".into(),
        blast_radius: BlastRadius::Cluster,
        operator: " Olga@Example.com ".into(),
        incident_id: String::new(),
        rollback_plan: String::new(),
        idempotency_key: String::new(),
        ..crate::proposal::tests::spec()
    }
}

fn input(id: &str) -> RouteInput {
    RouteInput {
        id: id.into(),
        approvals_required: 1,
        ..Default::default()
    }
}

fn route(id: &str, approvals: u32, expires_after_ms: Millis, escalate_on: &[&str]) -> Route {
    validate_route(RouteInput {
        id: id.into(),
        approvals_required: approvals,
        expires_after_ms: Some(expires_after_ms),
        escalate_on: escalate_on.iter().map(|g| (*g).to_owned()).collect(),
        ..Default::default()
    })
    .unwrap()
}

fn field(input: RouteInput) -> String {
    validate_route(input).unwrap_err().field
}

// ---- routes: validation -------------------------------------------------

#[test]
fn a_route_gets_oncall_and_admin_approvers_and_one_hour_by_default() {
    let r = validate_route(input("prod-db")).unwrap();
    assert_eq!(r.approver_roles, [Role::Oncall, Role::Admin]);
    assert_eq!(r.expires_after_ms, DEFAULT_EXPIRES_AFTER_MS);
    assert_eq!(r.expires_after_ms, HOUR);
    assert!(r.escalate_on.is_empty());
    assert_eq!(r.matcher, RouteMatch::default());
}

#[test]
fn zero_approvals_is_refused_naming_the_field() {
    let mut i = input("r");
    i.approvals_required = 0;
    let err = validate_route(i).unwrap_err();
    assert_eq!(err.field, "route.approvals_required");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn only_sop_rollback_and_blast_radius_may_escalate() {
    for never in ["target_state", "no_parallel_operation"] {
        let mut i = input("r");
        i.escalate_on = vec!["sop".into(), never.into()];
        let err = validate_route(i).unwrap_err();
        assert_eq!(err.field, "route.escalate_on");
        assert!(err.message.contains(never), "{err}");
    }
    for unknown in ["human", "review", "SOP", ""] {
        let mut i = input("r");
        i.escalate_on = vec![unknown.into()];
        assert_eq!(field(i), "route.escalate_on", "{unknown:?}");
    }
    let mut i = input("r");
    i.escalate_on = vec![
        "blast_radius".into(),
        "sop".into(),
        "rollback".into(),
        "sop".into(),
    ];
    assert_eq!(
        validate_route(i).unwrap().escalate_on,
        ["sop", "rollback", "blast_radius"],
        "in gate order, once each"
    );
}

#[test]
fn expiry_must_be_positive_and_at_most_thirty_days() {
    for bad in [0, -1, 30 * 24 * HOUR + 1] {
        let mut i = input("r");
        i.expires_after_ms = Some(bad);
        assert_eq!(field(i), "route.expires_after", "{bad}");
    }
    let mut i = input("r");
    i.expires_after_ms = Some(30 * 24 * HOUR);
    validate_route(i).unwrap();
}

#[test]
fn ids_are_identifiers_like_sop_ids() {
    for bad in ["", " ", "a b", "route/1", &"r".repeat(65)] {
        assert_eq!(field(input(bad)), "route.id", "{bad:?}");
    }
    validate_route(input("Prod_DB-2.night")).unwrap();
}

#[test]
fn approver_roles_are_role_names_and_never_auditors() {
    let mut i = input("r");
    i.approver_roles = vec!["root".into()];
    assert_eq!(field(i), "route.approver_roles");
    let mut i = input("r");
    i.approver_roles = vec!["oncall".into(), "auditor".into()];
    assert_eq!(field(i), "route.approver_roles");
    let mut i = input("r");
    i.approver_roles = vec!["admin".into(), "coordinator".into(), "admin".into()];
    assert_eq!(
        validate_route(i).unwrap().approver_roles,
        [Role::Coordinator, Role::Admin]
    );
}

#[test]
fn the_match_is_checked_field_by_field() {
    for bad in ["", "DB_*", "db failover", "db;rm", &"a".repeat(129)] {
        let mut i = input("r");
        i.matcher.actions = vec![bad.into()];
        assert_eq!(field(i), "route.match.actions", "{bad:?}");
    }
    let mut i = input("r");
    i.matcher.actions = (0..65).map(|n| format!("a{n}")).collect();
    assert_eq!(field(i), "route.match.actions");

    let mut i = input("r");
    i.matcher.classes = vec![OperationClass::Read];
    assert_eq!(field(i), "route.match.classes");

    let mut i = input("r");
    i.matcher.target_selector = (0..65).map(|n| (format!("k{n}"), "v".into())).collect();
    assert_eq!(field(i), "route.match.target_selector");

    let mut i = input("r");
    i.matcher.actions = vec!["db_*".into(), "host_?".into(), "db_*".into()];
    i.matcher.blast_radii = vec![BlastRadius::TenantWide, BlastRadius::Cluster];
    let r = validate_route(i).unwrap();
    assert_eq!(r.matcher.actions, ["db_*", "host_?"]);
    assert_eq!(
        r.matcher.blast_radii,
        [BlastRadius::Cluster, BlastRadius::TenantWide]
    );
}

// ---- routes: matching and choosing ----------------------------------------

#[test]
fn globs_match_runs_and_single_characters() {
    for (pattern, text, expected) in [
        ("*", "", true),
        ("*", "db_failover", true),
        ("db_*", "db_failover", true),
        ("db_*", "db_", true),
        ("db_*", "xdb_failover", false),
        ("*_failover", "db_failover", true),
        ("d?_failover", "db_failover", true),
        ("d?_failover", "d_failover", false),
        ("*fail*", "db_failover", true),
        ("*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", false),
        ("db_failover", "db_failover", true),
        ("db_failover", "db_failover2", false),
        ("", "", true),
        ("", "a", false),
    ] {
        assert_eq!(glob_matches(pattern, text), expected, "{pattern} ~ {text}");
    }
}

#[test]
fn an_empty_match_matches_everything_and_each_part_narrows_it() {
    let s = GateSpec::from(&spec());
    let target = labels(&[("env", "production"), ("cluster", "eu-1")]);
    let mut r = validate_route(input("r")).unwrap();
    assert!(r.matches(&s, &target));
    assert!(r.matches(&s, &BTreeMap::new()), "even an unknown target");

    r.matcher.actions = vec!["host_*".into()];
    assert!(!r.matches(&s, &target));
    r.matcher.actions.push("db_*".into());
    assert!(r.matches(&s, &target), "any glob may match");

    r.matcher.classes = vec![OperationClass::Write];
    assert!(!r.matches(&s, &target));
    r.matcher.classes = vec![OperationClass::Destructive];
    assert!(r.matches(&s, &target));

    r.matcher.blast_radii = vec![BlastRadius::SingleDevice];
    assert!(!r.matches(&s, &target));
    r.matcher.blast_radii = vec![BlastRadius::Cluster, BlastRadius::TenantWide];
    assert!(r.matches(&s, &target));

    r.matcher.target_selector = labels(&[("env", "production"), ("cluster", "us-1")]);
    assert!(
        !r.matches(&s, &target),
        "every selector label must be carried"
    );
    r.matcher.target_selector = labels(&[("env", "production")]);
    assert!(r.matches(&s, &target));
    assert!(!r.matches(&s, &BTreeMap::new()));
}

#[test]
fn the_strictest_route_has_most_approvals_then_shortest_expiry_then_lowest_id() {
    let a = route("a", 1, HOUR, &[]);
    let b = route("b", 2, 2 * HOUR, &[]);
    let c = route("c", 2, HOUR, &[]);
    let d = route("d", 2, HOUR, &[]);
    assert_eq!(strictest([&a, &b]).unwrap().id, "b");
    assert_eq!(strictest([&a, &b, &c]).unwrap().id, "c");
    assert_eq!(strictest([&d, &a, &b, &c]).unwrap().id, "c");
    assert!(strictest([]).is_none());

    let mut narrow = route("narrow", 3, HOUR, &[]);
    narrow.matcher.actions = vec!["host_*".into()];
    let routes = [a.clone(), b.clone(), narrow];
    assert_eq!(
        route_for(&routes, &GateSpec::from(&spec()), &BTreeMap::new())
            .unwrap()
            .id,
        "b",
        "only routes that match compete"
    );
    assert!(route_for(&routes[2..], &GateSpec::from(&spec()), &BTreeMap::new()).is_none());
}

// ---- after the gates ------------------------------------------------------

fn facts() -> ReviewFacts {
    ReviewFacts {
        proposal_id: "P5".into(),
        spec: GateSpec::from(&spec()),
        created_at: NOW - 1000,
        policy: TenantPolicy::default(),
        sops: vec![Sop {
            id: "SOP-009".into(),
            action: "db_failover".into(),
            title: "Fail over".into(),
            covers: "primary lost".into(),
            rollback_path: "fail back".into(),
            max_blast_radius: BlastRadius::Cluster,
            selector: BTreeMap::new(),
            version: 2,
            retired: false,
            updated_at: 0,
        }],
        target: Some(Target {
            id: "db-01".into(),
            status: TargetStatus::Online,
            labels: labels(&[("env", "production"), ("cluster", "eu-1")]),
            updated_at: 0,
        }),
        others: Vec::new(),
        now: NOW,
        routes: Vec::new(),
        model_profiles: Vec::new(),
        sop_catalogue: Vec::new().into(),
    }
}

fn no_sop() -> ReviewFacts {
    let mut f = facts();
    f.sops.clear();
    f
}

const ALL_THREE: &[&str] = &["sop", "rollback", "blast_radius"];

fn escalated_under(facts: &ReviewFacts, routes: &[Route]) -> Option<String> {
    let verdict = gates::evaluate(facts);
    match after_review(facts, &verdict, routes) {
        AfterGates::Escalate(r) => Some(r.id.clone()),
        AfterGates::Decide => None,
    }
}

#[test]
fn without_a_matching_route_the_gates_decide() {
    assert_eq!(escalated_under(&facts(), &[]), None);
    assert_eq!(escalated_under(&no_sop(), &[]), None);
    let mut elsewhere = route("hosts", 1, HOUR, ALL_THREE);
    elsewhere.matcher.actions = vec!["host_*".into()];
    assert_eq!(escalated_under(&no_sop(), &[elsewhere]), None);
}

#[test]
fn a_matching_route_escalates_a_proposal_that_passed_every_gate() {
    let verdict = gates::evaluate(&facts());
    assert!(verdict.approves());
    assert_eq!(
        escalated_under(&facts(), &[route("all", 1, HOUR, &[])]),
        Some("all".into())
    );
}

#[test]
fn escalate_on_is_read_literally() {
    // No SOP fails sop, rollback and blast_radius together.
    let missing = gates::evaluate(&no_sop()).missing_gates();
    assert_eq!(missing, ["sop", "rollback", "blast_radius"]);
    assert_eq!(
        escalated_under(&no_sop(), &[route("three", 1, HOUR, ALL_THREE)]),
        Some("three".into())
    );
    assert_eq!(
        escalated_under(&no_sop(), &[route("sop-only", 1, HOUR, &["sop"])]),
        None,
        "rollback and blast_radius also failed and are not named"
    );
    assert_eq!(
        escalated_under(
            &no_sop(),
            &[route("two", 1, HOUR, &["sop", "blast_radius"])]
        ),
        None
    );
}

#[test]
fn an_offline_target_or_a_parallel_operation_never_escalates() {
    let mut offline = no_sop();
    offline.target.as_mut().unwrap().status = TargetStatus::Offline;
    assert_eq!(
        escalated_under(&offline, &[route("three", 1, HOUR, ALL_THREE)]),
        None
    );
    let mut offline = facts();
    offline.target.as_mut().unwrap().status = TargetStatus::Offline;
    assert_eq!(
        escalated_under(&offline, &[route("three", 1, HOUR, ALL_THREE)]),
        None
    );

    // A route built without validation that names them still cannot.
    let mut lax = route("lax", 1, HOUR, ALL_THREE);
    lax.escalate_on.push("target_state".into());
    lax.escalate_on.push("no_parallel_operation".into());
    let mut offline = facts();
    offline.target.as_mut().unwrap().status = TargetStatus::Offline;
    assert_eq!(escalated_under(&offline, &[lax]), None);
}

#[test]
fn the_strictest_matching_route_applies_even_where_a_laxer_one_would_escalate() {
    let lax = route("lax", 1, HOUR, ALL_THREE);
    let strict = route("strict", 2, HOUR, &[]);
    assert_eq!(
        escalated_under(&no_sop(), &[lax.clone(), strict.clone()]),
        None,
        "the strict route sends no failed gate to people"
    );
    assert_eq!(
        escalated_under(&facts(), &[lax, strict]),
        Some("strict".into())
    );
}

#[test]
fn gates_that_are_not_exactly_the_five_never_escalate() {
    let r = route("all", 1, HOUR, ALL_THREE);
    let mut verdict = gates::evaluate(&facts());
    verdict.gates.pop();
    assert_eq!(after_gates(&verdict, Some(&r)), AfterGates::Decide);
    let mut verdict = gates::evaluate(&facts());
    verdict.gates.swap(0, 1);
    assert_eq!(after_gates(&verdict, Some(&r)), AfterGates::Decide);
    let mut verdict = gates::evaluate(&facts());
    verdict.gates[4].gate = "human".into();
    assert_eq!(after_gates(&verdict, Some(&r)), AfterGates::Decide);
}

#[test]
fn an_escalated_operation_blocks_later_overlapping_ones_like_a_pending_one() {
    let f = facts();
    let other = OtherOperation {
        id: "P1".into(),
        action: "db_failover".into(),
        target: "db-01".into(),
        target_cluster: Some("eu-1".into()),
        blast_radius: BlastRadius::Cluster,
        state: ProposalState::Escalated,
        created_at: NOW - 5000,
        decided_at: None,
    };
    assert!(gates::blocks(&f, &other));
    let mut f = f;
    f.others.push(other);
    let v = gates::evaluate(&f);
    assert!(!v.approves());
    assert_eq!(v.missing_gates(), ["no_parallel_operation"]);
}

// ---- votes ----------------------------------------------------------------

const SUBMITTER: &str = "sam@example.com";

fn escalation(required: u32) -> Escalation {
    let r = route("prod-db", required, HOUR, ALL_THREE);
    let stamp = ReviewStamp {
        reviewer: "w-1".into(),
        decided_at: NOW,
        latency_ms: 4,
    };
    Escalation::open(&r, &gates::evaluate(&no_sop()), &stamp)
}

fn person(name: &'static str) -> Caller<'static> {
    Caller {
        tenant: "acme",
        key_id: name,
        person: Some(name),
        role: Role::Oncall,
        agent: false,
    }
}

/// A proposal under escalation, changed as a store would apply each outcome.
struct Sim {
    spec: ProposalSpec,
    state: ProposalState,
    escalation: Escalation,
    votes: Vec<Vote>,
    decision: Option<crate::Decision>,
    now: Millis,
}

impl Sim {
    fn new(required: u32) -> Sim {
        Sim {
            spec: spec(),
            state: ProposalState::Escalated,
            escalation: escalation(required),
            votes: Vec::new(),
            decision: None,
            now: NOW + 1,
        }
    }

    fn subject(&self) -> Subject<'_> {
        Subject {
            id: "P5",
            tenant: "acme",
            state: self.state,
            submitter_person: Some(SUBMITTER),
            spec: &self.spec,
        }
    }

    fn cast(
        &mut self,
        caller: &Caller<'_>,
        verdict: Option<Verdict>,
        comment: &str,
    ) -> Result<Resolution, ResolveError> {
        let ballot = Ballot { verdict, comment };
        let result = resolve(
            caller,
            &self.subject(),
            Some(&self.escalation),
            &self.votes,
            &ballot,
            self.now,
        );
        match &result {
            Ok(Resolution::Recorded { vote, .. }) => self.votes.push(vote.clone()),
            Ok(Resolution::Decided { vote, decision }) => {
                self.votes.push(vote.clone());
                self.state = match decision.outcome {
                    DecisionOutcome::Approve => ProposalState::Approved,
                    _ => ProposalState::Rejected,
                };
                self.decision = Some((**decision).clone());
            }
            _ => {}
        }
        self.now += 1;
        result
    }

    fn approve(&mut self, caller: &Caller<'_>) -> Result<Resolution, ResolveError> {
        self.cast(caller, Some(Verdict::Approve), "")
    }
}

fn rule_of(result: Result<Resolution, ResolveError>) -> Rule {
    match result {
        Err(ResolveError::PermissionDenied { rule, .. }) => rule,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn persons_and_operators_compare_trimmed_and_ascii_lowercased() {
    assert!(same_person(" Sam@Example.COM\t", "sam@example.com"));
    assert!(!same_person("", ""), "a blank name is nobody's");
    assert!(!same_person("  ", " "));
    assert!(!same_person("sam@example.com", "sam@example.co"));
    assert!(
        !same_person("ÄLICE", "älice"),
        "only ASCII letters are folded"
    );
    assert_eq!(normalize_person("  Olga@Example.com "), "olga@example.com");
}

#[test]
fn each_four_eyes_rule_is_named() {
    let mut sim = Sim::new(1);
    let agent = Caller {
        agent: true,
        ..person("ann@example.com")
    };
    assert_eq!(rule_of(sim.approve(&agent)), Rule::Agent);
    let nobody = Caller {
        person: None,
        ..person("k1")
    };
    assert_eq!(rule_of(sim.approve(&nobody)), Rule::Person);
    let blank = Caller {
        person: Some("  "),
        ..person("k2")
    };
    assert_eq!(rule_of(sim.approve(&blank)), Rule::Person);
    for role in [Role::Auditor, Role::Coordinator] {
        let caller = Caller {
            role,
            ..person("ann@example.com")
        };
        assert_eq!(rule_of(sim.approve(&caller)), Rule::Role, "{role}");
    }
    assert_eq!(
        rule_of(sim.approve(&person(" SAM@example.com"))),
        Rule::Submitter
    );
    assert_eq!(
        rule_of(sim.approve(&person("olga@EXAMPLE.com "))),
        Rule::Operator
    );
    assert!(sim.votes.is_empty() && sim.state == ProposalState::Escalated);

    let admin = Caller {
        role: Role::Admin,
        ..person("ann@example.com")
    };
    assert!(matches!(
        sim.approve(&admin),
        Ok(Resolution::Decided { .. })
    ));
}

#[test]
fn the_refusal_names_its_rule_as_permission_denied() {
    let mut sim = Sim::new(1);
    let err = sim.approve(&person(SUBMITTER)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    assert!(err.public_message().contains("(submitter)"), "{err}");
}

#[test]
fn the_person_behind_an_agent_may_not_approve_what_it_submitted() {
    // An agent key's person is the person it acts for: that is the
    // proposal's submitter person.
    let mut sim = Sim::new(1);
    let owner = Caller {
        role: Role::Admin,
        ..person("sam@example.com")
    };
    assert_eq!(rule_of(sim.approve(&owner)), Rule::Submitter);
}

#[test]
fn a_route_that_names_its_roles_admits_only_them() {
    let mut sim = Sim::new(1);
    sim.escalation.approver_roles = vec![Role::Coordinator];
    let oncall = person("ann@example.com");
    assert_eq!(rule_of(sim.approve(&oncall)), Rule::Role);
    let admin = Caller {
        role: Role::Admin,
        ..oncall
    };
    assert_eq!(rule_of(sim.approve(&admin)), Rule::Role, "no admin bypass");
    let coordinator = Caller {
        role: Role::Coordinator,
        ..oncall
    };
    assert!(sim.approve(&coordinator).is_ok());
}

#[test]
fn checks_run_not_found_then_permission_then_argument_then_state() {
    let mut sim = Sim::new(1);
    let foreign_agent = Caller {
        tenant: "other",
        agent: true,
        ..person("ann@example.com")
    };
    assert_eq!(
        sim.cast(&foreign_agent, None, "").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        sim.cast(&person(SUBMITTER), None, "").unwrap_err().kind(),
        ErrorKind::PermissionDenied,
        "permission before the unset verdict"
    );
    sim.state = ProposalState::Cancelled;
    let err = sim.cast(&person("ann@example.com"), None, "").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(matches!(&err, ResolveError::InvalidArgument(f) if f.field == "verdict"));
    let err = sim.approve(&person("ann@example.com")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert!(err.to_string().contains("is cancelled"), "{err}");
}

#[test]
fn a_long_comment_is_refused_naming_the_field() {
    let mut sim = Sim::new(1);
    let long = "x".repeat(MAX_COMMENT + 1);
    let err = sim
        .cast(&person("ann@example.com"), Some(Verdict::Reject), &long)
        .unwrap_err();
    assert!(matches!(&err, ResolveError::InvalidArgument(f) if f.field == "comment"));
    assert!(sim.votes.is_empty());
}

#[test]
fn one_vote_per_person_and_a_repeat_is_answered_as_is() {
    let mut sim = Sim::new(2);
    assert!(matches!(
        sim.approve(&person("ann@example.com")),
        Ok(Resolution::Recorded {
            approvals: 1,
            required: 2,
            ..
        })
    ));
    // The same person through another key, spelled otherwise.
    let again = Caller {
        key_id: "k-other",
        person: Some(" ANN@example.com"),
        ..person("x")
    };
    assert_eq!(sim.approve(&again), Ok(Resolution::Repeat));
    let err = sim
        .cast(&again, Some(Verdict::Reject), "changed my mind")
        .unwrap_err();
    assert!(
        matches!(
            err,
            ResolveError::AlreadyVoted {
                recorded: Verdict::Approve,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(sim.votes.len(), 1);
    assert_eq!(sim.state, ProposalState::Escalated);

    assert!(matches!(
        sim.approve(&person("bob@example.com")),
        Ok(Resolution::Decided { .. })
    ));
    assert_eq!(
        sim.approve(&again),
        Ok(Resolution::Repeat),
        "even after the decision"
    );
    let err = sim.cast(&again, Some(Verdict::Reject), "").unwrap_err();
    assert!(err.to_string().contains("is approved"), "{err}");
}

#[test]
fn the_first_responder_wins_and_the_second_learns_the_outcome() {
    let mut sim = Sim::new(1);
    let Ok(Resolution::Decided { decision, vote }) = sim.approve(&person("ann@example.com")) else {
        panic!("the first approval decides");
    };
    assert_eq!(decision.outcome, DecisionOutcome::Approve);
    assert_eq!(vote.person, "ann@example.com");
    let err = sim
        .cast(&person("bob@example.com"), Some(Verdict::Reject), "no")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert!(err.to_string().contains("is approved"), "{err}");
    assert_eq!(sim.votes.len(), 1);
}

#[test]
fn an_approval_records_route_votes_and_the_human_gate_last() {
    let mut sim = Sim::new(2);
    sim.approve(&person("ann@example.com")).unwrap();
    sim.cast(
        &person("Bob@example.com"),
        Some(Verdict::Approve),
        "looks right",
    )
    .unwrap();
    let d = sim.decision.clone().unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Approve);
    assert_eq!(d.route_id.as_deref(), Some("prod-db"));
    assert_eq!(d.votes, sim.votes);
    let names: Vec<&str> = d.gates.iter().map(|g| g.gate.as_str()).collect();
    assert_eq!(names[..5], GATES);
    assert_eq!(names[5], HUMAN);
    let human = d.gates.last().unwrap();
    assert!(human.passed);
    assert_eq!(human.detail, "approved by ann@example.com, Bob@example.com");
    assert!(d.reason.contains("under route prod-db"), "{}", d.reason);
    assert!(
        d.reason.contains("sop: no SOP"),
        "names what people approved over: {}",
        d.reason
    );
    assert_eq!(d.missing_gates, ["sop", "rollback", "blast_radius"]);
    assert_eq!(d.agent_message, AGENT_HUMAN_APPROVED);
    assert!(d.summary.starts_with("Decision: approve"), "{}", d.summary);
    assert!(d.summary.contains("✓ human: approved by"), "{}", d.summary);
}

#[test]
fn one_reject_rejects_at_once_with_its_comment() {
    let mut sim = Sim::new(3);
    sim.approve(&person("ann@example.com")).unwrap();
    let Ok(Resolution::Decided { decision: d, .. }) = sim.cast(
        &person("bob@example.com"),
        Some(Verdict::Reject),
        " replica is behind ",
    ) else {
        panic!("a reject decides");
    };
    assert_eq!(d.outcome, DecisionOutcome::Reject);
    let human = d.gates.last().unwrap();
    assert_eq!(human.gate, HUMAN);
    assert!(!human.passed);
    assert_eq!(
        human.detail,
        "rejected by bob@example.com: replica is behind"
    );
    assert!(
        d.reason
            .ends_with("human: rejected by bob@example.com: replica is behind"),
        "{}",
        d.reason
    );
    assert_eq!(
        d.missing_gates,
        ["sop", "rollback", "blast_radius", "human"]
    );
    assert_eq!(d.agent_message, crate::decision::AGENT_REFUSAL);
    assert_eq!(d.votes.len(), 2);
}

#[test]
fn an_agent_sees_neither_votes_nor_comments() {
    let mut sim = Sim::new(1);
    sim.cast(
        &person("bob@example.com"),
        Some(Verdict::Reject),
        "secret-reason-xyz",
    )
    .unwrap();
    let d = sim.decision.unwrap();
    let agent = d.for_agent();
    assert!(agent.votes.is_empty());
    let json = serde_json::to_string(&agent).unwrap();
    assert!(!json.contains("secret-reason-xyz"), "{json}");
    assert!(!json.contains("bob@example.com"), "{json}");
    assert!(
        serde_json::to_string(&d)
            .unwrap()
            .contains("secret-reason-xyz")
    );
}

#[test]
fn expiry_rejects_with_the_human_gate_failed_and_counts_the_approvals() {
    let mut sim = Sim::new(2);
    sim.approve(&person("ann@example.com")).unwrap();
    let subject_votes = sim.votes.clone();
    let expires_at = sim.escalation.expires_at;
    assert_eq!(expires_at, NOW + HOUR);
    assert!(
        sim.escalation
            .conclude(&sim.subject(), &subject_votes, expires_at - 1)
            .is_none()
    );

    sim.now = expires_at;
    let err = sim.approve(&person("bob@example.com")).unwrap_err();
    assert_eq!(
        err,
        ResolveError::Expired {
            approvals: 1,
            required: 2
        }
    );
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(sim.votes.len(), 1, "a late vote is not recorded");

    let d = sim
        .escalation
        .conclude(&sim.subject(), &sim.votes, expires_at)
        .unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Reject);
    let human = d.gates.last().unwrap();
    assert_eq!((human.gate.as_str(), human.passed), (HUMAN, false));
    assert_eq!(human.detail, "expired: 1 of 2 approvals");
    assert_eq!(d.decided_at, expires_at);
}

#[test]
fn votes_cast_after_expiry_never_count() {
    let sim = Sim::new(1);
    let late = Vote {
        person: "ann@example.com".into(),
        key_id: "k".into(),
        verdict: Verdict::Approve,
        comment: String::new(),
        at: sim.escalation.expires_at,
    };
    let d = sim
        .escalation
        .conclude(&sim.subject(), &[late], sim.escalation.expires_at + 5)
        .unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Reject);
    assert_eq!(d.gates.last().unwrap().detail, "expired: 0 of 1 approvals");
}

#[test]
fn a_proposal_that_was_never_escalated_takes_no_vote() {
    let s = spec();
    for state in [
        ProposalState::Pending,
        ProposalState::Reviewing,
        ProposalState::Approved,
    ] {
        let subject = Subject {
            id: "P9",
            tenant: "acme",
            state,
            submitter_person: None,
            spec: &s,
        };
        let ballot = Ballot {
            verdict: Some(Verdict::Approve),
            comment: "",
        };
        let err = resolve(
            &person("ann@example.com"),
            &subject,
            None,
            &[],
            &ballot,
            NOW,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{state}");
        assert!(err.to_string().contains(&format!("is {state}")), "{err}");
        let auditor = Caller {
            role: Role::Auditor,
            ..person("ann@example.com")
        };
        assert_eq!(
            resolve(&auditor, &subject, None, &[], &ballot, NOW)
                .unwrap_err()
                .kind(),
            ErrorKind::PermissionDenied,
            "the default approver roles apply"
        );
    }
    let subject = Subject {
        id: "P9",
        tenant: "acme",
        state: ProposalState::Escalated,
        submitter_person: None,
        spec: &s,
    };
    let ballot = Ballot {
        verdict: Some(Verdict::Approve),
        comment: "",
    };
    let err = resolve(
        &person("ann@example.com"),
        &subject,
        None,
        &[],
        &ballot,
        NOW,
    )
    .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Internal,
        "no escalation record: never approve"
    );
}

#[test]
fn recorded_votes_of_the_submitter_or_the_operator_or_twice_by_one_person_never_count() {
    let sim = Sim::new(2);
    let by = |person: &str| Vote {
        person: person.into(),
        key_id: "k".into(),
        verdict: Verdict::Approve,
        comment: String::new(),
        at: NOW + 1,
    };
    let votes = [
        by(" Sam@example.com"),
        by("OLGA@example.com"),
        by("  "),
        by("ann@example.com"),
        by(" ANN@example.com "),
    ];
    assert!(
        sim.escalation
            .conclude(&sim.subject(), &votes, NOW + 2)
            .is_none()
    );
    let d = sim
        .escalation
        .conclude(&sim.subject(), &votes, sim.escalation.expires_at)
        .unwrap();
    assert_eq!(d.gates.last().unwrap().detail, "expired: 1 of 2 approvals");
}

#[test]
fn a_stored_zero_approvals_still_needs_a_person() {
    let mut sim = Sim::new(1);
    sim.escalation.approvals_required = 0;
    assert!(
        sim.escalation
            .conclude(&sim.subject(), &[], NOW + 1)
            .is_none()
    );
}

#[test]
fn the_waiting_reason_says_what_is_missing() {
    let mut sim = Sim::new(2);
    sim.approve(&person("ann@example.com")).unwrap();
    let reason = sim.escalation.waiting_reason(&sim.votes, &sim.subject());
    assert!(
        reason.starts_with("awaiting human approval under route prod-db: 1 of 2 approvals"),
        "{reason}"
    );
    assert!(
        reason.contains("sop: no SOP for action db_failover"),
        "{reason}"
    );
}

#[test]
fn decisions_without_people_keep_their_json_and_votes_round_trip() {
    let mut sim = Sim::new(1);
    sim.cast(&person("ann@example.com"), Some(Verdict::Approve), "ok")
        .unwrap();
    let d = sim.decision.unwrap();
    let json = serde_json::to_string(&d).unwrap();
    assert!(json.contains(r#""verdict":"approve""#), "{json}");
    assert_eq!(serde_json::from_str::<crate::Decision>(&json).unwrap(), d);

    let plain = crate::Decision {
        route_id: None,
        votes: Vec::new(),
        ..d
    };
    let json = serde_json::to_string(&plain).unwrap();
    assert!(
        !json.contains("route_id") && !json.contains("votes"),
        "{json}"
    );
    assert_eq!(
        serde_json::from_str::<crate::Decision>(&json).unwrap(),
        plain
    );
    for &v in Verdict::ALL {
        assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{v}\""));
    }
}

// ---- the inbox: what awaits whom, and the filters ------------------------

impl Sim {
    /// Whether the escalation awaits `caller`'s vote now.
    fn awaits(&self, caller: &Caller<'_>) -> bool {
        awaits(
            caller,
            &self.subject(),
            Some(&self.escalation),
            &self.votes,
            self.now,
        )
    }

    /// The proposal as a store keeps it.
    fn proposal(&self) -> crate::Proposal {
        crate::Proposal {
            id: "P5".into(),
            tenant: "acme".into(),
            state: self.state,
            submitted_by_person: Some(SUBMITTER.into()),
            spec: self.spec.clone(),
            submitted_by: "sre-bot".into(),
            created_at: NOW - 10,
            updated_at: NOW,
            decision: None,
            suppressed_retries: 0,
            cancel_reason: None,
        }
    }

    fn kept(&self, filter: InboxFilterInput<'_>) -> bool {
        validate_filter(filter)
            .unwrap()
            .keeps(&self.proposal(), &self.escalation, &self.votes)
    }
}

#[test]
fn an_escalation_awaits_only_the_people_who_may_still_vote_on_it() {
    let mut sim = Sim::new(2);
    let ann = person("ann@example.com");
    assert!(sim.awaits(&ann));
    assert!(!sim.awaits(&person(" SAM@example.com")), "the submitter");
    assert!(!sim.awaits(&person("olga@EXAMPLE.com")), "the operator");
    assert!(!sim.awaits(&Caller { agent: true, ..ann }), "an agent key");
    assert!(
        !sim.awaits(&Caller {
            person: None,
            ..ann
        }),
        "no person"
    );
    assert!(
        !sim.awaits(&Caller {
            role: Role::Auditor,
            ..ann
        }),
        "a role the route does not allow"
    );
    assert!(
        !sim.awaits(&Caller {
            tenant: "other",
            ..ann
        }),
        "another tenant's"
    );
    sim.approve(&ann).unwrap();
    assert!(!sim.awaits(&person(" Ann@example.com")), "voted already");
    assert!(sim.awaits(&person("bob@example.com")));
    sim.now = sim.escalation.expires_at;
    assert!(!sim.awaits(&person("bob@example.com")), "expired");
    sim.now = NOW + 10;
    sim.approve(&person("bob@example.com")).unwrap();
    assert_eq!(sim.state, ProposalState::Approved);
    assert!(!sim.awaits(&person("cid@example.com")), "decided");
}

#[test]
fn the_inbox_keeps_what_every_filter_set_matches() {
    let sim = Sim::new(2);
    let all = InboxFilterInput::default();
    assert!(validate_filter(all.clone()).unwrap().is_empty());
    assert!(sim.kept(all));
    let action = |action| InboxFilterInput {
        action,
        ..Default::default()
    };
    assert!(sim.kept(action("db_*")));
    assert!(sim.kept(action("db_failove?")));
    assert!(sim.kept(action("db_failover")));
    assert!(!sim.kept(action("db_fail")));
    assert!(!sim.kept(action("host_*")));
    let target = |target| InboxFilterInput {
        target,
        ..Default::default()
    };
    assert!(sim.kept(target("db-01")));
    assert!(!sim.kept(target("db-0")));
    let route_id = |route_id| InboxFilterInput {
        route_id,
        ..Default::default()
    };
    assert!(sim.kept(route_id("prod-db")));
    assert!(!sim.kept(route_id("prod")));
    let operator = |operator| InboxFilterInput {
        operator,
        ..Default::default()
    };
    assert!(sim.kept(operator("OLGA@example.com")), "as persons");
    assert!(!sim.kept(operator("ann@example.com")));
    assert!(!sim.kept(InboxFilterInput {
        action: "db_*",
        target: "elsewhere",
        ..Default::default()
    }));
    let awaiting = |caller: Caller<'_>| {
        sim.kept(InboxFilterInput {
            awaiting: Some(Awaiting {
                voter: Voter::of(&caller),
                now: sim.now,
            }),
            ..Default::default()
        })
    };
    assert!(awaiting(person("ann@example.com")));
    assert!(!awaiting(person("sam@example.com")));
}

#[test]
fn a_bad_filter_is_refused_naming_its_field() {
    let field = |input: InboxFilterInput<'_>| validate_filter(input).unwrap_err().field;
    let long = "a".repeat(129);
    for (action, target, route_id, operator, named) in [
        ("Restart*", "", "", "", "action"),
        ("db failover", "", "", "", "action"),
        (long.as_str(), "", "", "", "action"),
        ("", " ", "", "", "target"),
        ("", "db\n01", "", "", "target"),
        ("", "", "prod db", "", "route_id"),
        ("", "", "", "\t", "operator"),
        ("", "", "", "o\u{202E}lga", "operator"),
    ] {
        let input = InboxFilterInput {
            action,
            target,
            route_id,
            operator,
            awaiting: None,
        };
        assert_eq!(
            field(input),
            named,
            "{action:?} {target:?} {route_id:?} {operator:?}"
        );
    }
}

// ---- properties -----------------------------------------------------------

/// Someone who may never approve: the submitter's person or the operator in
/// any spelling, an agent key (whoever it belongs to), a key without a
/// person, or a role the route does not admit.
fn ineligible() -> impl Strategy<Value = Caller<'static>> {
    let names = prop::sample::select(vec![
        "sam@example.com",
        " SAM@example.com",
        "Sam@Example.Com\t",
        "olga@example.com",
        "  OLGA@EXAMPLE.COM",
        "ann@example.com",
        "bob@example.com",
    ]);
    (names, 0..4u8).prop_map(|(name, kind)| {
        let base = person(name);
        match kind {
            0 => Caller {
                agent: true,
                ..base
            },
            1 => Caller {
                person: None,
                ..base
            },
            2 => Caller {
                role: Role::Auditor,
                ..base
            },
            // Its name decides: only submitter and operator spellings refuse.
            _ => Caller {
                person: Some(if name.contains("ann") || name.contains("bob") {
                    "Sam@example.com"
                } else {
                    name
                }),
                ..base
            },
        }
    })
}

fn eligible() -> impl Strategy<Value = Caller<'static>> {
    prop::sample::select(vec![
        "ann@example.com",
        " Ann@Example.com",
        "bob@example.com",
        "BOB@example.com ",
        "cid@example.com",
        "dee@example.com",
        "eve@example.com",
    ])
    .prop_map(person)
}

fn verdict() -> impl Strategy<Value = Option<Verdict>> {
    prop_oneof![
        8 => Just(Some(Verdict::Approve)),
        1 => Just(Some(Verdict::Reject)),
        1 => Just(None),
    ]
}

proptest! {
    #[test]
    fn no_votes_by_the_submitter_the_operator_or_agents_ever_approve(
        required in 1..4u32,
        votes in prop::collection::vec((ineligible(), verdict()), 0..40),
    ) {
        let mut sim = Sim::new(required);
        for (caller, v) in &votes {
            let result = sim.cast(caller, *v, "");
            prop_assert!(
                matches!(result, Err(ResolveError::PermissionDenied { .. })),
                "{caller:?}: {result:?}"
            );
        }
        prop_assert!(sim.votes.is_empty());
        prop_assert_eq!(sim.state, ProposalState::Escalated);
    }

    #[test]
    fn exactly_n_distinct_approving_people_approve(
        required in 1..5u32,
        approvers in prop::collection::vec(eligible(), 1..30),
    ) {
        let mut sim = Sim::new(required);
        let mut distinct: Vec<String> = Vec::new();
        for caller in &approvers {
            let before = sim.state;
            let result = sim.approve(caller);
            let who = normalize_person(caller.person.unwrap());
            if before == ProposalState::Escalated && !distinct.contains(&who) {
                distinct.push(who);
            }
            let reached = distinct.len() >= required as usize;
            prop_assert_eq!(sim.state == ProposalState::Approved, reached, "{:?}", result);
        }
        if let Some(d) = &sim.decision {
            let human = d.gates.last().unwrap();
            prop_assert_eq!(human.detail.matches('@').count(), required as usize);
            prop_assert_eq!(d.votes.len(), required as usize);
        }
    }

    #[test]
    fn one_reject_rejects_and_nothing_changes_after_a_decision(
        required in 1..5u32,
        votes in prop::collection::vec(
            prop_oneof![eligible().prop_map(|c| (c, true)), ineligible().prop_map(|c| (c, false))]
                .prop_flat_map(|(c, ok)| verdict().prop_map(move |v| (c, ok, v))),
            1..40,
        ),
    ) {
        let mut sim = Sim::new(required);
        let mut decided: Option<(crate::Decision, usize)> = None;
        for (caller, ok, v) in &votes {
            let was_open = sim.state == ProposalState::Escalated;
            let result = sim.cast(caller, *v, "because");
            if let Some((decision, count)) = &decided {
                prop_assert!(
                    matches!(
                        result,
                        Ok(Resolution::Repeat) | Err(_)
                    ),
                    "after the decision: {:?}", result
                );
                prop_assert_eq!(sim.decision.as_ref(), Some(decision));
                prop_assert_eq!(sim.votes.len(), *count);
                prop_assert!(sim.state.is_terminal());
                continue;
            }
            if was_open && *ok && *v == Some(Verdict::Reject)
                && !matches!(result, Ok(Resolution::Repeat) | Err(ResolveError::AlreadyVoted { .. }))
            {
                prop_assert_eq!(sim.state, ProposalState::Rejected, "{:?}", result);
            }
            if let Some(d) = &sim.decision {
                decided = Some((d.clone(), sim.votes.len()));
            }
        }
    }

    #[test]
    fn an_escalation_awaits_a_caller_exactly_when_resolve_would_count_their_vote(
        required in 1..4u32,
        before in prop::collection::vec(
            prop_oneof![eligible(), ineligible()].prop_flat_map(|c| verdict().prop_map(move |v| (c, v))),
            0..8,
        ),
        caller in prop_oneof![eligible(), ineligible()],
        foreign in any::<bool>(),
        late in 0..3i64,
    ) {
        let mut sim = Sim::new(required);
        for (c, v) in &before {
            let _ = sim.cast(c, *v, "");
        }
        let caller = if foreign { Caller { tenant: "other", ..caller } } else { caller };
        sim.now = sim.escalation.expires_at - 1 + late;
        let counted = |verdict| {
            matches!(
                resolve(
                    &caller,
                    &sim.subject(),
                    Some(&sim.escalation),
                    &sim.votes,
                    &Ballot { verdict: Some(verdict), comment: "" },
                    sim.now,
                ),
                Ok(Resolution::Recorded { .. } | Resolution::Decided { .. })
            )
        };
        let both = counted(Verdict::Approve) && counted(Verdict::Reject);
        prop_assert_eq!(sim.awaits(&caller), both, "{:?}", caller);
    }

    #[test]
    fn the_strictest_route_does_not_depend_on_order(
        routes in prop::collection::vec((1..4u32, 1..4i64, 0..4usize), 1..8),
        seed in any::<u64>(),
    ) {
        let routes: Vec<Route> = routes
            .iter()
            .enumerate()
            .map(|(n, (approvals, hours, gates))| {
                route(&format!("r{}", (n * 7) % 11), *approvals, hours * HOUR, &ALL_THREE[..(*gates).min(3)])
            })
            .collect();
        let mut unique: Vec<Route> = Vec::new();
        for r in routes {
            if !unique.iter().any(|u| u.id == r.id) {
                unique.push(r);
            }
        }
        let first = strictest(&unique).unwrap().clone();
        let mut shuffled = unique.clone();
        // A deterministic shuffle from the seed.
        let mut s = seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        shuffled.reverse();
        prop_assert_eq!(strictest(&shuffled).unwrap(), &first);
        let most = unique.iter().map(|r| r.approvals_required).max().unwrap();
        prop_assert_eq!(first.approvals_required, most);
        let shortest = unique
            .iter()
            .filter(|r| r.approvals_required == most)
            .map(|r| r.expires_after_ms)
            .min()
            .unwrap();
        prop_assert_eq!(first.expires_after_ms, shortest);
    }
}
