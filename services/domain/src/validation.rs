//! The rules a proposal must meet before it is accepted. Each failure names the
//! field, so a caller can fix it; nothing is stored until all of them hold.

use crate::{
    error::{ErrorKind, ServiceError},
    proposal::{OperationClass, ProposalSpec},
};

pub const MAX_ACTION: usize = 128;
pub const MAX_TARGET: usize = 256;
pub const MAX_REASON: usize = 4 * 1024;
pub const MAX_CONTEXT_SUMMARY: usize = 16 * 1024;
pub const MAX_PARAMETERS_BYTES: usize = 64 * 1024;
pub const MAX_PARAMETERS_DEPTH: usize = 16;
pub const MAX_LABELS: usize = 64;
pub const MAX_LABEL_KEY: usize = 128;
pub const MAX_LABEL_VALUE: usize = 256;
pub const MAX_SHORT_TEXT: usize = 256;
pub const MAX_ROLLBACK_PLAN: usize = 4 * 1024;
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// One field that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl ServiceError for FieldError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

/// Characters an identifier or label may not hold: C0 and C1 controls (newlines,
/// ESC), the line and paragraph separators, and the bidirectional overrides and
/// isolates. Each of them can forge or hide a line in a log or a terminal.
fn is_forbidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// An identifier or label: one printable line.
fn printable(field: &str, value: &str) -> Result<(), FieldError> {
    match value.char_indices().find(|(_, c)| is_forbidden(*c)) {
        None => Ok(()),
        Some((at, c)) => Err(FieldError::new(
            field,
            format!(
                "must not contain control characters (U+{:04X} at byte {at})",
                u32::from(c)
            ),
        )),
    }
}

/// A required identifier: not empty, at most `max` bytes, printable.
pub(crate) fn identifier(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    required(field, value, max)?;
    printable(field, value)
}

/// An optional identifier: at most `max` bytes, printable.
fn optional_identifier(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    at_most(field, value, max)?;
    printable(field, value)
}

fn required(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    if value.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    at_most(field, value, max)
}

pub(crate) fn at_most(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    if value.len() > max {
        return Err(FieldError::new(
            field,
            format!("must be at most {max} bytes (got {})", value.len()),
        ));
    }
    Ok(())
}

/// The nesting depth of a JSON value: a scalar is 0, `{}` or `[]` is 1.
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks every rule; the first broken one is returned, naming its field.
pub fn validate_spec(spec: &ProposalSpec) -> Result<(), FieldError> {
    action_ok("spec.action", &spec.action)?;
    if spec.class == OperationClass::Read {
        return Err(FieldError::new(
            "spec.class",
            "read operations are not reviewed",
        ));
    }
    identifier("spec.target", &spec.target, MAX_TARGET)?;
    required("spec.reason", &spec.reason, MAX_REASON)?;
    at_most(
        "spec.context_summary",
        &spec.context_summary,
        MAX_CONTEXT_SUMMARY,
    )?;
    optional_identifier("spec.operator", &spec.operator, MAX_SHORT_TEXT)?;
    optional_identifier("spec.incident_id", &spec.incident_id, MAX_SHORT_TEXT)?;
    at_most("spec.rollback_plan", &spec.rollback_plan, MAX_ROLLBACK_PLAN)?;
    optional_identifier(
        "spec.idempotency_key",
        &spec.idempotency_key,
        MAX_IDEMPOTENCY_KEY,
    )?;

    let object = serde_json::Value::Object(spec.parameters.clone());
    let depth = depth(&object);
    if depth > MAX_PARAMETERS_DEPTH {
        return Err(FieldError::new(
            "spec.parameters",
            format!("nesting depth must be at most {MAX_PARAMETERS_DEPTH} (got {depth})"),
        ));
    }
    let size = serde_json::to_vec(&object)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_PARAMETERS_BYTES {
        return Err(FieldError::new(
            "spec.parameters",
            format!("must be at most {MAX_PARAMETERS_BYTES} bytes serialized (got {size})"),
        ));
    }

    labels_ok("spec.labels", &spec.labels)
}

