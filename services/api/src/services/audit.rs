//! `countersign.v1.AuditService`: the tenant's decision log for auditors and
//! admins — query, verify, checkpoints.

use std::{sync::Arc, time::Duration};

use countersign_domain::{
    Permission,
    audit::{Checkpoint, CopyCheck, Hash, SigningKey, StoredEntry, Verification, Verifier},
    now_ms,
};
use countersign_proto::{
    OrStatus,
    convert::audit::{
        checkpoint_from_proto, checkpoint_to_proto, entry_to_proto, list_request_from_proto,
        page_token, verification_to_proto,
    },
    v1::{
        self, AuditEntry, GetCheckpointRequest, GetDecisionRequest, ListDecisionsRequest,
        ListDecisionsResponse, VerifyFailure, VerifyLogRequest, VerifyLogResponse,
        audit_service_server::AuditService,
    },
};
use countersign_store::{AuditLog, DynStore, Result as StoreResult, StoreError};
use tonic::{Request, Response, Status};

use crate::context::{Caller, require_id};

/// Entries read per query while verifying.
const VERIFY_PAGE: u32 = 10_000;
/// Queries in flight while verifying.
const READ_AHEAD: usize = 2;

pub struct AuditApi {
    store: Arc<dyn AuditLog>,
    key: Option<SigningKey>,
}

impl AuditApi {
    pub fn new(store: Arc<dyn AuditLog>, key: Option<SigningKey>) -> Self {
        AuditApi { store, key }
    }

    fn key(&self) -> Result<&SigningKey, Status> {
        self.key.as_ref().ok_or_else(|| {
            Status::failed_precondition("this server has no checkpoint signing key configured")
        })
    }
}

/// Recomputes a tenant's chain from its stored entries.
pub async fn verify_log(
    store: &Arc<dyn AuditLog>,
    tenant: &str,
    verifier: Verifier,
) -> StoreResult<Verification> {
    let read = |after: u64| {
        let (store, tenant) = (store.clone(), tenant.to_owned());
        async move { store.audit_range(&tenant, after, VERIFY_PAGE).await }
    };
    verify_in_chunks(read, VERIFY_PAGE, verifier).await
}

/// Feeds the verifier the entries of `read` (`read(after)`: up to `page`
/// entries with `sequence > after`, in sequence order) in chunks of sequences
/// `(start, start + page]`, `READ_AHEAD` reads at once while the oldest is
/// hashed. The verifier sees exactly what one scan in sequence order would,
/// gaps and all.
async fn verify_in_chunks<F, Fut>(
    read: F,
    page: u32,
    mut verifier: Verifier,
) -> StoreResult<Verification>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = StoreResult<Vec<StoredEntry>>> + Send + 'static,
{
    let page = u64::from(page);
    // Each read also hashes its entries and checks their copies, so that work
    // runs beside the verifier's walk along the chain.
    let spawn = |start: u64| {
        let entries = read(start);
        let checked = async move {
            let entries = entries.await?;
            Ok::<_, StoreError>(entries.iter().map(Checked::of).collect::<Vec<_>>())
        };
        (start, AbortOnDrop(tokio::spawn(checked)))
    };
    let mut reads = std::collections::VecDeque::new();
    let mut next = 0;
    while reads.len() < READ_AHEAD {
        reads.push_back(spawn(next));
        next += page;
    }
    while let Some((start, mut handle)) = reads.pop_front() {
        let entries = (&mut handle.0)
            .await
            .map_err(|e| StoreError::Unavailable(format!("reading the log: {e}")))??;
        // Nothing after `start`: the log ends here.
        let Some(first) = entries.first() else { break };
        let end = start + page;
        if first.sequence > end {
            // A gap wider than a chunk: go on from the entry found.
            reads.clear();
            next = first.sequence - 1;
        }
        for entry in entries.into_iter().take_while(|e| e.sequence <= end) {
            verifier.push_checked(entry.sequence, &entry.digest, Ok(entry.leaf), entry.copies);
            if !verifier.wants_more() {
                return Ok(verifier.finish());
            }
        }
        while reads.len() < READ_AHEAD {
            reads.push_back(spawn(next));
            next += page;
        }
    }
    Ok(verifier.finish())
}

