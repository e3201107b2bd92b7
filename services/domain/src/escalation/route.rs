//! Routes: tenant policy naming which proposals wait for people, how many
//! distinct people must approve, who may, and for how long.

use std::{cmp::Ordering, collections::BTreeMap};

use crate::{
    Millis,
    gates::GateSpec,
    gates::{BLAST_RADIUS, GATES, NO_PARALLEL_OPERATION, ROLLBACK, SOP, TARGET_STATE},
    proposal::{BlastRadius, OperationClass},
    role::Role,
    validation::{FieldError, MAX_ACTION, labels_ok, validate_sop_id},
};

/// How long an escalation stays open when the route does not say.
pub const DEFAULT_EXPIRES_AFTER_MS: Millis = 60 * 60 * 1000;
/// The longest an escalation may stay open.
pub const MAX_EXPIRES_AFTER_MS: Millis = 30 * 24 * 60 * 60 * 1000;
/// Who may approve when the route does not say.
pub const DEFAULT_APPROVER_ROLES: [Role; 2] = [Role::Oncall, Role::Admin];
/// The gates whose failure a route may send to people instead of rejecting.
/// A target that is not online, or an overlapping operation, is a fact no
/// approval changes: those gates always reject.
pub const ESCALATABLE_GATES: [&str; 3] = [SOP, ROLLBACK, BLAST_RADIUS];
/// At most this many action globs in a route's match.
pub const MAX_ACTION_GLOBS: usize = 64;

/// Which proposals a route applies to. Every part must match; an empty list
/// or selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteMatch {
    /// Action globs: `*` stands for any run of characters, `?` for one.
    pub actions: Vec<String>,
    pub classes: Vec<OperationClass>,
    pub blast_radii: Vec<BlastRadius>,
    /// Labels the target must carry.
    pub target_selector: BTreeMap<String, String>,
}

impl RouteMatch {
    /// Whether a proposal with `spec`, on a target carrying `target_labels`
    /// (none for an unknown target), is matched.
    pub fn matches(&self, spec: &GateSpec, target_labels: &BTreeMap<String, String>) -> bool {
        (self.actions.is_empty() || self.actions.iter().any(|g| glob_matches(g, &spec.action)))
            && (self.classes.is_empty() || self.classes.contains(&spec.class))
            && (self.blast_radii.is_empty() || self.blast_radii.contains(&spec.blast_radius))
            && self
                .target_selector
                .iter()
                .all(|(k, v)| target_labels.get(k) == Some(v))
    }
}

/// A route as an admin puts it: defaults not yet applied, nothing checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteInput {
    pub id: String,
    pub matcher: RouteMatch,
    pub approvals_required: u32,
    /// Role names; empty means [`DEFAULT_APPROVER_ROLES`].
    pub approver_roles: Vec<String>,
    /// `None` means [`DEFAULT_EXPIRES_AFTER_MS`].
    pub expires_after_ms: Option<Millis>,
    pub escalate_on: Vec<String>,
}

/// A valid route, defaults applied. Lists hold no duplicates and are in a
/// fixed order (roles as [`Role::ALL`], gates as [`GATES`]), so two puts of
/// the same route are equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub id: String,
    pub matcher: RouteMatch,
    /// Distinct people who must approve; at least 1.
    pub approvals_required: u32,
    pub approver_roles: Vec<Role>,
    pub expires_after_ms: Millis,
    /// Gate names from [`ESCALATABLE_GATES`].
    pub escalate_on: Vec<String>,
}

impl Route {
    pub fn matches(&self, spec: &GateSpec, target_labels: &BTreeMap<String, String>) -> bool {
        self.matcher.matches(spec, target_labels)
    }

    /// Whether a failure of `gate` is sent to people under this route.
    pub fn escalates(&self, gate: &str) -> bool {
        ESCALATABLE_GATES.contains(&gate) && self.escalate_on.iter().any(|g| g == gate)
    }
}

/// Checks every rule of a route and applies its defaults; the first broken
/// rule is returned, naming its field.
pub fn validate_route(input: RouteInput) -> Result<Route, FieldError> {
    validate_sop_id("route.id", &input.id)?;
    let matcher = validate_match("route", input.matcher)?;
    if input.approvals_required == 0 {
        return Err(FieldError::new(
            "route.approvals_required",
            "must be at least 1",
        ));
    }
    let approver_roles = approver_roles(&input.approver_roles)?;
    let expires_after_ms = match input.expires_after_ms {
        None => DEFAULT_EXPIRES_AFTER_MS,
        Some(ms) if ms <= 0 => {
            return Err(FieldError::new("route.expires_after", "must be positive"));
        }
        Some(ms) if ms > MAX_EXPIRES_AFTER_MS => {
            return Err(FieldError::new(
                "route.expires_after",
                "must be at most 30 days",
            ));
        }
        Some(ms) => ms,
    };
    let escalate_on = escalate_on(&input.escalate_on)?;
    Ok(Route {
        id: input.id,
        matcher,
        approvals_required: input.approvals_required,
        approver_roles,
        expires_after_ms,
        escalate_on,
    })
}

