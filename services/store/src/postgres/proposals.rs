use async_trait::async_trait;
use countersign_domain::{Proposal, ProposalSpec, ProposalState};
use sqlx::PgConnection;

use super::{PostgresStore, review, scope};
use crate::types::Submission;
use crate::{NewProposal, Proposals, Result, StoreError, StoreEvent, SubmitOutcome, now_ms};

use crate::rows::proposal_from_row;

/// A proposal by its key (every `GetProposal` and `AwaitDecision`). The
/// tenant is compared by `IS NOT DISTINCT FROM`, no index condition: a key
/// read is the primary key's, whatever the statistics say of the tenant (a
/// young table, or a tenant they do not know yet, made `tenant = $1` look
/// like a range of one row; test: postgres_plans).
#[doc(hidden)]
pub const BY_KEY: &str = "SELECT * FROM proposals WHERE id = $2 AND tenant IS NOT DISTINCT FROM $1";

/// One proposal of one tenant, with its decision once it has one; the
/// transaction must be in the tenant's scope.
pub async fn fetch(conn: &mut PgConnection, tenant: &str, id: &str) -> Result<Option<Proposal>> {
    let row = sqlx::query(BY_KEY)
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let mut proposal = proposal_from_row(&row)?;
    if proposal.state.is_terminal() {
        proposal.decision = review::decision_of(conn, tenant, id).await?;
    }
    Ok(Some(proposal))
}

/// What a new proposal's row holds beyond its spec.
pub struct NewRow {
    pub id: String,
    pub spec_json: String,
    pub digest: String,
    pub key: Option<String>,
}

impl NewRow {
    pub fn of(new: &NewProposal) -> NewRow {
        NewRow {
            id: new.id.clone(),
            spec_json: new.spec.canonical_json(),
            digest: new.spec.digest(),
            key: (!new.spec.idempotency_key.is_empty()).then(|| new.spec.idempotency_key.clone()),
        }
    }
}

/// The answer to a submission whose idempotency key was taken: the same spec
/// is the same proposal, another spec a conflict.
pub async fn earlier(
    conn: &mut PgConnection,
    new: &NewProposal,
    row: &NewRow,
) -> Result<(SubmitOutcome, Option<StoreEvent>)> {
    let key = row.key.clone().unwrap_or_default();
    let (earlier_id, earlier_digest): (String, String) = sqlx::query_as(
        "SELECT id, spec_digest FROM proposals WHERE tenant = $1 AND idempotency_key = $2",
    )
    .bind(&new.tenant)
    .bind(&key)
    .fetch_one(&mut *conn)
    .await?;
    crate::types::same_spec_as_earlier(&key, &earlier_id, &earlier_digest, &row.digest)?;
    let proposal = fetch(conn, &new.tenant, &earlier_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("proposal {earlier_id} vanished")))?;
    Ok((SubmitOutcome::Deduplicated(proposal), None))
}

/// Takes `tenant`'s submissions' lock until the transaction ends: a tenant's
/// submissions commit one transaction at a time across every replica (see
/// `group_commit`). Taken after the tenant's scope and before any row lock;
/// the event log's lock, taken at commit, stays every transaction's last.
pub async fn lock_submissions(conn: &mut PgConnection, tenant: &str) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(73102915, hashtext($1))")
        .bind(tenant)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

#[async_trait]
impl Proposals for PostgresStore {
    #[tracing::instrument(name = "store.postgres.get_proposal", skip(self))]
    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let proposal = fetch(&mut tx, tenant, id).await?;
        tx.commit().await?;
        Ok(proposal)
    }

    /// The earlier proposal holding `spec`'s idempotency key (see
    /// `Store::find_idempotent`).
    #[tracing::instrument(name = "store.postgres.find_idempotent", skip(self, spec))]
    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>> {
        if spec.idempotency_key.is_empty() {
            return Ok(None);
        }
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let earlier: Option<(String, String)> = sqlx::query_as(
            "SELECT id, spec_digest FROM proposals WHERE tenant = $1 AND idempotency_key = $2",
        )
        .bind(tenant)
        .bind(&spec.idempotency_key)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(earlier_id) = crate::types::holder_of_key(spec, earlier)? else {
            return Ok(None);
        };
        let proposal = fetch(&mut tx, tenant, &earlier_id).await?;
        tx.commit().await?;
        Ok(proposal)
    }

    #[tracing::instrument(name = "store.postgres.cancel_proposal", skip(self, reason))]
    async fn cancel_proposal(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let row = sqlx::query(
            "UPDATE proposals SET state = 'cancelled', cancel_reason = $1, updated_at = $2, decided_at = $2
             WHERE id = $4 AND tenant IS NOT DISTINCT FROM $3
               AND state IN ('pending', 'reviewing', 'escalated')
               AND ($5::text IS NULL OR submitted_key = $5)
             RETURNING *",
        )
        .bind(reason)
        .bind(now_ms())
        .bind(tenant)
        .bind(id)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = row {
            let proposal = proposal_from_row(&row)?;
            tx.commit().await?;
            self.publish(StoreEvent::changed_to(tenant, id, ProposalState::Cancelled));
            return Ok(proposal);
        }
        let current: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT state, submitted_key FROM proposals WHERE id = $2 AND tenant IS NOT DISTINCT FROM $1",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        Err(crate::types::not_cancelled(id, current, key))
    }

    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome> {
        self.submit(Submission { new, review: None }).await
    }

    /// Reviewed in the transaction that stores it, under its tenant's
    /// submissions' lock (see `group_commit`).
    async fn submit_reviewed(
        &self,
        new: NewProposal,
        review: std::sync::Arc<dyn crate::SubmitReview>,
    ) -> Result<SubmitOutcome> {
        self.submit(Submission {
            new,
            review: Some(review),
        })
        .await
    }
}

impl PostgresStore {
    /// One submission through the group commit; its change announced.
    async fn submit(&self, submission: Submission) -> Result<SubmitOutcome> {
        let (outcome, event) = self.submitter.submit(submission).await?;
        if let Some(event) = event {
            self.publish(event);
        }
        Ok(outcome)
    }
}