/// An entry read for verification: its leaf hash and what its copies say.
struct Checked {
    sequence: u64,
    digest: String,
    leaf: Hash,
    copies: Option<Result<CopyCheck, String>>,
}

impl Checked {
    fn of(entry: &StoredEntry) -> Checked {
        Checked {
            sequence: entry.sequence,
            digest: entry.digest.clone(),
            leaf: entry.leaf(),
            copies: entry.check_copies(),
        }
    }
}

/// A read ahead that is not wanted once verification stops early.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Signs the tenant's log as it is now and keeps the checkpoint, unless the
/// log has not grown since the newest one: that one is answered instead (a
/// refresh of an unchanged log stores nothing).
pub async fn sign_checkpoint(
    store: &dyn AuditLog,
    key: &SigningKey,
    tenant: &str,
) -> StoreResult<Checkpoint> {
    let (size, head) = store.audit_head(tenant).await?;
    let checkpoint = key.sign(tenant, size, &head, now_ms());
    store.save_checkpoint(&checkpoint).await
}

/// Signs a checkpoint of every tenant whose log grew since its last one,
/// every `every`, until `closing` resolves.
pub async fn checkpoint_periodically(
    store: DynStore,
    key: SigningKey,
    every: Duration,
    closing: impl Future<Output = ()>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    tokio::pin!(closing);
    loop {
        tokio::select! {
            () = &mut closing => return,
            _ = tick.tick() => {}
        }
        let tenants = match store.list_tenants().await {
            Ok(tenants) => tenants,
            Err(error) => {
                tracing::warn!(%error, "checkpoints: cannot list tenants");
                continue;
            }
        };
        for tenant in tenants {
            let grown = async {
                let (size, _) = store.audit_head(&tenant.name).await?;
                let last = store.latest_checkpoint(&tenant.name).await?;
                StoreResult::<bool>::Ok(size > 0 && last.is_none_or(|c| c.size < size))
            };
            match grown.await {
                Ok(false) => {}
                Ok(true) => match sign_checkpoint(&*store, &key, &tenant.name).await {
                    Ok(c) => tracing::info!(tenant = %c.tenant, size = c.size, "checkpoint signed"),
                    Err(error) => {
                        tracing::warn!(tenant = %tenant.name, %error, "checkpoint failed")
                    }
                },
                Err(error) => tracing::warn!(tenant = %tenant.name, %error, "checkpoint failed"),
            }
        }
    }
}

