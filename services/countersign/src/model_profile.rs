//! `countersign model-profile …`: the tenant's model profiles (admins): which
//! of the server's configured model endpoints reviews which proposals.

use countersign_proto::v1::{
    self, DeleteModelProfileRequest, ListModelProfilesRequest, PutModelProfileRequest,
};
use serde::Deserialize;
use serde_json::json;

use crate::{
    output::enum_short,
    policy::{Document, MatchFile, Policy, match_json, match_text},
    spec_input::wire_enum,
};

/// The file form of a model profile: the contract's field names, enums by
/// short name. `endpoint` is the name of one of the server's configured
/// endpoints (`[[model.endpoints]]`), never a URL.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    id: String,
    #[serde(default, rename = "match")]
    matcher: MatchFile,
    endpoint: String,
    /// `reject` (the default) or `escalate`.
    #[serde(default)]
    on_unsure: Option<String>,
    /// 0 (the default): no cap.
    #[serde(default)]
    calls_per_minute: u32,
}

impl ProfileFile {
    fn to_wire(&self) -> anyhow::Result<v1::ModelProfile> {
        let on_unsure = self
            .on_unsure
            .as_deref()
            .map(|name| {
                wire_enum(
                    name,
                    "ON_UNSURE_",
                    v1::OnUnsure::from_str_name,
                    ("on_unsure", "reject or escalate"),
                )
            })
            .transpose()?
            .unwrap_or_default();
        Ok(v1::ModelProfile {
            id: self.id.clone(),
            r#match: Some(self.matcher.to_wire()?),
            endpoint: self.endpoint.clone(),
            on_unsure,
            calls_per_minute: self.calls_per_minute,
        })
    }
}

fn on_unsure(p: &v1::ModelProfile) -> String {
    enum_short(
        v1::OnUnsure::try_from(p.on_unsure).map(|o| o.as_str_name()),
        "ON_UNSURE_",
    )
}

/// Calls per minute for people: `30/min`, or `no cap`.
fn cap(p: &v1::ModelProfile) -> String {
    match p.calls_per_minute {
        0 => "no cap".to_owned(),
        n => format!("{n}/min"),
    }
}

#[tonic::async_trait]
impl Document for v1::ModelProfile {
    type File = ProfileFile;

    fn from_file(file: ProfileFile) -> anyhow::Result<v1::ModelProfile> {
        file.to_wire()
    }

    async fn put(
        client: &mut Policy,
        profile: v1::ModelProfile,
    ) -> Result<v1::ModelProfile, tonic::Status> {
        let request = PutModelProfileRequest {
            profile: Some(profile),
        };
        Ok(client.put_model_profile(request).await?.into_inner())
    }

    async fn list(client: &mut Policy) -> Result<Vec<v1::ModelProfile>, tonic::Status> {
        Ok(client
            .list_model_profiles(ListModelProfilesRequest {})
            .await?
            .into_inner()
            .profiles)
    }

    async fn delete(client: &mut Policy, id: String) -> Result<v1::ModelProfile, tonic::Status> {
        let request = DeleteModelProfileRequest { id };
        Ok(client.delete_model_profile(request).await?.into_inner())
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "id": self.id,
            "match": match_json(self.r#match.as_ref()),
            "endpoint": self.endpoint,
            "on_unsure": on_unsure(self),
            "calls_per_minute": self.calls_per_minute,
        })
    }

    /// `db-changes  on local  unsure: escalate  30/min  match …`.
    fn line(&self) -> String {
        format!(
            "{:<20} on {:<12} unsure: {:<8} {:<8} {}",
            self.id,
            self.endpoint,
            on_unsure(self),
            cap(self),
            match_text(self.r#match.as_ref()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "
id: db-changes
match:
  actions: [\"db_*\"]
  classes: [destructive]
  target_selector:
    env: production
endpoint: local
on_unsure: escalate
calls_per_minute: 30
";

    #[test]
    fn a_profile_file_becomes_the_wire_profile() {
        let file: ProfileFile = serde_yaml_ng::from_str(FILE).unwrap();
        let profile = v1::ModelProfile::from_file(file).unwrap();
        assert_eq!(profile.endpoint, "local");
        assert_eq!(profile.on_unsure, v1::OnUnsure::Escalate as i32);
        assert_eq!(profile.calls_per_minute, 30);
        let m = profile.r#match.as_ref().unwrap();
        assert_eq!(m.actions, ["db_*"]);
        assert_eq!(m.classes, [v1::OperationClass::Destructive as i32]);
        assert_eq!(profile.json()["on_unsure"], "escalate");
        assert!(
            profile.line().contains("on local")
                && profile.line().contains("unsure: escalate")
                && profile.line().contains("30/min"),
            "{}",
            profile.line()
        );
    }

    #[test]
    fn a_bare_profile_file_leaves_the_defaults_to_the_server() {
        let file: ProfileFile = serde_yaml_ng::from_str("id: all\nendpoint: local\n").unwrap();
        let profile = v1::ModelProfile::from_file(file).unwrap();
        assert_eq!(profile.on_unsure, v1::OnUnsure::Unspecified as i32);
        assert_eq!(profile.calls_per_minute, 0);
        assert_eq!(profile.r#match.unwrap(), v1::RouteMatch::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let url = serde_yaml_ng::from_str::<ProfileFile>(
            "id: p\nendpoint: local\nbase_url: http://10.0.0.1\n",
        );
        assert!(url.unwrap_err().to_string().contains("base_url"));
        let missing = serde_yaml_ng::from_str::<ProfileFile>("id: p\n");
        assert!(missing.unwrap_err().to_string().contains("endpoint"));
        let unsure: ProfileFile =
            serde_yaml_ng::from_str("id: p\nendpoint: local\non_unsure: approve\n").unwrap();
        let error = format!("{:#}", v1::ModelProfile::from_file(unsure).unwrap_err());
        assert!(error.contains("on_unsure `approve`"), "{error}");
    }
}
