//! `countersign route …`: the tenant's escalation routes (admins).

use std::time::Duration;

use anyhow::Context;
use countersign_proto::v1::{self, DeleteRouteRequest, ListRoutesRequest, PutRouteRequest};
use serde::Deserialize;
use serde_json::json;

use crate::policy::{Document, MatchFile, Policy, match_json, match_text, or_any};

/// The file form of a route: the contract's field names, enums by short
/// name, `expires_after` as a duration (`30m`, `1h`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteFile {
    id: String,
    #[serde(default, rename = "match")]
    matcher: MatchFile,
    approvals_required: u32,
    #[serde(default)]
    approver_roles: Vec<String>,
    #[serde(default)]
    expires_after: Option<String>,
    #[serde(default)]
    escalate_on: Vec<String>,
}

impl RouteFile {
    fn to_wire(&self) -> anyhow::Result<v1::Route> {
        let expires_after = self
            .expires_after
            .as_deref()
            .map(|text| {
                humantime::parse_duration(text)
                    .with_context(|| format!("expires_after `{text}` (e.g. 30m, 1h, 2h30m)"))
                    .map(wire_duration)
            })
            .transpose()?;
        Ok(v1::Route {
            id: self.id.clone(),
            r#match: Some(self.matcher.to_wire()?),
            approvals_required: self.approvals_required,
            approver_roles: self.approver_roles.clone(),
            expires_after,
            escalate_on: self.escalate_on.clone(),
        })
    }
}

fn wire_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// A wire duration for people: `30m`, `1h`.
pub fn duration_text(d: Option<&prost_types::Duration>) -> String {
    let Some(d) = d else {
        return "-".into();
    };
    let secs = u64::try_from(d.seconds).unwrap_or(0);
    humantime::format_duration(Duration::new(secs, d.nanos.max(0) as u32)).to_string()
}

fn route_json(r: &v1::Route) -> serde_json::Value {
    json!({
        "id": r.id,
        "match": match_json(r.r#match.as_ref()),
        "approvals_required": r.approvals_required,
        "approver_roles": r.approver_roles,
        "expires_after": duration_text(r.expires_after.as_ref()),
        "escalate_on": r.escalate_on,
    })
}

/// `prod-db  2 of oncall,admin within 30m  escalate_on sop  match …`.
fn route_line(r: &v1::Route) -> String {
    let escalate_on = if r.escalate_on.is_empty() {
        "-".to_owned()
    } else {
        r.escalate_on.join(",")
    };
    format!(
        "{:<20} {} of {} within {:<8} escalate_on {:<24} {}",
        r.id,
        r.approvals_required,
        or_any(r.approver_roles.clone()),
        duration_text(r.expires_after.as_ref()),
        escalate_on,
        match_text(r.r#match.as_ref()),
    )
}

#[tonic::async_trait]
impl Document for v1::Route {
    type File = RouteFile;

    fn from_file(file: RouteFile) -> anyhow::Result<v1::Route> {
        file.to_wire()
    }

    async fn put(client: &mut Policy, route: v1::Route) -> Result<v1::Route, tonic::Status> {
        let request = PutRouteRequest { route: Some(route) };
        Ok(client.put_route(request).await?.into_inner())
    }

    async fn list(client: &mut Policy) -> Result<Vec<v1::Route>, tonic::Status> {
        Ok(client
            .list_routes(ListRoutesRequest {})
            .await?
            .into_inner()
            .routes)
    }

    async fn delete(client: &mut Policy, id: String) -> Result<v1::Route, tonic::Status> {
        let request = DeleteRouteRequest { id };
        Ok(client.delete_route(request).await?.into_inner())
    }

    fn json(&self) -> serde_json::Value {
        route_json(self)
    }

    fn line(&self) -> String {
        route_line(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "
id: prod-db
match:
  actions: [\"db_*\"]
  classes: [destructive]
  blast_radii: [cluster, tenant_wide]
  target_selector:
    env: production
approvals_required: 2
approver_roles: [oncall, admin]
expires_after: 30m
escalate_on: [sop, rollback, blast_radius]
";

    #[test]
    fn a_route_file_becomes_the_wire_route() {
        let file: RouteFile = serde_yaml_ng::from_str(FILE).unwrap();
        let route = file.to_wire().unwrap();
        let m = route.r#match.as_ref().unwrap();
        assert_eq!(m.actions, ["db_*"]);
        assert_eq!(m.classes, [v1::OperationClass::Destructive as i32]);
        assert_eq!(
            m.blast_radii,
            [
                v1::BlastRadius::Cluster as i32,
                v1::BlastRadius::TenantWide as i32
            ]
        );
        assert_eq!(m.target_selector["env"], "production");
        assert_eq!(route.approvals_required, 2);
        assert_eq!(route.expires_after.unwrap().seconds, 1800);
        assert_eq!(route.escalate_on, ["sop", "rollback", "blast_radius"]);
        assert_eq!(route_json(&route)["expires_after"], "30m");
    }

    #[test]
    fn a_bare_route_file_leaves_the_defaults_to_the_server() {
        let file: RouteFile = serde_yaml_ng::from_str("id: r\napprovals_required: 1\n").unwrap();
        let route = file.to_wire().unwrap();
        assert_eq!(route.expires_after, None);
        assert!(route.approver_roles.is_empty());
        assert_eq!(route.r#match.unwrap(), v1::RouteMatch::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let unknown =
            serde_yaml_ng::from_str::<RouteFile>("id: r\napprovals_required: 1\nquorum: 2\n");
        assert!(unknown.unwrap_err().to_string().contains("quorum"));
        let class: RouteFile =
            serde_yaml_ng::from_str("id: r\napprovals_required: 1\nmatch: {classes: [huge]}\n")
                .unwrap();
        assert!(format!("{:#}", class.to_wire().unwrap_err()).contains("huge"));
        let expiry: RouteFile =
            serde_yaml_ng::from_str("id: r\napprovals_required: 1\nexpires_after: soon\n").unwrap();
        assert!(format!("{:#}", expiry.to_wire().unwrap_err()).contains("expires_after"));
    }
}
