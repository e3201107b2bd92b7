//! The console's pages and JSON API. Each handler finds the signed-in key
//! ([`signed`]; for a change also its CSRF token, [`changing`]) and calls
//! the API's service for it: what the service refuses, the console refuses
//! with the same message.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json,
    body::Bytes,
    extract::{ConnectInfo, Path, Query, State as Shared},
    response::{IntoResponse, Redirect, Response},
};
use countersign_domain::{Permission, Role, now_ms};
use countersign_proto::{
    OrStatus,
    v1::{
        DecisionOutcome, GetCheckpointRequest, GetProposalRequest, ListDecisionsRequest,
        ListEscalationsRequest, ListRoutesRequest, ListSopsRequest, ListTargetsRequest,
        ResolveRequest, Verdict, VerifyLogRequest, audit_service_server::AuditService,
        escalation_service_server::EscalationService, policy_service_server::PolicyService,
        proposal_service_server::ProposalService, sop_service_server::SopService,
        target_service_server::TargetService,
    },
};
use countersign_store::BreakerReset;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use tonic::Code;

use super::{
    State,
    session::{Signed, Token, cleared_cookie, is_live},
    wire::{Refused, to_json},
};
use crate::context::Caller;
use crate::layers::auth::{
    Refusal, TOO_MANY_REFUSED, UNAUTHENTICATED, client_address, principal_for_key, principal_of,
};

type Answer = Result<Response, Refused>;

const INDEX: &str = include_str!("assets/index.html");
const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

pub async fn home() -> Redirect {
    Redirect::to("/stream")
}

/// Every page is the one document; its script reads the path.
pub async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

pub async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

pub async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
        .into_response()
}

pub async fn not_found() -> Refused {
    Refused::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such page")
}

/// The signed-in caller of a request: its session cookie names a live
/// session whose key is still valid.
pub(super) async fn signed(state: &State, headers: &HeaderMap) -> Result<Signed, Refused> {
    let signed_out = |why: &'static str| {
        tracing::debug!(why, "console request refused: signed out");
        Refused::signed_out()
    };
    let token = Token::from_cookies(headers).ok_or_else(|| signed_out("no session cookie"))?;
    let session = state
        .sessions
        .find_console_session(&token.hash())
        .await
        .or_status()?
        .ok_or_else(|| signed_out("unknown session"))?;
    if !is_live(&session, now_ms()) {
        return Err(signed_out("session expired or revoked"));
    }
    let record = state
        .directory
        .api_key(&session.key_id)
        .await
        .or_status()?
        .ok_or_else(|| signed_out("unknown key"))?;
    let principal = principal_of(record).map_err(|_| signed_out("revoked key"))?;
    if principal.tenant != session.tenant {
        return Err(signed_out("key of another tenant"));
    }
    let tenant = state
        .directory
        .tenant(&principal.tenant)
        .await
        .or_status()?
        .ok_or_else(Refused::signed_out)?;
    Ok(Signed {
        principal,
        tenant,
        token,
    })
}

/// [`signed`], for a request that changes something: it must come from the
/// console's own pages (its CSRF token, and no other origin).
async fn changing(state: &State, headers: &HeaderMap) -> Result<Signed, Refused> {
    same_origin(headers)?;
    let signed = signed(state, headers).await?;
    if !signed.token.csrf_matches(headers) {
        return Err(Refused::csrf());
    }
    Ok(signed)
}

/// A request whose `Origin` names another site than its `Host` is refused
/// (browsers send `Origin` with every POST).
fn same_origin(headers: &HeaderMap) -> Result<(), Refused> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest);
    match (origin_host, host) {
        (Some(origin), Some(host)) if origin.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(Refused::new(
            StatusCode::FORBIDDEN,
            "CSRF",
            "cross-site request refused",
        )),
    }
}

