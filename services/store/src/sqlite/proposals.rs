use async_trait::async_trait;
use countersign_domain::{Millis, Proposal, ProposalSpec, ProposalState};
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, events};
use crate::rows::{NamedRows, proposal_from_row};
use crate::{NewProposal, Proposals, Result, StoreError, StoreEvent, SubmitOutcome, now_ms};

/// What one submission's insert answers.
pub type Inserted = Result<(SubmitOutcome, Option<StoreEvent>)>;

/// Inserts one submission if its idempotency key is free, with its queue
/// entry and SUBMITTED event by trigger; answers its id if it inserted it. A
/// key taken by an earlier proposal (or one earlier in the same group) leaves
/// it out. One prepared statement bound per submission: no array of the
/// group to encode and for SQLite to parse again field by field.
const INSERT_ROW: &str = "
INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator, spec_json,
    spec_digest, idempotency_key, state, submitted_by, created_at, updated_at, trace_parent,
    submitted_key, submitted_by_person)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12, ?12, ?13, ?14, ?15)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id";

/// Inserts `new` as `id` at `now`: `true` if inserted, `false` if its key
/// was taken.
fn insert_row(
    conn: &Connection,
    new: &NewProposal,
    id: &str,
    now: Millis,
) -> rusqlite::Result<bool> {
    let key = (!new.spec.idempotency_key.is_empty()).then_some(&new.spec.idempotency_key);
    conn.prepare_cached(INSERT_ROW)?
        .query_row(
            params![
                id,
                new.tenant,
                new.spec.action,
                new.spec.class.as_str(),
                new.spec.target,
                new.spec.blast_radius.as_str(),
                new.spec.operator,
                new.spec.canonical_json(),
                new.spec.digest(),
                key,
                new.submitted_by,
                now,
                new.trace_parent,
                new.submitted_key,
                new.submitted_by_person,
            ],
            |_| Ok(()),
        )
        .optional()
        .map(|inserted| inserted.is_some())
}

/// One proposal of one tenant as it is now, with its decision once it has
/// one (in the caller's transaction: one snapshot).
#[tracing::instrument(name = "store.sqlite.get_proposal", skip(conn))]
pub fn get(conn: &Connection, tenant: &str, id: &str) -> Result<Option<Proposal>> {
    let found = conn
        .prepare_cached("SELECT * FROM proposals WHERE tenant = ? AND id = ?")?
        .named_row([tenant, id], |row| proposal_from_row(row))?;
    let Some(mut proposal) = found else {
        return Ok(None);
    };
    if proposal.state.is_terminal() {
        proposal.decision = conn
            .prepare_cached("SELECT * FROM decisions WHERE proposal_id = ?")?
            .named_row([id], |row| crate::rows::decision_from_row(row))?;
    }
    Ok(Some(proposal))
}

/// The proposal that holds an idempotency key: its id and spec digest.
const EARLIER: &str =
    "SELECT id, spec_digest FROM proposals WHERE tenant = ? AND idempotency_key = ?";

/// The answer to a submission `id` that [`insert_row`] did or did not insert.
fn answer(
    conn: &Connection,
    new: NewProposal,
    id: String,
    now: Millis,
    inserted: bool,
) -> Inserted {
    if inserted {
        let event = events::signal(&new.tenant, &id, ProposalState::Pending);
        return Ok((
            SubmitOutcome::Created(new.into_pending(id, now)),
            Some(event),
        ));
    }
    // The idempotency key was taken: the same spec is the same proposal.
    let key = new.spec.idempotency_key.clone();
    let (earlier_id, earlier_digest): (String, String) = conn
        .prepare_cached(EARLIER)?
        .query_row([&new.tenant, &key], |row| Ok((row.get(0)?, row.get(1)?)))?;
    crate::types::same_spec_as_earlier(&key, &earlier_id, &earlier_digest, &new.spec.digest())?;
    let proposal = get(conn, &new.tenant, &earlier_id)?
        .ok_or_else(|| StoreError::Corrupt(format!("proposal {earlier_id} vanished")))?;
    Ok((SubmitOutcome::Deduplicated(proposal), None))
}

