//! What `countersign route` and `countersign model-profile` share: each is a
//! tenant policy document kept by id ([`Document`]), put from a YAML file,
//! listed and deleted the same way, and each matches proposals the same way
//! ([`MatchFile`]).

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Context;
use clap::Subcommand;
use countersign_proto::v1::{self, policy_service_client::PolicyServiceClient};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::json;
use tonic::{service::interceptor::InterceptedService, transport::Channel};

use crate::{
    client::{BearerAuth, ClientArgs},
    output::enum_short,
};

pub type Policy = PolicyServiceClient<InterceptedService<Channel, BearerAuth>>;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Create or replace one from a YAML file (its form: README.md).
    Put {
        #[arg(long, short = 'f')]
        file: PathBuf,
    },
    /// The tenant's, by id.
    List,
    /// Remove one by its id; what it already shaped keeps its terms.
    Delete { id: String },
}

/// A kind of policy document, as the CLI puts and shows it.
#[tonic::async_trait]
pub trait Document: Sized + Send + 'static {
    /// Its file form.
    type File: DeserializeOwned;

    fn from_file(file: Self::File) -> anyhow::Result<Self>;
    async fn put(client: &mut Policy, doc: Self) -> Result<Self, tonic::Status>;
    async fn list(client: &mut Policy) -> Result<Vec<Self>, tonic::Status>;
    async fn delete(client: &mut Policy, id: String) -> Result<Self, tonic::Status>;
    /// For scripts (`--json`): enums by short name.
    fn json(&self) -> serde_json::Value;
    /// One line for people.
    fn line(&self) -> String;
}

/// Runs `command` on documents of kind `D`, printing each it answers with.
pub async fn run<D: Document>(conn: &ClientArgs, command: PolicyCommand) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = PolicyServiceClient::with_interceptor(channel, auth);
    let docs = match command {
        PolicyCommand::Put { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let parsed: D::File = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            let doc = D::from_file(parsed).with_context(|| format!("in {}", file.display()))?;
            vec![D::put(&mut client, doc).await?]
        }
        PolicyCommand::List => D::list(&mut client).await?,
        PolicyCommand::Delete { id } => vec![D::delete(&mut client, id).await?],
    };
    for doc in &docs {
        if conn.json {
            println!("{}", doc.json());
        } else {
            println!("{}", doc.line());
        }
    }
    Ok(())
}

/// A document's `match` in its file: the contract's field names, enums by
/// short name.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MatchFile {
    actions: Vec<String>,
    classes: Vec<String>,
    blast_radii: Vec<String>,
    target_selector: BTreeMap<String, String>,
}

impl MatchFile {
    pub fn to_wire(&self) -> anyhow::Result<v1::RouteMatch> {
        Ok(v1::RouteMatch {
            actions: self.actions.clone(),
            classes: self
                .classes
                .iter()
                .map(|c| crate::spec_input::class_value(c))
                .collect::<anyhow::Result<_>>()?,
            blast_radii: self
                .blast_radii
                .iter()
                .map(|r| crate::spec_input::blast_radius_value(r))
                .collect::<anyhow::Result<_>>()?,
            target_selector: self.target_selector.clone().into_iter().collect(),
        })
    }
}

fn classes(m: &v1::RouteMatch) -> Vec<String> {
    m.classes
        .iter()
        .map(|c| {
            enum_short(
                v1::OperationClass::try_from(*c).map(|c| c.as_str_name()),
                "OPERATION_CLASS_",
            )
        })
        .collect()
}

fn blast_radii(m: &v1::RouteMatch) -> Vec<String> {
    m.blast_radii
        .iter()
        .map(|r| {
            enum_short(
                v1::BlastRadius::try_from(*r).map(|r| r.as_str_name()),
                "BLAST_RADIUS_",
            )
        })
        .collect()
}

/// A match for scripts: enums by short name.
pub fn match_json(m: Option<&v1::RouteMatch>) -> serde_json::Value {
    let m = m.cloned().unwrap_or_default();
    json!({
        "actions": m.actions,
        "classes": classes(&m),
        "blast_radii": blast_radii(&m),
        "target_selector": m.target_selector,
    })
}

/// Items joined by commas; none is `*` (anything).
pub fn or_any(items: Vec<String>) -> String {
    if items.is_empty() {
        "*".to_owned()
    } else {
        items.join(",")
    }
}

/// `match actions=db_* classes=destructive blast_radii=* target=env=production`.
pub fn match_text(m: Option<&v1::RouteMatch>) -> String {
    let m = m.cloned().unwrap_or_default();
    let mut selector: Vec<String> = m
        .target_selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    selector.sort();
    format!(
        "match actions={} classes={} blast_radii={} target={}",
        or_any(m.actions.clone()),
        or_any(classes(&m)),
        or_any(blast_radii(&m)),
        or_any(selector),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_file_becomes_the_wire_match_and_shows_by_short_names() {
        let file: MatchFile = serde_yaml_ng::from_str(
            "actions: [\"db_*\"]\nclasses: [destructive]\nblast_radii: [cluster, tenant_wide]\n\
             target_selector: {env: production}\n",
        )
        .unwrap();
        let m = file.to_wire().unwrap();
        assert_eq!(m.classes, [v1::OperationClass::Destructive as i32]);
        assert_eq!(
            m.blast_radii,
            [
                v1::BlastRadius::Cluster as i32,
                v1::BlastRadius::TenantWide as i32
            ]
        );
        assert_eq!(
            match_text(Some(&m)),
            "match actions=db_* classes=destructive blast_radii=cluster,tenant_wide \
             target=env=production"
        );
        assert_eq!(match_json(Some(&m))["blast_radii"][1], "tenant_wide");
        assert_eq!(
            match_text(None),
            "match actions=* classes=* blast_radii=* target=*"
        );
        let unknown = serde_yaml_ng::from_str::<MatchFile>("labels: {env: production}\n");
        assert!(unknown.unwrap_err().to_string().contains("labels"));
    }
}