/// Whether a sign-in's cookie is `Secure` (see [`super::ConsoleConfig`]).
fn secure(state: &State, headers: &HeaderMap) -> bool {
    state.config.secure_cookie
        || (state.config.trust_forwarded_proto
            && headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https")))
}

fn json_body<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, Refused> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim() == "application/json");
    if !is_json {
        return Err(Refused::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_ARGUMENT",
            "the body must be application/json",
        ));
    }
    serde_json::from_slice(body).map_err(|error| Refused::bad_request(format!("body: {error}")))
}

/// The pages a role has a use for; each call is still the service's to allow.
fn pages(role: Role) -> Vec<&'static str> {
    let mut pages = Vec::new();
    if role.allows(Permission::Watch) {
        pages.push("stream");
    }
    if matches!(role, Role::Oncall | Role::Admin) {
        pages.push("inbox");
    }
    if role.allows(Permission::Audit) {
        pages.push("decisions");
    }
    if role.allows(Permission::ManagePolicy) {
        pages.push("tenant");
    }
    pages
}

fn me_json(signed: &Signed) -> Value {
    let p = &signed.principal;
    json!({
        "tenant": p.tenant,
        "name": p.name,
        "role": p.role.as_str(),
        "agent": p.agent,
        "person": p.person,
        "csrf": signed.token.csrf(),
        "pages": pages(p.role),
    })
}

#[derive(Deserialize)]
pub struct SignIn {
    key: String,
}

/// Opens a session for an API key: the answer sets the cookie and tells the
/// page who it is; the key is not kept anywhere.
pub async fn sign_in(
    Shared(state): Shared<Arc<State>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    same_origin(&headers)?;
    let SignIn { key } = json_body(&headers, &body)?;
    let principal = match principal_for_key(&state.directory, key.trim()).await {
        Ok(principal) => principal,
        Err(Refusal::Unauthenticated(why)) => {
            tracing::debug!(%peer, why, "console sign-in refused");
            return Err(if state.refusals.allow(client_address(peer.ip())) {
                Refused::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", UNAUTHENTICATED)
            } else {
                Refused::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "RESOURCE_EXHAUSTED",
                    TOO_MANY_REFUSED,
                )
            });
        }
        Err(Refusal::StoreDown(error)) => {
            tracing::error!(%error, "credential store unavailable");
            return Err(Refused::from(tonic::Status::unavailable(
                "credential store unavailable",
            )));
        }
    };
    let tenant = state
        .directory
        .tenant(&principal.tenant)
        .await
        .or_status()?
        .ok_or_else(|| {
            Refused::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", UNAUTHENTICATED)
        })?;
    let token = Token::generate();
    state
        .sessions
        .open_console_session(token.session(&principal, now_ms(), state.config.session_ttl))
        .await
        .or_status()?;
    tracing::info!(tenant = %principal.tenant, key = %principal.key_id, "console session opened");
    let cookie = token.cookie(state.config.session_ttl, secure(&state, &headers));
    let signed = Signed {
        principal,
        tenant,
        token,
    };
    let mut response = Json(me_json(&signed)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

/// Revokes the session (every replica refuses its cookie from now on) and
/// clears the cookie.
pub async fn sign_out(Shared(state): Shared<Arc<State>>, headers: HeaderMap) -> Answer {
    let signed = changing(&state, &headers).await?;
    state
        .sessions
        .revoke_console_session(&signed.tenant.name, &signed.token.hash(), now_ms())
        .await
        .or_status()?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cleared_cookie(secure(&state, &headers)));
    Ok(response)
}

