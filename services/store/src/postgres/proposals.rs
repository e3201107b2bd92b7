use async_trait::async_trait;
use countersign_domain::{Proposal, ProposalSpec, ProposalState};
use sqlx::{PgConnection, PgPool};

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

/// The answer to a submission whose row was inserted as `id` at `now`.
pub fn created(new: NewProposal, id: String, now: i64) -> (SubmitOutcome, Option<StoreEvent>) {
    let event = StoreEvent::changed_to(&new.tenant, &id, ProposalState::Pending);
    (
        SubmitOutcome::Created(new.into_pending(id, now)),
        Some(event),
    )
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

/// The row, and by trigger its queue entry (the outbox) and SUBMITTED event;
/// the transaction must be in the tenant's scope (the event is written at
/// commit, under the event log's lock: migrations/postgres/0010).
pub async fn insert(
    conn: &mut PgConnection,
    new: NewProposal,
) -> Result<(SubmitOutcome, Option<StoreEvent>)> {
    let row = NewRow::of(&new);
    let now = now_ms();
    let inserted = sqlx::query(
        "INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator,
             spec_json, spec_digest, idempotency_key, state, submitted_by, created_at, updated_at,
             trace_parent, submitted_key, submitted_by_person)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $12, $13, $14,
                 $15)
         ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
    )
    .bind(&row.id)
    .bind(&new.tenant)
    .bind(&new.spec.action)
    .bind(new.spec.class.as_str())
    .bind(&new.spec.target)
    .bind(new.spec.blast_radius.as_str())
    .bind(&new.spec.operator)
    .bind(&row.spec_json)
    .bind(&row.digest)
    .bind(&row.key)
    .bind(&new.submitted_by)
    .bind(now)
    .bind(&new.trace_parent)
    .bind(&new.submitted_key)
    .bind(&new.submitted_by_person)
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 1 {
        let id = row.id.clone();
        return Ok(created(new, id, now));
    }
    earlier(conn, &new, &row).await
}

#[tracing::instrument(
    name = "store.postgres.insert_proposal",
    level = "debug",
    skip_all,
    fields(tenant = %new.tenant, proposal_id = tracing::field::Empty)
)]
pub async fn insert_one(
    pool: &PgPool,
    new: NewProposal,
) -> Result<(SubmitOutcome, Option<StoreEvent>)> {
    let mut tx = scope::tenant(pool, &new.tenant).await?;
    let inserted = insert(&mut tx, new).await?;
    tx.commit().await?;
    tracing::Span::current().record("proposal_id", inserted.0.proposal().id.as_str());
    Ok(inserted)
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
        let (outcome, event) = self
            .submitter
            .submit(Submission { new, review: None })
            .await?;
        if let Some(event) = event {
            self.publish(event);
        }
        Ok(outcome)
    }

    /// Queued for the reviewers, as [`Proposals::insert_proposal`] stores
    /// it: replicas commit a tenant's submissions side by side, so facts
    /// read inside one submission's transaction could miss an overlapping
    /// submission another replica has not committed yet, and two
    /// overlapping operations could both be approved. The reviewers read
    /// the facts after every review's start has committed.
    async fn submit_reviewed(
        &self,
        new: NewProposal,
        _review: std::sync::Arc<dyn crate::SubmitReview>,
    ) -> Result<SubmitOutcome> {
        self.insert_proposal(new).await
    }
}