/// Checks a match (of a route or a model profile, named by `owner` in the
/// field of an error) and puts its lists in their fixed order.
pub(crate) fn validate_match(owner: &str, m: RouteMatch) -> Result<RouteMatch, FieldError> {
    let field = format!("{owner}.match.actions");
    if m.actions.len() > MAX_ACTION_GLOBS {
        return Err(FieldError::new(
            &field,
            format!("at most {MAX_ACTION_GLOBS} (got {})", m.actions.len()),
        ));
    }
    let mut actions: Vec<String> = Vec::with_capacity(m.actions.len());
    for glob in m.actions {
        action_glob_ok(&field, &glob, "each")?;
        if !actions.contains(&glob) {
            actions.push(glob);
        }
    }
    if m.classes.contains(&OperationClass::Read) {
        return Err(FieldError::new(
            format!("{owner}.match.classes"),
            "read operations are never submitted, so never routed",
        ));
    }
    labels_ok(
        &format!("{owner}.match.target_selector"),
        &m.target_selector,
    )?;
    let mut classes = m.classes;
    classes.sort_by_key(|c| OperationClass::ALL.iter().position(|x| x == c));
    classes.dedup();
    let mut blast_radii = m.blast_radii;
    blast_radii.sort_by_key(|r| r.rank());
    blast_radii.dedup();
    Ok(RouteMatch {
        actions,
        classes,
        blast_radii,
        target_selector: m.target_selector,
    })
}

/// An action glob (`field`; `which` says which of them in an error: "each"
/// of a list, "it" alone): 1 to [`MAX_ACTION`] bytes of an action's
/// characters and the wildcards `*` and `?`.
pub(crate) fn action_glob_ok(field: &str, glob: &str, which: &str) -> Result<(), FieldError> {
    if glob.is_empty() || glob.len() > MAX_ACTION {
        return Err(FieldError::new(
            field,
            format!(
                "{which} must be 1 to {MAX_ACTION} bytes (got {})",
                glob.len()
            ),
        ));
    }
    if !glob
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'*' | b'?'))
    {
        return Err(FieldError::new(
            field,
            format!(
                "`{glob}` may contain only a-z, 0-9, '_', '.', '-' and the wildcards '*' and '?'"
            ),
        ));
    }
    Ok(())
}

fn approver_roles(names: &[String]) -> Result<Vec<Role>, FieldError> {
    const FIELD: &str = "route.approver_roles";
    if names.is_empty() {
        return Ok(DEFAULT_APPROVER_ROLES.to_vec());
    }
    let mut roles = Vec::new();
    for name in names {
        let role: Role = name
            .parse()
            .map_err(|_| FieldError::new(FIELD, format!("unknown role `{name}`")))?;
        if role == Role::Auditor {
            return Err(FieldError::new(
                FIELD,
                "auditors keep the record and take no part in decisions",
            ));
        }
        roles.push(role);
    }
    roles.sort_by_key(|r| Role::ALL.iter().position(|x| x == r));
    roles.dedup();
    Ok(roles)
}

fn escalate_on(names: &[String]) -> Result<Vec<String>, FieldError> {
    const FIELD: &str = "route.escalate_on";
    for name in names {
        if name == TARGET_STATE || name == NO_PARALLEL_OPERATION {
            return Err(FieldError::new(
                FIELD,
                format!("`{name}` never escalates: only sop, rollback and blast_radius may"),
            ));
        }
        if !ESCALATABLE_GATES.contains(&name.as_str()) {
            return Err(FieldError::new(
                FIELD,
                format!("unknown gate `{name}`: only sop, rollback and blast_radius may escalate"),
            ));
        }
    }
    Ok(GATES
        .iter()
        .filter(|g| names.iter().any(|n| n == *g))
        .map(|g| (*g).to_owned())
        .collect())
}

/// Whether `text` matches `pattern`, where `*` stands for any run of
/// characters (also none) and `?` for exactly one. It backtracks only to the
/// last `*`, so no pattern takes more than about `pattern × text` steps.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it is currently matched up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Orders routes strictest first: most approvals, then shortest expiry, then
/// the fewest gates escalated, the fewest approver roles, the lowest id, and
/// (for equal ids) the gates and roles themselves. Routes equal under it
/// differ at most in what they match, which no longer matters once both
/// matched.
pub fn strictness(a: &Route, b: &Route) -> Ordering {
    b.approvals_required
        .cmp(&a.approvals_required)
        .then(a.expires_after_ms.cmp(&b.expires_after_ms))
        .then(a.escalate_on.len().cmp(&b.escalate_on.len()))
        .then(a.approver_roles.len().cmp(&b.approver_roles.len()))
        .then_with(|| a.id.cmp(&b.id))
        .then_with(|| a.escalate_on.cmp(&b.escalate_on))
        .then_with(|| {
            let names = |r: &Route| {
                r.approver_roles
                    .iter()
                    .map(|x| x.as_str())
                    .collect::<Vec<_>>()
            };
            names(a).cmp(&names(b))
        })
}

/// The strictest of `routes` ([`strictness`]), whatever their order.
pub fn strictest<'a>(routes: impl IntoIterator<Item = &'a Route>) -> Option<&'a Route> {
    routes.into_iter().min_by(|a, b| strictness(a, b))
}

/// The route that applies to a proposal: the strictest of those that match it.
pub fn route_for<'a>(
    routes: &'a [Route],
    spec: &GateSpec,
    target_labels: &BTreeMap<String, String>,
) -> Option<&'a Route> {
    strictest(routes.iter().filter(|r| r.matches(spec, target_labels)))
}
