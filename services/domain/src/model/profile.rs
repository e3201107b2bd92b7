//! A tenant's model profiles: which of the operator's configured endpoints
//! reviews which proposals (matched as routes match), what an unsure answer
//! does, and the tenant's calls per minute. A profile names an endpoint by
//! the operator's name for it; a tenant never supplies a URL.

use std::collections::BTreeMap;

use crate::{
    escalation::{RouteMatch, route::validate_match},
    gates::GateSpec,
    validation::{FieldError, validate_sop_id},
};

crate::named_enum! {
    /// What `unsure` (and every failure to get a verdict) does.
    pub enum OnUnsure as "on_unsure" {
        /// Reject the proposal (the default).
        Reject => "reject",
        /// Send it to people, where a human route matches it; else reject.
        Escalate => "escalate",
    }
}

/// A profile as an admin puts it: nothing checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelProfileInput {
    pub id: String,
    pub matcher: RouteMatch,
    pub endpoint: String,
    /// Empty means `reject`.
    pub on_unsure: String,
    /// 0 means no cap.
    pub calls_per_minute: u32,
}

/// A valid profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelProfile {
    pub id: String,
    pub matcher: RouteMatch,
    /// The name of a configured endpoint.
    pub endpoint: String,
    pub on_unsure: OnUnsure,
    /// 0 means no cap.
    pub calls_per_minute: u32,
}

/// Checks a profile against the configured endpoints' names; the first broken
/// rule is returned, naming its field.
pub fn validate_profile(
    input: ModelProfileInput,
    endpoints: &[&str],
) -> Result<ModelProfile, FieldError> {
    validate_sop_id("profile.id", &input.id)?;
    let matcher = validate_match("profile", input.matcher)?;
    if !endpoints.contains(&input.endpoint.as_str()) {
        let known = if endpoints.is_empty() {
            "this server configures no model endpoints".to_owned()
        } else {
            format!("configured: {}", endpoints.join(", "))
        };
        return Err(FieldError::new(
            "profile.endpoint",
            format!("unknown endpoint `{}` ({known})", input.endpoint),
        ));
    }
    let on_unsure = if input.on_unsure.is_empty() {
        OnUnsure::Reject
    } else {
        input.on_unsure.parse().map_err(|_| {
            FieldError::new(
                "profile.on_unsure",
                format!("must be reject or escalate (got `{}`)", input.on_unsure),
            )
        })?
    };
    Ok(ModelProfile {
        id: input.id,
        matcher,
        endpoint: input.endpoint,
        on_unsure,
        calls_per_minute: input.calls_per_minute,
    })
}

/// The profile that reviews a proposal: of those that match it, the one
/// whose `on_unsure` is strictest (reject before escalate), then the lowest
/// id. One proposal is reviewed once, by one endpoint.
pub fn profile_for<'a>(
    profiles: &'a [ModelProfile],
    spec: &GateSpec,
    target_labels: &BTreeMap<String, String>,
) -> Option<&'a ModelProfile> {
    profiles
        .iter()
        .filter(|p| p.matcher.matches(spec, target_labels))
        .min_by(|a, b| {
            let rank = |p: &ModelProfile| matches!(p.on_unsure, OnUnsure::Escalate);
            rank(a).cmp(&rank(b)).then_with(|| a.id.cmp(&b.id))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlastRadius, OperationClass};

    fn input(id: &str, endpoint: &str) -> ModelProfileInput {
        ModelProfileInput {
            id: id.into(),
            endpoint: endpoint.into(),
            ..Default::default()
        }
    }

    fn spec(action: &str) -> GateSpec {
        GateSpec {
            action: action.into(),
            class: OperationClass::Write,
            target: "db-1".into(),
            blast_radius: BlastRadius::SingleDevice,
            rollback_plan: String::new(),
            force_approve_no_sop: false,
        }
    }

    #[test]
    fn a_profile_names_a_configured_endpoint_and_defaults_to_reject() {
        let p = validate_profile(input("db", "local"), &["local"]).unwrap();
        assert_eq!(p.on_unsure, OnUnsure::Reject);
        assert_eq!(p.calls_per_minute, 0);

        let e = validate_profile(input("db", "http://169.254.169.254/"), &["local"]).unwrap_err();
        assert_eq!(e.field, "profile.endpoint");
        assert!(e.message.contains("configured: local"), "{e}");
        let e = validate_profile(input("db", "local"), &[]).unwrap_err();
        assert!(e.message.contains("configures no model endpoints"), "{e}");
    }

    #[test]
    fn each_field_is_named_in_its_error() {
        let e = validate_profile(input("", "local"), &["local"]).unwrap_err();
        assert_eq!(e.field, "profile.id");
        let mut bad = input("db", "local");
        bad.on_unsure = "approve".into();
        let e = validate_profile(bad, &["local"]).unwrap_err();
        assert_eq!(e.field, "profile.on_unsure");
        let mut bad = input("db", "local");
        bad.matcher.actions = vec!["DB_*".into()];
        let e = validate_profile(bad, &["local"]).unwrap_err();
        assert_eq!(e.field, "profile.match.actions");
        let mut bad = input("db", "local");
        bad.matcher.classes = vec![OperationClass::Read];
        let e = validate_profile(bad, &["local"]).unwrap_err();
        assert_eq!(e.field, "profile.match.classes");
    }

    #[test]
    fn of_several_matching_profiles_the_strictest_reviews() {
        let mut lenient = validate_profile(input("a-lenient", "local"), &["local"]).unwrap();
        lenient.on_unsure = OnUnsure::Escalate;
        let mut strict = validate_profile(input("z-strict", "local"), &["local"]).unwrap();
        strict.matcher.actions = vec!["db_*".into()];
        let profiles = [lenient.clone(), strict.clone()];
        let none = BTreeMap::new();
        assert_eq!(
            profile_for(&profiles, &spec("db_restart"), &none),
            Some(&strict)
        );
        assert_eq!(
            profile_for(&profiles, &spec("web_restart"), &none),
            Some(&lenient)
        );
        assert_eq!(profile_for(&[], &spec("db_restart"), &none), None);
    }
}
