//! The model reviewer's rows: what both backends share. A tenant's model
//! profiles are policy documents by id, kept as routes are
//! ([`PolicyDocument`], their match columns the routes'); a model review is
//! kept as JSON beside the decision (`decisions.model_json`) or the
//! escalation (`escalations.model_json`) it shaped, NULL where no model
//! reviewed the proposal.

use countersign_domain::model::{ModelProfile, ModelReview, OnUnsure};

use crate::{
    Result, StoreError,
    escalation::{match_from_row, match_params},
    policy::{Param, PolicyDocument},
    rows::Columns,
};

impl PolicyDocument for ModelProfile {
    const KIND: &'static str = "model profile";
    const TABLE: &'static str = "model_profiles";
    const PUT: &'static str = "
INSERT INTO model_profiles (tenant, id, actions_json, classes_json, blast_radii_json,
    target_selector_json, endpoint, on_unsure, calls_per_minute, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (tenant, id) DO UPDATE SET
    actions_json = excluded.actions_json, classes_json = excluded.classes_json,
    blast_radii_json = excluded.blast_radii_json,
    target_selector_json = excluded.target_selector_json, endpoint = excluded.endpoint,
    on_unsure = excluded.on_unsure, calls_per_minute = excluded.calls_per_minute,
    updated_at = excluded.updated_at
RETURNING *";

    fn id(&self) -> &str {
        &self.id
    }

    fn params(&self) -> Vec<Param> {
        let mut params = match_params(&self.matcher).to_vec();
        params.extend([
            Param::Text(self.endpoint.clone()),
            Param::Text(self.on_unsure.as_str().to_owned()),
            Param::Int(i64::from(self.calls_per_minute)),
        ]);
        params
    }

    fn from_row(row: &impl Columns) -> Result<ModelProfile> {
        let id = row.text("id")?;
        let what = |column: &str| format!("model profile {id} {column}");
        let corrupt = |column: &str, e: &dyn std::fmt::Display| {
            StoreError::Corrupt(format!("{}: {e}", what(column)))
        };
        let on_unsure: OnUnsure = row
            .text("on_unsure")?
            .parse()
            .map_err(|e| corrupt("on_unsure", &e))?;
        let calls = row.int("calls_per_minute")?;
        Ok(ModelProfile {
            matcher: match_from_row(row, what)?,
            endpoint: row.text("endpoint")?,
            on_unsure,
            calls_per_minute: u32::try_from(calls).map_err(|e| corrupt("calls_per_minute", &e))?,
            id,
        })
    }
}

/// A model review as stored: its JSON, NULL for none.
pub(crate) fn review_json(review: Option<&ModelReview>) -> Option<String> {
    review.map(|r| serde_json::to_string(r).expect("a model review serializes"))
}

/// The model review a row keeps in `model_json`; `what` names the row in an
/// error.
pub(crate) fn review_from_row(
    row: &impl Columns,
    what: impl FnOnce() -> String,
) -> Result<Option<ModelReview>> {
    row.opt_text("model_json")?
        .map(|json| serde_json::from_str(&json))
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("{} model_json: {e}", what())))
}