/// A group of submissions in one transaction, one statement each. A
/// statement that fails changes nothing (SQLite backs out a failed
/// statement, not its transaction), so a bad submission fails only itself;
/// should the transaction not commit, every submission of the group hears it.
pub fn insert_group(conn: &mut Connection, group: Vec<NewProposal>) -> Vec<Inserted> {
    let now = now_ms();
    let not_written = |error: &rusqlite::Error| {
        StoreError::Unavailable(format!("writing the submissions: {error}"))
    };
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(error) => return group.iter().map(|_| Err(not_written(&error))).collect(),
    };
    let mut out: Vec<Inserted> = group
        .into_iter()
        .map(|new| {
            let id = new.id.clone();
            let inserted = insert_row(&tx, &new, &id, now)?;
            answer(&tx, new, id, now, inserted)
        })
        .collect();
    if let Err(error) = tx.commit() {
        out.iter_mut()
            .for_each(|result| *result = Err(not_written(&error)));
    }
    out
}

/// The earlier proposal holding `spec`'s idempotency key (see
/// `Store::find_idempotent`), in the caller's transaction.
#[tracing::instrument(name = "store.sqlite.find_idempotent", skip(conn, spec))]
pub fn find_idempotent(
    conn: &Connection,
    tenant: &str,
    spec: &ProposalSpec,
) -> Result<Option<Proposal>> {
    if spec.idempotency_key.is_empty() {
        return Ok(None);
    }
    let earlier: Option<(String, String)> = conn
        .prepare_cached(EARLIER)?
        .query_row([tenant, spec.idempotency_key.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    let Some(earlier_id) = crate::types::holder_of_key(spec, earlier)? else {
        return Ok(None);
    };
    get(conn, tenant, &earlier_id)
}

#[tracing::instrument(name = "store.sqlite.cancel_proposal", skip(conn, reason))]
pub fn cancel(
    conn: &Connection,
    tenant: &str,
    id: &str,
    reason: &str,
    key: Option<&str>,
) -> Result<(Proposal, StoreEvent)> {
    let cancelled = conn
        .prepare_cached(
            "UPDATE proposals SET state = 'cancelled', cancel_reason = ?1, updated_at = ?2, decided_at = ?2
             WHERE tenant = ?3 AND id = ?4 AND state IN ('pending', 'reviewing', 'escalated')
               AND (?5 IS NULL OR submitted_key = ?5)
             RETURNING *",
        )?
        .named_row(params![reason, now_ms(), tenant, id, key], |row| {
            proposal_from_row(row)
        })?;
    if let Some(proposal) = cancelled {
        return Ok((
            proposal,
            events::signal(tenant, id, ProposalState::Cancelled),
        ));
    }
    let current: Option<(String, Option<String>)> = conn
        .prepare_cached("SELECT state, submitted_key FROM proposals WHERE tenant = ? AND id = ?")?
        .query_row([tenant, id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Err(crate::types::not_cancelled(id, current, key))
}

#[async_trait]
impl Proposals for SqliteStore {
    #[tracing::instrument(
        name = "store.sqlite.insert_proposal",
        level = "debug",
        skip_all,
        fields(tenant = %new.tenant, proposal_id = tracing::field::Empty)
    )]
    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome> {
        let (outcome, event) = self.submitter.submit(new).await?;
        self.publish(event);
        tracing::Span::current().record("proposal_id", outcome.proposal().id.as_str());
        Ok(outcome)
    }

    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>> {
        if spec.idempotency_key.is_empty() {
            return Ok(None);
        }
        let (tenant, spec) = (tenant.to_owned(), spec.clone());
        self.read(move |conn| {
            let tx = conn.transaction()?;
            find_idempotent(&tx, &tenant, &spec)
        })
        .await
    }

    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| {
            let tx = conn.transaction()?;
            get(&tx, &tenant, &id)
        })
        .await
    }

    async fn cancel_proposal(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal> {
        let (tenant, id, reason) = (tenant.to_owned(), id.to_owned(), reason.to_owned());
        let key = key.map(str::to_owned);
        let (proposal, event) = self
            .write(move |conn| cancel(conn, &tenant, &id, &reason, key.as_deref()))
            .await?;
        self.publish(Some(event));
        Ok(proposal)
    }
}
