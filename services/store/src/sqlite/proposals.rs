use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use countersign_domain::{Millis, Proposal, ProposalSpec, ProposalState, gates::ReviewFacts};
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, events, review};
use crate::at_submission::{self, InOrder};
use crate::rows::{NamedRows, proposal_from_row};
use crate::types::Submission;
use crate::{
    NewProposal, Proposals, Result, StoreError, StoreEvent, SubmitOutcome, SubmitReview, now_ms,
};

/// What one submission's insert answers.
pub type Inserted = Result<(SubmitOutcome, Option<StoreEvent>)>;

/// Inserts one submission if its idempotency key is free, with its SUBMITTED
/// event and, PENDING, its queue entry by trigger; answers its id if it
/// inserted it. A submission decided in its own transaction goes in decided
/// (`?16`, at `?18`, its review started at `?17`), with its decision's event
/// and no queue entry (migration 0027). A key taken by an
/// earlier proposal (or one earlier in the same group) leaves it out. One
/// prepared statement bound per submission: no array of the group to encode
/// and for SQLite to parse again field by field.
const INSERT_ROW: &str = "
INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator, spec_json,
    spec_digest, idempotency_key, state, submitted_by, created_at, updated_at, trace_parent,
    submitted_key, submitted_by_person, review_started_at, decided_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?16, ?11, ?12, ?12, ?13, ?14, ?15, ?17, ?18)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id";

/// Inserts `new` as `id` at `now` in `state` (PENDING, or decided at
/// `decided_at`, reviewed since `now`): `true` if inserted, `false` if its
/// key was taken.
fn insert_row(
    conn: &Connection,
    new: &NewProposal,
    id: &str,
    now: Millis,
    (state, decided_at): (ProposalState, Option<Millis>),
) -> rusqlite::Result<bool> {
    let key = (!new.spec.idempotency_key.is_empty()).then_some(&new.spec.idempotency_key);
    let reviewed = decided_at.is_some();
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
                state.as_str(),
                reviewed.then_some(now),
                decided_at,
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
        let event = StoreEvent::stored(&new.tenant, &id, ProposalState::Pending);
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
/// A submission that asks for a review in its own transaction is reviewed
/// there, in the group's order (`at_submission`).
pub fn insert_group(conn: &mut Connection, group: Vec<Submission>) -> GroupAnswers {
    let now = now_ms();
    let not_written = |error: &dyn std::fmt::Display| {
        StoreError::Unavailable(format!("writing the submissions: {error}"))
    };
    let failed = |error: &dyn std::fmt::Display, n: usize, commit: Duration| GroupAnswers {
        answers: (0..n).map(|_| Err(not_written(error))).collect(),
        commit,
    };
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(error) => return failed(&error, group.len(), Duration::ZERO),
    };
    let mut facts = group_facts(&tx, &group, now);
    let mut reviews = InOrder::default();
    let mut out: Vec<Inserted> = Vec::with_capacity(group.len());
    for (i, submission) in group.into_iter().enumerate() {
        let reviewed = reviews.review(&submission, facts[i].take());
        let id = submission.new.id.clone();
        let inserted = match insert_row(&tx, &submission.new, &id, now, reviewed.stored_as()) {
            Ok(inserted) => inserted,
            Err(error) => {
                out.push(Err(error.into()));
                continue;
            }
        };
        if !inserted {
            out.push(answer(&tx, submission.new, id, now, false));
            continue;
        }
        let proposal = reviews.stored(&submission, reviewed, now);
        let event = StoreEvent::stored(&proposal.tenant, &proposal.id, proposal.state);
        out.push(Ok((SubmitOutcome::Created(proposal), Some(event))));
    }
    // A decision that cannot be written leaves nothing of the group: its
    // submissions are answered with the error, none is stored.
    if let Err(error) = review::write_decisions(&tx, &reviews.writes(), now) {
        return failed(&error, out.len(), Duration::ZERO);
    }
    let started = Instant::now();
    let committed = tx.commit();
    let commit = started.elapsed();
    if let Err(error) = committed {
        return failed(&error, out.len(), commit);
    }
    reviews.committed();
    GroupAnswers {
        answers: out,
        commit,
    }
}

/// A group's answers, one a submission in its order, and how long its
/// COMMIT took (the writer sizes its groups by it, `group_commit::Pace`).
pub struct GroupAnswers {
    pub answers: Vec<Inserted>,
    pub commit: Duration,
}