pub async fn me(Shared(state): Shared<Arc<State>>, headers: HeaderMap) -> Answer {
    let signed = signed(&state, &headers).await?;
    Ok(Json(me_json(&signed)).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Page {
    page_token: String,
}

/// A page of every open escalation (no filter: the inbox shows what the
/// caller may not vote on too, with the server's reason when it tries).
fn escalations_page(page_token: String) -> ListEscalationsRequest {
    ListEscalationsRequest {
        page_size: 100,
        page_token,
        ..Default::default()
    }
}

pub async fn escalations(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Query(page): Query<Page>,
) -> Answer {
    let signed = signed(&state, &headers).await?;
    let answer = state
        .services
        .escalations
        .list_escalations(signed.request(escalations_page(page.page_token)))
        .await?
        .into_inner();
    Ok(Json(to_json(&answer, "countersign.v1.ListEscalationsResponse")).into_response())
}

pub async fn proposal(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer {
    let signed = signed(&state, &headers).await?;
    let proposal = state
        .services
        .proposals
        .get_proposal(signed.request(GetProposalRequest { id }))
        .await?
        .into_inner();
    Ok(Json(to_json(&proposal, "countersign.v1.Proposal")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct Vote {
    verdict: String,
    #[serde(default)]
    comment: String,
}

/// Approve or deny an escalated proposal: `Resolve` as the signed-in key,
/// whose rules (four eyes among them) answer.
pub async fn resolve(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Path(proposal_id): Path<String>,
    body: Bytes,
) -> Answer {
    let signed = changing(&state, &headers).await?;
    let Vote { verdict, comment } = json_body(&headers, &body)?;
    let verdict = match verdict.as_str() {
        "approve" => Verdict::Approve,
        "reject" => Verdict::Reject,
        _ => return Err(Refused::bad_request("verdict: must be approve or reject")),
    };
    let proposal = state
        .services
        .escalations
        .resolve(signed.request(ResolveRequest {
            proposal_id,
            verdict: verdict as i32,
            comment,
        }))
        .await?
        .into_inner();
    Ok(Json(to_json(&proposal, "countersign.v1.Proposal")).into_response())
}

/// The decision log's filters, as the page's form and links send them.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct DecisionFilter {
    action: String,
    target: String,
    operator: String,
    outcome: String,
    page_token: String,
    format: String,
}

impl DecisionFilter {
    fn request(&self, page_size: u32, page_token: String) -> Result<ListDecisionsRequest, Refused> {
        let outcome = match self.outcome.as_str() {
            "" => DecisionOutcome::Unspecified,
            "approve" => DecisionOutcome::Approve,
            "reject" => DecisionOutcome::Reject,
            "timed_out" => DecisionOutcome::TimedOut,
            _ => {
                return Err(Refused::bad_request(
                    "outcome: must be approve, reject or timed_out",
                ));
            }
        };
        Ok(ListDecisionsRequest {
            action: self.action.clone(),
            target: self.target.clone(),
            operator: self.operator.clone(),
            outcome: outcome as i32,
            page_size,
            page_token,
            ..Default::default()
        })
    }
}

pub async fn decisions(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Query(filter): Query<DecisionFilter>,
) -> Answer {
    let signed = signed(&state, &headers).await?;
    let request = filter.request(50, filter.page_token.clone())?;
    let answer = state
        .services
        .audit
        .list_decisions(signed.request(request))
        .await?
        .into_inner();
    Ok(Json(to_json(&answer, "countersign.v1.ListDecisionsResponse")).into_response())
}

/// A spreadsheet cell that cannot be read as a formula.
fn cell(text: &str) -> String {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text.to_owned(),
    }
}

const CSV_COLUMNS: &[&str] = &[
    "sequence",
    "digest",
    "proposal_id",
    "decided_at",
    "outcome",
    "action",
    "target",
    "operator",
    "submitted_by",
    "blast_radius",
    "reason",
];

fn csv_row(entry: &Value) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let decision = &entry["decision"];
    [
        text(&entry["sequence"]),
        text(&entry["digest"]),
        text(&entry["proposal_id"]),
        text(&decision["decided_at"]),
        text(&decision["outcome"]),
        text(&entry["action"]),
        text(&entry["target"]),
        text(&entry["operator"]),
        text(&entry["submitted_by"]),
        text(&entry["blast_radius"]),
        text(&decision["reason"]),
    ]
    .iter()
    .map(|t| cell(t))
    .collect()
}

/// The whole filtered log as CSV or JSON Lines (one `AuditEntry` a line),
/// read page by page through `ListDecisions`.
pub async fn export(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    Query(filter): Query<DecisionFilter>,
) -> Answer {
    let signed = signed(&state, &headers).await?;
    let csv = match filter.format.as_str() {
        "csv" => true,
        "jsonl" => false,
        _ => return Err(Refused::bad_request("format: must be csv or jsonl")),
    };
    let mut entries = Vec::new();
    let mut token = String::new();
    loop {
        let answer = state
            .services
            .audit
            .list_decisions(signed.request(filter.request(1000, token)?))
            .await?
            .into_inner();
        entries.extend(
            answer
                .entries
                .iter()
                .map(|e| to_json(e, "countersign.v1.AuditEntry")),
        );
        if answer.next_page_token.is_empty() {
            break;
        }
        token = answer.next_page_token;
    }
    let (body, kind, name) = if csv {
        let mut out = csv::Writer::from_writer(Vec::new());
        let written = out.write_record(CSV_COLUMNS).and_then(|()| {
            entries
                .iter()
                .try_for_each(|e| out.write_record(csv_row(e)))
        });
        if let Err(error) = written {
            tracing::error!(%error, "writing the CSV export");
            return Err(Refused::from(tonic::Status::internal("internal error")));
        }
        let body = out
            .into_inner()
            .map_err(|_| Refused::from(tonic::Status::internal("internal error")))?;
        (body, "text/csv; charset=utf-8", "decisions.csv")
    } else {
        let mut body = Vec::new();
        for entry in &entries {
            body.extend(entry.to_string().into_bytes());
            body.push(b'\n');
        }
        (body, "application/x-ndjson", "decisions.jsonl")
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
            .expect("a fixed file name"),
    );
    Ok(response)
}

/// Verifies the tenant's log against its latest signed checkpoint (signing
/// one if there is none yet); without a signing key, the chain alone.
pub async fn verify(Shared(state): Shared<Arc<State>>, headers: HeaderMap) -> Answer {
    let signed = signed(&state, &headers).await?;
    let audit = &state.services.audit;
    let checkpoint = match audit
        .get_checkpoint(signed.request(GetCheckpointRequest { refresh: false }))
        .await
    {
        Ok(checkpoint) => Some(checkpoint.into_inner()),
        Err(status) if status.code() == Code::FailedPrecondition => None,
        Err(status) => return Err(status.into()),
    };
    let verification = audit
        .verify_log(signed.request(VerifyLogRequest {
            checkpoint: checkpoint.clone(),
        }))
        .await?
        .into_inner();
    Ok(Json(json!({
        "verification": to_json(&verification, "countersign.v1.VerifyLogResponse"),
        "checkpoint": checkpoint.map(|c| to_json(&c, "countersign.v1.Checkpoint")),
    }))
    .into_response())
}

/// The tenant at a glance (admins): queue depth (as last sampled; null
/// before the first sample), open breakers, open escalations, SOPs, targets
/// and routes, read-only.
pub async fn tenant(Shared(state): Shared<Arc<State>>, headers: HeaderMap) -> Answer {
    let signed = signed(&state, &headers).await?;
    let services = &state.services;
    let routes = services
        .policy
        .list_routes(signed.request(ListRoutesRequest {}))
        .await?
        .into_inner();
    let sops = services
        .sops
        .list_sops(signed.request(ListSopsRequest {
            include_retired: false,
            page_size: 100,
            page_token: String::new(),
        }))
        .await?
        .into_inner();
    let targets = services
        .targets
        .list_targets(signed.request(ListTargetsRequest {
            page_size: 100,
            page_token: String::new(),
        }))
        .await?
        .into_inner();
    let escalations = services
        .escalations
        .list_escalations(signed.request(escalations_page(String::new())))
        .await?
        .into_inner();
    let breakers =
        services
            .suppression
            .open_breakers(&signed.tenant.name, &signed.tenant.policy, now_ms());
    let queue = services.queue_depths.of(&signed.tenant.name).map(|q| {
        json!({
            "depth": q.depth,
            "oldest_age_ms": u64::try_from(q.oldest_age.as_millis()).unwrap_or(u64::MAX),
            "sampled_at": q.sampled_at,
        })
    });
    Ok(Json(json!({
        "tenant": signed.tenant.name,
        "queue": queue,
        "breakers": breakers,
        "open_escalations": escalations.escalations.len(),
        "more_escalations": !escalations.next_page_token.is_empty(),
        "routes": to_json(&routes, "countersign.v1.ListRoutesResponse")["routes"],
        "sops": to_json(&sops, "countersign.v1.ListSopsResponse")["sops"],
        "more_sops": !sops.next_page_token.is_empty(),
        "targets": to_json(&targets, "countersign.v1.ListTargetsResponse")["targets"],
        "more_targets": !targets.next_page_token.is_empty(),
    }))
    .into_response())
}

#[derive(Deserialize)]
pub struct BreakerOperator {
    operator: String,
}

/// Closes an operator's breaker now, as `countersign admin breaker reset`
/// does: the tenant's admins only (the role that manages its policy).
pub async fn reset_breaker(
    Shared(state): Shared<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let signed = changing(&state, &headers).await?;
    let BreakerOperator { operator } = json_body(&headers, &body)?;
    Caller::authorize(&signed.request(()), Permission::ManagePolicy)?;
    if operator.len() > 256 {
        return Err(Refused::bad_request("operator: must be at most 256 bytes"));
    }
    let tenant = signed.tenant.name.clone();
    state
        .resets
        .reset_breaker(&tenant, &operator)
        .await
        .or_status()?;
    // This process stops refusing at once; the others read the reset.
    state.services.suppression.apply_reset(&BreakerReset {
        tenant: tenant.clone(),
        operator: operator.clone(),
        reset_at: now_ms(),
    });
    tracing::info!(%tenant, %operator, key = %signed.principal.key_id, "breaker reset from the console");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_request_from_another_origin_is_refused() {
        assert!(same_origin(&headers(&[(header::HOST, "console:8080")])).is_ok());
        assert!(
            same_origin(&headers(&[
                (header::HOST, "console:8080"),
                (header::ORIGIN, "http://console:8080")
            ]))
            .is_ok()
        );
        for origin in ["http://evil.example", "http://console:8081", "null", ""] {
            let refused = same_origin(&headers(&[
                (header::HOST, "console:8080"),
                (header::ORIGIN, origin),
            ]))
            .unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{origin}");
        }
    }

    #[test]
    fn a_change_needs_a_json_body_so_a_plain_form_post_never_parses() {
        let form = headers(&[(header::CONTENT_TYPE, "application/x-www-form-urlencoded")]);
        let refused =
            json_body::<Vote>(&form, &Bytes::from_static(b"verdict=approve")).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let json = headers(&[(header::CONTENT_TYPE, "application/json; charset=utf-8")]);
        let vote: Vote =
            json_body(&json, &Bytes::from_static(br#"{"verdict":"approve"}"#)).unwrap();
        assert_eq!(
            (vote.verdict.as_str(), vote.comment.as_str()),
            ("approve", "")
        );
    }

    #[test]
    fn export_cells_never_start_a_formula() {
        for formula in ["=HYPERLINK(\"x\")", "+1", "-1", "@SUM(A1)"] {
            assert!(cell(formula).starts_with('\''), "{formula}");
        }
        assert_eq!(cell("restart nginx"), "restart nginx");
    }

    #[test]
    fn each_role_sees_the_pages_it_has_a_use_for() {
        assert_eq!(pages(Role::Coordinator), vec!["stream"]);
        assert_eq!(pages(Role::Oncall), vec!["stream", "inbox"]);
        assert_eq!(pages(Role::Auditor), vec!["decisions"]);
        assert_eq!(
            pages(Role::Admin),
            vec!["stream", "inbox", "decisions", "tenant"]
        );
    }
}
