//! How the CLI prints proposals, times and errors.

use std::time::{Duration, UNIX_EPOCH};

use countersign_proto::v1::{self, Proposal};

pub fn time(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

fn ts(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .map(|t| time(countersign_proto::convert::millis(t)))
        .unwrap_or_else(|| "-".into())
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The protobuf name of a code, e.g. `NOT_FOUND`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// An error as the CLI prints it: gRPC failures lead with their code.
pub fn describe_error(error: &anyhow::Error) -> String {
    if let Some(status) = error.downcast_ref::<tonic::Status>() {
        return format!("{}: {}", code_name(status.code()), status.message());
    }
    format!("{error:#}")
}

/// The short lowercase name of a wire enum, e.g. `cluster` for `BLAST_RADIUS_CLUSTER`.
pub fn enum_short<E>(name: Result<&str, E>, prefix: &str) -> String {
    name.map(|n| enum_name(n, prefix))
        .unwrap_or_else(|_| "unknown".into())
}

fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix)
        .unwrap_or(full)
        .to_ascii_lowercase()
}

pub fn state_name(state: i32) -> String {
    v1::ProposalState::try_from(state)
        .map(|s| enum_name(s.as_str_name(), "PROPOSAL_STATE_"))
        .unwrap_or_else(|_| format!("unknown({state})"))
}

/// A proposal for people.
pub fn proposal_text(p: &Proposal) -> String {
    let mut out = String::new();
    let spec = p.spec.clone().unwrap_or_default();
    let class = v1::OperationClass::try_from(spec.class)
        .map(|c| enum_name(c.as_str_name(), "OPERATION_CLASS_"))
        .unwrap_or_default();
    let radius = v1::BlastRadius::try_from(spec.blast_radius)
        .map(|c| enum_name(c.as_str_name(), "BLAST_RADIUS_"))
        .unwrap_or_default();
    out.push_str(&format!("proposal      {}\n", p.id));
    out.push_str(&format!("state         {}\n", state_name(p.state)));
    out.push_str(&format!("action        {} ({class})\n", spec.action));
    out.push_str(&format!("target        {}\n", spec.target));
    out.push_str(&format!("blast radius  {radius}\n"));
    if !spec.operator.is_empty() {
        out.push_str(&format!("operator      {}\n", spec.operator));
    }
    out.push_str(&format!("reason        {}\n", spec.reason));
    let by = if p.submitted_by_person.is_empty() {
        p.submitted_by.clone()
    } else {
        format!("{} ({})", p.submitted_by, p.submitted_by_person)
    };
    out.push_str(&format!("submitted by  {by} at {}\n", ts(&p.created_at)));
    out.push_str(&format!("updated       {}\n", ts(&p.updated_at)));
    if !p.cancel_reason.is_empty() {
        out.push_str(&format!("cancelled     {}\n", p.cancel_reason));
    }
    if let Some(d) = &p.decision {
        if p.state == v1::ProposalState::Escalated as i32 {
            out.push_str(&format!("route         {}\n", d.route_id));
        } else {
            out.push_str(&format!("decided       {}\n", ts(&d.decided_at)));
        }
        for v in &d.votes {
            let verdict = v1::Verdict::try_from(v.verdict)
                .map(|v| enum_name(v.as_str_name(), "VERDICT_"))
                .unwrap_or_default();
            out.push_str(&format!(
                "vote          {verdict} by {} at {}",
                v.person,
                ts(&v.at)
            ));
            if !v.comment.is_empty() {
                out.push_str(&format!(": {}", v.comment));
            }
            out.push('\n');
        }
        if let Some(m) = &d.model {
            out.push_str(&format!("model         {}\n", model_text(m)));
        }
        if !d.summary.is_empty() {
            out.push('\n');
            out.push_str(&d.summary);
            out.push('\n');
        } else if !d.agent_message.is_empty() {
            out.push_str(&format!("message       {}\n", d.agent_message));
        }
    }
    out
}

/// A decision's model review for people: `reject by qwen2.5-7b-instruct on
/// local (profile db-changes), 840 ms, 812 prompt tokens (768 cached), 9
/// completion`.
fn model_text(m: &v1::ModelReview) -> String {
    format!(
        "{} by {} on {} (profile {}), {} ms, {} prompt tokens ({} cached), {} completion",
        m.verdict,
        if m.model.is_empty() { "-" } else { &m.model },
        m.endpoint,
        m.profile_id,
        m.latency_ms,
        m.prompt_tokens,
        m.cached_prompt_tokens,
        m.completion_tokens
    )
}