/// The facts of each submission of a group where any of them asks for a
/// review (every one's: a reviewed submission may overlap another of the
/// group, whose target's cluster is among them), read before the group
/// writes anything, each with the proposal it would be; `None` for each
/// where none does, or where they cannot be read (a review then leaves its
/// submission PENDING for the reviewers).
fn group_facts(
    tx: &Connection,
    group: &[Submission],
    now: Millis,
) -> Vec<Option<(ReviewFacts, Proposal)>> {
    let none = || group.iter().map(|_| None).collect();
    let Some(proposals) = at_submission::proposals(group, now) else {
        return none();
    };
    match review::facts_in(tx, &proposals) {
        Ok(facts) => at_submission::with_facts(facts, proposals),
        Err(error) => {
            tracing::warn!(%error, "a submission group's facts could not be read; its reviews are queued");
            none()
        }
    }
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

impl SqliteStore {
    /// One submission through the group commit; its change announced.
    async fn submit(&self, submission: Submission) -> Result<SubmitOutcome> {
        let (outcome, event) = self.submitter.submit(submission).await?;
        self.publish(event);
        tracing::Span::current().record("proposal_id", outcome.proposal().id.as_str());
        Ok(outcome)
    }
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
        self.submit(Submission { new, review: None }).await
    }

    #[tracing::instrument(
        name = "store.sqlite.submit_reviewed",
        level = "debug",
        skip_all,
        fields(tenant = %new.tenant, proposal_id = tracing::field::Empty)
    )]
    async fn submit_reviewed(
        &self,
        new: NewProposal,
        review: Arc<dyn SubmitReview>,
    ) -> Result<SubmitOutcome> {
        self.submit(Submission {
            new,
            review: Some(review),
        })
        .await
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use countersign_domain::{
        Decision, Proposal, ProposalState,
        gates::ReviewFacts,
        review::{self, ReviewStamp},
    };

    use crate::sqlite::tests::migrated;
    use crate::types::Submission;
    use crate::{NewProposal, Proposals, SubmitOutcome, SubmitReview, Tenants};

    /// Rejects each submission, naming how many other operations block it;
    /// leaves the one with id `queued` to the reviewers.
    struct Counting {
        queued: String,
        recorded: Mutex<usize>,
    }

    impl SubmitReview for Counting {
        fn review(&self, proposal: &Proposal, facts: &ReviewFacts) -> Option<Decision> {
            if proposal.id == self.queued {
                return None;
            }
            let stamp = ReviewStamp {
                reviewer: "t/submit".into(),
                decided_at: countersign_domain::now_ms(),
                latency_ms: 0,
            };
            Some(review::failed(
                &format!("others {}", facts.others.len()),
                stamp,
            ))
        }

        fn recorded(&self, _: &Decision) {
            *self.recorded.lock().unwrap() += 1;
        }
    }

    fn new(target: &str) -> NewProposal {
        crate::group_commit::tests::new_proposal("a", target)
    }

    /// One group: a submission the review leaves queued, then three
    /// reviewed ones on its target. Each reviewed one sees every earlier
    /// one of the group that still blocks it (the queued one is PENDING;
    /// the rejected ones block nothing), and is stored decided with no
    /// queue entry; the queued one is PENDING with its entry.
    #[tokio::test]
    async fn a_group_is_reviewed_in_order_each_seeing_what_was_written_before_it() {
        let (store, _dir) = migrated().await;
        store.create_tenant("a").await.unwrap();
        let mut queued = new("node-q");
        // The queued one is older (ids order proposals made in one instant).
        queued.id = "0".repeat(26);
        let review = Arc::new(Counting {
            queued: queued.id.clone(),
            recorded: Mutex::new(0),
        });
        let group: Vec<Submission> = std::iter::once(queued)
            .chain((0..3).map(|_| new("node-q")))
            .map(|new| Submission {
                new,
                review: Some(review.clone() as Arc<dyn SubmitReview>),
            })
            .collect();
        let ids: Vec<String> = group.iter().map(|s| s.new.id.clone()).collect();
        let answers = store
            .on_writer(move |conn| super::insert_group(conn, group).answers)
            .await;
        let states: Vec<(ProposalState, Option<String>)> = answers
            .into_iter()
            .map(|answer| match answer.unwrap().0 {
                SubmitOutcome::Created(p) => (p.state, p.decision.map(|d| d.reason)),
                other => panic!("{other:?}"),
            })
            .collect();
        let others = Some("review failed: others 1".to_owned());
        assert_eq!(
            states,
            [
                (ProposalState::Pending, None),
                (ProposalState::Rejected, others.clone()),
                (ProposalState::Rejected, others.clone()),
                (ProposalState::Rejected, others),
            ]
        );
        assert_eq!(*review.recorded.lock().unwrap(), 3);
        for (i, id) in ids.iter().enumerate() {
            let stored = store.get_proposal("a", id).await.unwrap().unwrap();
            let want = if i == 0 {
                ProposalState::Pending
            } else {
                ProposalState::Rejected
            };
            assert_eq!(stored.state, want);
        }
        let entries: Vec<String> = store
            .on_writer(|conn| {
                conn.prepare("SELECT proposal_id FROM queue_entries")?
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
            .unwrap();
        assert_eq!(
            entries,
            [ids[0].clone()],
            "only the queued one has an entry"
        );
    }
}