pub(crate) fn labels_ok(
    field: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), FieldError> {
    if labels.len() > MAX_LABELS {
        return Err(FieldError::new(
            field,
            format!("at most {MAX_LABELS} labels (got {})", labels.len()),
        ));
    }
    for (key, value) in labels {
        identifier(field, key, MAX_LABEL_KEY)
            .map_err(|e| FieldError::new(field, format!("label key {}", e.message)))?;
        // A key that is not printable was refused above: it may name the field.
        optional_identifier(&format!("{field}[{key}]"), value, MAX_LABEL_VALUE)?;
    }
    Ok(())
}

fn action_ok(field: &str, action: &str) -> Result<(), FieldError> {
    required(field, action, MAX_ACTION)?;
    if !action
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'))
    {
        return Err(FieldError::new(
            field,
            "may contain only a-z, 0-9, '_', '.' and '-'",
        ));
    }
    Ok(())
}

/// SOP ids such as `SOP-007`: 1..=64 of `[A-Za-z0-9_.-]`.
pub fn validate_sop_id(field: &str, id: &str) -> Result<(), FieldError> {
    required(field, id, 64)?;
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(FieldError::new(
            field,
            "may contain only A-Z, a-z, 0-9, '_', '.' and '-'",
        ));
    }
    Ok(())
}

pub fn validate_sop(sop: &crate::reference::SopInput) -> Result<(), FieldError> {
    validate_sop_id("sop.id", &sop.id)?;
    action_ok("sop.action", &sop.action)?;
    required("sop.title", &sop.title, MAX_SHORT_TEXT)?;
    at_most("sop.covers", &sop.covers, MAX_ROLLBACK_PLAN)?;
    at_most("sop.rollback_path", &sop.rollback_path, MAX_ROLLBACK_PLAN)?;
    labels_ok("sop.selector", &sop.selector)
}

