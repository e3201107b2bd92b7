//! A review batch's facts from one tenant's rows. Both backends read the same
//! rows per tenant of a batch (its policy, its model profiles, the SOPs of the
//! batch's actions — every SOP where it has a model profile —, its targets,
//! its routes, and the operations that may overlap any of them, each in one
//! statement) and assemble them here, so a
//! batch costs a handful of statements whatever its size.

use std::sync::Arc;

use countersign_domain::{
    BlastRadius, Millis, Proposal, Sop, TenantPolicy,
    escalation::Route,
    gates::{self, OtherOperation, ReviewFacts},
    model::ModelProfile,
};

use crate::{
    Result, StoreError, now_ms,
    policy::PolicyDocument,
    rows::{self, Columns},
};

/// The most other operations a review's facts carry (the oldest first).
const MAX_OTHERS: usize = 16;

/// Items grouped by tenant, each with its index in `items` (batches may span
/// tenants; a transaction switches scope per group). Groups come in tenant
/// order, and within a group every writer locks its rows in id order: all
/// writers take row locks in one order, so none waits for another that waits
/// for it (the event log's lock, taken at commit, no longer orders them).
pub fn by_tenant<T>(items: &[T], tenant_of: impl Fn(&T) -> &str) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let tenant = tenant_of(item);
        match groups.iter_mut().find(|(t, _)| t == tenant) {
            Some((_, indices)) => indices.push(i),
            None => groups.push((tenant.to_owned(), vec![i])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
}

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

/// A batch's facts as its tenant groups are gathered: each proposal's slot,
/// filled once (a slot left empty is an error, never an approval).
pub(crate) struct Batch<'a> {
    proposals: &'a [Proposal],
    out: Vec<Option<Result<ReviewFacts>>>,
}

/// A tenant group's facts but their other operations, and how far the
/// candidate query that finds those must reach.
pub(crate) struct Gathered {
    facts: Vec<(usize, ReviewFacts)>,
    /// Some review is tenant-wide: candidates from the whole tenant.
    pub tenant_wide: bool,
    /// The clusters of the group's cluster-wide reviews.
    pub clusters: Vec<String>,
    /// The oldest decision that still counts as running in parallel.
    pub window_start: Millis,
}

impl<'a> Batch<'a> {
    pub(crate) fn new(proposals: &'a [Proposal]) -> Self {
        Batch {
            proposals,
            out: (0..proposals.len()).map(|_| None).collect(),
        }
    }

    /// The tenant of `indices` does not exist: each of its reviews fails.
    pub(crate) fn tenant_missing(&mut self, tenant: &str, indices: &[usize]) {
        for &i in indices {
            self.out[i] = Some(Err(StoreError::NotFound(format!("tenant `{tenant}`"))));
        }
    }

    /// The actions and the targets of `indices`, in order (what the group's
    /// SOP and target rows are read by).
    pub(crate) fn keys(&self, indices: &[usize]) -> (Vec<&'a str>, Vec<&'a str>) {
        let proposals = self.proposals;
        indices
            .iter()
            .map(|&i| {
                let spec = &proposals[i].spec;
                (spec.action.as_str(), spec.target.as_str())
            })
            .unzip()
    }