/// A proposal for scripts: the contract's field names, enums by short name.
pub fn proposal_json(p: &Proposal) -> serde_json::Value {
    use serde_json::json;
    let spec = p.spec.clone().unwrap_or_default();
    let parameters = spec
        .parameters
        .clone()
        .map(|s| countersign_proto::convert::struct_to_json(s).unwrap_or_default())
        .unwrap_or_default();
    let decision = p.decision.as_ref().map(|d| {
        json!({
            "outcome": v1::DecisionOutcome::try_from(d.outcome)
                .map(|o| enum_name(o.as_str_name(), "DECISION_OUTCOME_"))
                .unwrap_or_default(),
            "reason": d.reason,
            "agent_message": d.agent_message,
            "sop_id": d.sop_id,
            "sop_version": d.sop_version,
            "rollback_path": d.rollback_path,
            "gates": d.gates.iter().map(|g| json!({
                "gate": g.gate, "passed": g.passed, "detail": g.detail,
            })).collect::<Vec<_>>(),
            "missing_gates": d.missing_gates,
            "reviewer": d.reviewer,
            "decided_at": ts(&d.decided_at),
            "summary": d.summary,
            "sequence": d.sequence,
            "digest": d.digest,
            "review_latency_ms": d.review_latency_ms,
            "route_id": d.route_id,
            "votes": d.votes.iter().map(crate::inbox::vote_json).collect::<Vec<_>>(),
            "model": d.model.as_ref().map(|m| json!({
                "profile_id": m.profile_id, "endpoint": m.endpoint, "model": m.model,
                "verdict": m.verdict, "latency_ms": m.latency_ms,
                "prompt_tokens": m.prompt_tokens, "completion_tokens": m.completion_tokens,
                "cached_prompt_tokens": m.cached_prompt_tokens,
            })),
            "receipt": d.receipt.as_ref().map(crate::receipt::json),
        })
    });
    json!({
        "id": p.id,
        "tenant": p.tenant,
        "state": state_name(p.state),
        "spec": {
            "action": spec.action,
            "class": v1::OperationClass::try_from(spec.class)
                .map(|c| enum_name(c.as_str_name(), "OPERATION_CLASS_")).unwrap_or_default(),
            "target": spec.target,
            "parameters": parameters,
            "reason": spec.reason,
            "blast_radius": v1::BlastRadius::try_from(spec.blast_radius)
                .map(|c| enum_name(c.as_str_name(), "BLAST_RADIUS_")).unwrap_or_default(),
            "operator": spec.operator,
            "context_summary": spec.context_summary,
            "incident_id": spec.incident_id,
            "labels": spec.labels,
            "rollback_plan": spec.rollback_plan,
            "force_approve_no_sop": spec.force_approve_no_sop,
            "idempotency_key": spec.idempotency_key,
        },
        "submitted_by": p.submitted_by,
        "submitted_by_person": p.submitted_by_person,
        "created_at": ts(&p.created_at),
        "updated_at": ts(&p.updated_at),
        "decision": decision,
        "suppressed_retries": p.suppressed_retries,
        "cancel_reason": p.cancel_reason,
    })
}

/// A CSV export's writer: RFC 4180, every field quoted (OWASP's guidance on
/// CSV injection; cells go through [`csv_cell`]).
pub fn csv_writer<W: std::io::Write>(out: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Always)
        .from_writer(out)
}

/// A cell a spreadsheet would take for a formula (it starts with `=`, `+`,
/// `-`, `@`, a tab or a carriage return) gets a leading single quote, so it
/// is shown as the text it is and never evaluated.
pub fn csv_cell(text: &str) -> std::borrow::Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}").into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_neutralised_and_every_field_quoted() {
        let mut writer = csv_writer(Vec::new());
        let cells = [
            "=HYPERLINK(\"http://x\",\"y\")",
            "+1",
            "-2+3",
            "@SUM(A1)",
            "\tcmd",
            "\r=1",
            "node-01",
            "a, \"quoted\"\nline",
            "",
        ];
        writer
            .write_record(cells.iter().map(|c| csv_cell(c).into_owned()))
            .unwrap();
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        assert!(text.starts_with("\"'=HYPERLINK(\"\"http://x\"\""), "{text}");
        let read: Vec<String> = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes())
            .records()
            .next()
            .unwrap()
            .unwrap()
            .iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            read,
            [
                "'=HYPERLINK(\"http://x\",\"y\")",
                "'+1",
                "'-2+3",
                "'@SUM(A1)",
                "'\tcmd",
                "'\r=1",
                "node-01",
                "a, \"quoted\"\nline",
                "",
            ]
        );
        assert!(
            text.contains(",\"'+1\",")
                && text.contains(",\"node-01\",")
                && text.ends_with(",\"\"\n"),
            "every field quoted: {text}"
        );
    }

    #[test]
    fn a_decisions_model_review_is_shown_to_people_and_absent_without_one() {
        let review = v1::ModelReview {
            profile_id: "db-changes".into(),
            endpoint: "local".into(),
            model: "qwen2.5-7b-instruct".into(),
            verdict: "timeout".into(),
            latency_ms: 60_000,
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_prompt_tokens: 0,
        };
        let mut proposal = Proposal {
            id: "p1".into(),
            state: v1::ProposalState::Rejected as i32,
            decision: Some(v1::Decision {
                model: Some(review),
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = proposal_text(&proposal);
        assert!(
            text.contains(
                "model         timeout by qwen2.5-7b-instruct on local (profile db-changes), \
                 60000 ms"
            ),
            "{text}"
        );
        let json = proposal_json(&proposal);
        assert_eq!(json["decision"]["model"]["verdict"], "timeout");
        assert_eq!(json["decision"]["model"]["profile_id"], "db-changes");
        proposal.decision.as_mut().unwrap().model = None;
        assert!(!proposal_text(&proposal).contains("model"));
        assert!(proposal_json(&proposal)["decision"]["model"].is_null());
    }

    #[test]
    fn passwords_in_database_urls_are_masked() {
        assert_eq!(
            redact_url("postgres://cs:hunter2@db:5432/cs"),
            "postgres://cs:***@db:5432/cs"
        );
        assert_eq!(
            redact_url("sqlite://countersign-data/countersign.db"),
            "sqlite://countersign-data/countersign.db"
        );
        assert_eq!(redact_url("postgres://cs@db/cs"), "postgres://cs@db/cs");
    }
}