#[tonic::async_trait]
impl AuditService for AuditApi {
    async fn list_decisions(
        &self,
        request: Request<ListDecisionsRequest>,
    ) -> Result<Response<ListDecisionsResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::Audit)?;
        let (filter, page_size, before) =
            list_request_from_proto(request.into_inner()).or_status()?;
        // One more than a page tells whether another page follows.
        let mut entries = self
            .store
            .list_audit(&caller.tenant.name, &filter, before, page_size + 1)
            .await
            .or_status()?;
        let more = entries.len() > page_size as usize;
        entries.truncate(page_size as usize);
        let next_page_token = match entries.last() {
            Some(last) if more => page_token(last.sequence),
            _ => String::new(),
        };
        Ok(Response::new(ListDecisionsResponse {
            entries: entries
                .iter()
                .map(|entry| entry_to_proto(entry, caller.principal.agent))
                .collect(),
            next_page_token,
        }))
    }

    async fn get_decision(
        &self,
        request: Request<GetDecisionRequest>,
    ) -> Result<Response<AuditEntry>, Status> {
        let caller = Caller::authorize(&request, Permission::Audit)?;
        let id = request.into_inner().proposal_id;
        require_id("proposal_id", &id)?;
        let entry = self
            .store
            .get_audit(&caller.tenant.name, &id)
            .await
            .or_status()?
            .ok_or_else(|| {
                Status::not_found(format!("no decision of proposal `{id}` is in the log"))
            })?;
        Ok(Response::new(entry_to_proto(
            &entry,
            caller.principal.agent,
        )))
    }

    async fn verify_log(
        &self,
        request: Request<VerifyLogRequest>,
    ) -> Result<Response<VerifyLogResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::Audit)?;
        let tenant = caller.tenant.name.clone();
        let verifier = match request.into_inner().checkpoint {
            None => Verifier::new(),
            Some(checkpoint) => {
                let checkpoint = checkpoint_from_proto(checkpoint);
                if checkpoint.tenant != tenant {
                    return Err(Status::invalid_argument(
                        "checkpoint.tenant: is not the caller's tenant",
                    ));
                }
                if let Err(error) = checkpoint.verify(&self.key()?.public_hex()) {
                    return Ok(Response::new(VerifyLogResponse {
                        ok: false,
                        failure: VerifyFailure::BadSignature as i32,
                        detail: format!("checkpoint: {error}"),
                        ..Default::default()
                    }));
                }
                Verifier::against(checkpoint.size, &checkpoint.head_digest)
            }
        };
        let verification = verify_log(&self.store, &tenant, verifier)
            .await
            .or_status()?;
        match &verification.failure {
            None => tracing::info!(entries = verification.entries_checked, "log verified"),
            Some(f) => {
                tracing::warn!(sequence = f.sequence, kind = %f.kind, detail = %f.detail, "log verification failed")
            }
        }
        Ok(Response::new(verification_to_proto(&verification)))
    }

    async fn get_checkpoint(
        &self,
        request: Request<GetCheckpointRequest>,
    ) -> Result<Response<v1::Checkpoint>, Status> {
        let caller = Caller::authorize(&request, Permission::Audit)?;
        let tenant = &caller.tenant.name;
        let latest = if request.into_inner().refresh {
            None
        } else {
            self.store.latest_checkpoint(tenant).await.or_status()?
        };
        let checkpoint = match latest {
            Some(checkpoint) => checkpoint,
            None => sign_checkpoint(&*self.store, self.key()?, tenant)
                .await
                .or_status()?,
        };
        Ok(Response::new(checkpoint_to_proto(&checkpoint)))
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::audit::{EMPTY_HEAD, chain, leaf_hash};

    use super::*;

    /// A chained log of `n` entries, sequences 1..=n.
    fn log(n: u64) -> Vec<StoredEntry> {
        let mut head = EMPTY_HEAD;
        (1..=n)
            .map(|sequence| {
                let record = format!("{{\"n\":{sequence}}}");
                head = chain(&head, &leaf_hash(record.as_bytes()));
                StoredEntry {
                    sequence,
                    digest: head.iter().map(|b| format!("{b:02x}")).collect(),
                    record,
                    copies: None,
                }
            })
            .collect()
    }

    fn scanned(entries: &[StoredEntry]) -> Verification {
        let mut verifier = Verifier::new();
        for entry in entries {
            verifier.push(entry.sequence, &entry.digest, Ok(entry.leaf()));
            if !verifier.wants_more() {
                break;
            }
        }
        verifier.finish()
    }

    async fn chunked(entries: &[StoredEntry], page: u32) -> Verification {
        let entries = std::sync::Arc::new(entries.to_vec());
        let read = |after: u64| {
            let entries = entries.clone();
            async move {
                Ok(entries
                    .iter()
                    .filter(|e| e.sequence > after)
                    .take(page as usize)
                    .cloned()
                    .collect())
            }
        };
        verify_in_chunks(read, page, Verifier::new()).await.unwrap()
    }

    #[tokio::test]
    async fn reading_in_chunks_verifies_what_one_scan_verifies() {
        let whole = log(23);
        let mut missing_one = whole.clone();
        missing_one.remove(9);
        let mut missing_many = whole.clone();
        missing_many.drain(4..15);
        let mut swapped = whole.clone();
        let (a, b) = (swapped[6].record.clone(), swapped[7].record.clone());
        (swapped[6].record, swapped[7].record) = (b, a);
        let mut far = whole.clone();
        far.push(StoredEntry {
            sequence: 1_000,
            ..whole[0].clone()
        });
        for (name, entries) in [
            ("whole", whole),
            ("missing one", missing_one),
            ("missing a run wider than a chunk", missing_many),
            ("two swapped", swapped),
            ("an entry far past the end", far),
            ("empty", Vec::new()),
        ] {
            for page in [1, 3, 4, 10, 100] {
                assert_eq!(
                    chunked(&entries, page).await,
                    scanned(&entries),
                    "{name}, chunks of {page}"
                );
            }
            assert!(
                !name.starts_with("whole") || scanned(&entries).ok(),
                "the whole log verifies"
            );
        }
    }
}