    /// The facts of the tenant's proposals (`indices`) but their other
    /// operations, from the tenant's SOP rows, target rows, route rows and
    /// model profile rows, as of now. The SOP rows are those of the group's
    /// actions, or, where the tenant has a model profile
    /// ([`sops_for_every_action`]), all of them: its catalogue. A row that
    /// does not map fails only the reviews that read it (a route, a profile
    /// or, with a profile, any SOP: every review of the tenant); `None` when
    /// no review is left to complete.
    pub(crate) fn gather<R: Columns>(
        &mut self,
        indices: &[usize],
        policy: TenantPolicy,
        sop_rows: &[R],
        target_rows: &[R],
        route_rows: &[R],
        profile_rows: &[R],
    ) -> Option<Gathered> {
        let now = now_ms();
        let documents = route_rows
            .iter()
            .map(Route::from_row)
            .collect::<Result<Vec<_>>>()
            .and_then(|routes| {
                let profiles = profile_rows.iter().map(ModelProfile::from_row);
                Ok((routes, profiles.collect::<Result<Vec<_>>>()?))
            })
            .and_then(|(routes, profiles)| {
                let catalogue: Arc<[Sop]> = if sops_for_every_action(profile_rows) {
                    let sops = sop_rows.iter().map(rows::sop_from_row);
                    sops.collect::<Result<Vec<_>>>()?.into()
                } else {
                    Arc::new([])
                };
                Ok((routes, profiles, catalogue))
            });
        let (routes, model_profiles, sop_catalogue) = match documents {
            Ok(documents) => documents,
            Err(error) => {
                let what = match error {
                    StoreError::Corrupt(what) => what,
                    other => other.to_string(),
                };
                for &i in indices {
                    self.out[i] = Some(Err(corrupt(what.clone())));
                }
                return None;
            }
        };
        let column = |row: &R, name: &str| row.text(name).unwrap_or_default();
        let mut facts = Vec::new();
        for &i in indices {
            let proposal = &self.proposals[i];
            let sops = sop_rows
                .iter()
                .filter(|row| column(row, "action") == proposal.spec.action)
                .map(rows::sop_from_row)
                .collect::<Result<Vec<_>>>();
            let target = target_rows
                .iter()
                .find(|row| column(row, "id") == proposal.spec.target)
                .map(rows::target_from_row)
                .transpose();
            match (sops, target) {
                (Ok(sops), Ok(target)) => facts.push((
                    i,
                    ReviewFacts {
                        proposal_id: proposal.id.clone(),
                        spec: (&proposal.spec).into(),
                        created_at: proposal.created_at,
                        policy,
                        sops,
                        target,
                        others: Vec::new(),
                        now,
                        routes: routes.clone(),
                        model_profiles: model_profiles.clone(),
                        sop_catalogue: sop_catalogue.clone(),
                    },
                )),
                (Err(error), _) | (_, Err(error)) => self.out[i] = Some(Err(error)),
            }
        }
        if facts.is_empty() {
            return None;
        }
        let tenant_wide = facts
            .iter()
            .any(|(_, f)| f.spec.blast_radius == BlastRadius::TenantWide);
        let clusters = facts
            .iter()
            .filter(|(_, f)| f.spec.blast_radius == BlastRadius::Cluster)
            .filter_map(|(_, f)| f.target.as_ref().and_then(|t| t.cluster()))
            .map(str::to_owned)
            .collect();
        Some(Gathered {
            facts,
            tenant_wide,
            clusters,
            window_start: now - policy.parallel_window_ms,
        })
    }

    /// Gives each gathered review the other operations that block it, from
    /// the candidate rows read for the whole tenant group (a proposal found
    /// by two branches comes twice; repeats are dropped). A malformed
    /// candidate fails the group's reviews: which of them it concerns is
    /// unknown.
    pub(crate) fn attach_others<R: Columns>(&mut self, gathered: Gathered, candidate_rows: &[R]) {
        let others = match others_from(candidate_rows) {
            Ok(others) => others,
            Err(error) => {
                let what = match error {
                    StoreError::Corrupt(what) => what,
                    other => other.to_string(),
                };
                for (i, _) in gathered.facts {
                    self.out[i] = Some(Err(corrupt(what.clone())));
                }
                return;
            }
        };
        for (i, mut facts) in gathered.facts {
            add_blocking(&mut facts, &others);
            self.out[i] = Some(Ok(facts));
        }
    }

    /// Each proposal's facts, in order.
    pub(crate) fn finish(self) -> Vec<Result<ReviewFacts>> {
        self.out
            .into_iter()
            .map(|facts| facts.unwrap_or_else(|| Err(corrupt("facts not gathered".into()))))
            .collect()
    }
}

/// Adds to a review's other operations those of `candidates` that block
/// it (`gates::blocks`), oldest first, each once, at most [`MAX_OTHERS`].
pub(crate) fn add_blocking<'a>(
    facts: &mut ReviewFacts,
    candidates: impl IntoIterator<Item = &'a OtherOperation>,
) {
    let blocking: Vec<OtherOperation> = candidates
        .into_iter()
        .filter(|other| gates::blocks(facts, other))
        .cloned()
        .collect();
    let others = &mut facts.others;
    others.extend(blocking);
    others.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    others.dedup_by(|a, b| a.id == b.id);
    others.truncate(MAX_OTHERS);
}

/// Whether a tenant group's SOP rows are to be read for every action (its
/// catalogue, for the model's prompt) rather than for the group's actions
/// alone: where the tenant has a model profile (its `profile_rows`, read
/// first).
pub(crate) fn sops_for_every_action<R>(profile_rows: &[R]) -> bool {
    !profile_rows.is_empty()
}

pub(crate) fn others_from<R: Columns>(rows: &[R]) -> Result<Vec<OtherOperation>> {
    rows.iter()
        .map(|row| {
            let id = row.text("id")?;
            let radius = row.text("blast_radius")?;
            let state = row.text("state")?;
            Ok(OtherOperation {
                action: row.text("action")?,
                target: row.text("target")?,
                target_cluster: row.opt_text("cluster")?,
                blast_radius: radius
                    .parse()
                    .map_err(|e| corrupt(format!("proposal {id}: {e}")))?,
                state: state
                    .parse()
                    .map_err(|e| corrupt(format!("proposal {id}: {e}")))?,
                created_at: row.int("created_at")?,
                decided_at: row.opt_int("decided_at")?,
                id,
            })
        })
        .collect()
}