pub fn validate_target(
    id: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), FieldError> {
    identifier("target.id", id, MAX_TARGET)?;
    labels_ok("target.labels", labels)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::proposal::tests::spec;

    fn field_of(spec: &ProposalSpec) -> String {
        validate_spec(spec).unwrap_err().field
    }

    #[test]
    fn a_complete_spec_is_valid() {
        validate_spec(&spec()).unwrap();
    }

    #[test]
    fn actions_must_be_short_lowercase_names() {
        for bad in [
            "",
            "  ",
            "Restart",
            "restart service",
            "rm;rf",
            &"a".repeat(129),
        ] {
            let mut s = spec();
            s.action = bad.to_owned();
            assert_eq!(field_of(&s), "spec.action", "{bad:?}");
        }
        let mut s = spec();
        s.action = format!("{}.v2-x_y", "a".repeat(100));
        validate_spec(&s).unwrap();
    }

    #[test]
    fn read_operations_are_refused() {
        let mut s = spec();
        s.class = OperationClass::Read;
        let err = validate_spec(&s).unwrap_err();
        assert_eq!(err.field, "spec.class");
        assert!(err.message.contains("read operations are not reviewed"));
    }

    #[test]
    fn text_fields_have_limits() {
        type Setter = fn(&mut ProposalSpec, String);
        let cases: [(&str, Setter, usize); 4] = [
            ("spec.target", |s, v| s.target = v, MAX_TARGET),
            ("spec.reason", |s, v| s.reason = v, MAX_REASON),
            (
                "spec.context_summary",
                |s, v| s.context_summary = v,
                MAX_CONTEXT_SUMMARY,
            ),
            (
                "spec.rollback_plan",
                |s, v| s.rollback_plan = v,
                MAX_ROLLBACK_PLAN,
            ),
        ];
        for (field, set, max) in cases {
            let mut s = spec();
            set(&mut s, "x".repeat(max));
            validate_spec(&s).unwrap();
            set(&mut s, "x".repeat(max + 1));
            assert_eq!(field_of(&s), field);
        }
        let mut s = spec();
        s.target = String::new();
        assert_eq!(field_of(&s), "spec.target");
        let mut s = spec();
        s.reason = " ".into();
        assert_eq!(field_of(&s), "spec.reason");
    }

    #[test]
    fn parameters_are_limited_in_depth_and_size() {
        let mut nested = json!(1);
        for _ in 0..16 {
            nested = json!({ "n": nested });
        }
        let mut s = spec();
        s.parameters = nested.as_object().cloned().unwrap();
        validate_spec(&s).unwrap();
        s.parameters = json!({ "n": nested }).as_object().cloned().unwrap();
        assert_eq!(field_of(&s), "spec.parameters");

        let mut s = spec();
        s.parameters = json!({ "blob": "x".repeat(MAX_PARAMETERS_BYTES) })
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(field_of(&s), "spec.parameters");
    }

    /// Newlines, ESC (ANSI colours), C1 controls, line separators and bidi
    /// overrides: each could forge or hide a log line.
    const UNPRINTABLE: [&str; 7] = [
        "node-01\nINFO forged line",
        "node-01\r",
        "\u{1b}[31mnode-01",
        "node\u{0}01",
        "node\u{85}01",
        "node\u{2028}01",
        "node\u{202E}10",
    ];

    #[test]
    fn identifiers_and_labels_refuse_control_characters() {
        type Setter = fn(&mut ProposalSpec, String);
        let cases: [(&str, Setter); 6] = [
            ("spec.target", |s, v| s.target = v),
            ("spec.operator", |s, v| s.operator = v),
            ("spec.incident_id", |s, v| s.incident_id = v),
            ("spec.idempotency_key", |s, v| s.idempotency_key = v),
            ("spec.labels", |s, v| {
                s.labels.insert(v, "x".into());
            }),
            ("spec.labels[env]", |s, v| {
                s.labels.insert("env".into(), v);
            }),
        ];
        for (field, set) in cases {
            for bad in UNPRINTABLE {
                let mut s = spec();
                set(&mut s, bad.to_owned());
                let error = validate_spec(&s).unwrap_err();
                assert_eq!(error.field, field, "{bad:?}");
                assert!(error.message.contains("control characters"), "{error}");
            }
            let mut s = spec();
            set(&mut s, "node-01 (rack 4, ü)".to_owned());
            validate_spec(&s).unwrap();
        }
    }

    #[test]
    fn free_text_may_span_lines() {
        let mut s = spec();
        s.reason = "line one\nline two\ttabbed".into();
        s.context_summary = "a\r\nb".into();
        s.rollback_plan = "systemctl start nginx\nsystemctl status nginx".into();
        validate_spec(&s).unwrap();
    }

    #[test]
    fn targets_and_sops_refuse_control_characters_in_ids_and_labels() {
        use crate::{BlastRadius, reference::SopInput};
        let labels = |k: &str, v: &str| [(k.to_owned(), v.to_owned())].into();
        for bad in UNPRINTABLE {
            let none = Default::default();
            assert_eq!(validate_target(bad, &none).unwrap_err().field, "target.id");
            let error = validate_target("node-01", &labels(bad, "x")).unwrap_err();
            assert_eq!(error.field, "target.labels", "{bad:?}");
            let error = validate_target("node-01", &labels("env", bad)).unwrap_err();
            assert_eq!(error.field, "target.labels[env]", "{bad:?}");

            let sop = |id: &str, selector| SopInput {
                id: id.to_owned(),
                action: "host_restart_service".into(),
                title: "Restart".into(),
                covers: String::new(),
                rollback_path: String::new(),
                max_blast_radius: BlastRadius::SingleDevice,
                selector,
            };
            let error = validate_sop(&sop(bad, Default::default())).unwrap_err();
            assert_eq!(error.field, "sop.id", "{bad:?}");
            let error = validate_sop(&sop("SOP-1", labels("env", bad))).unwrap_err();
            assert_eq!(error.field, "sop.selector[env]", "{bad:?}");
            let error = validate_sop(&sop("SOP-1", labels(bad, "x"))).unwrap_err();
            assert_eq!(error.field, "sop.selector", "{bad:?}");
        }
    }

    #[test]
    fn at_most_64_labels() {
        let mut s = spec();
        s.labels = (0..64).map(|i| (format!("k{i}"), "v".into())).collect();
        validate_spec(&s).unwrap();
        s.labels.insert("one-more".into(), "v".into());
        assert_eq!(field_of(&s), "spec.labels");
    }
}
