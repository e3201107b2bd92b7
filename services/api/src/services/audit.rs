//! `countersign.v1.AuditService`: the tenant's decision log for auditors and
//! admins — query, verify, checkpoints.

use std::time::Duration;

use countersign_domain::{
    Permission,
    audit::{Checkpoint, SigningKey, Verification, Verifier},
    now_ms,
};
use countersign_proto::{
    convert::audit::{
        checkpoint_from_proto, checkpoint_to_proto, entry_to_proto, list_request_from_proto,
        page_token, verification_to_proto,
    },
    to_status,
    v1::{
        self, AuditEntry, GetCheckpointRequest, GetDecisionRequest, ListDecisionsRequest,
        ListDecisionsResponse, VerifyFailure, VerifyLogRequest, VerifyLogResponse,
        audit_service_server::AuditService,
    },
};
use countersign_store::{DynStore, Result as StoreResult};
use tonic::{Request, Response, Status};

use crate::context::{Caller, require_id};

/// Entries read per query while verifying.
const VERIFY_PAGE: u32 = 10_000;

pub struct AuditApi {
    store: DynStore,
    key: Option<SigningKey>,
}

impl AuditApi {
    pub fn new(store: DynStore, key: Option<SigningKey>) -> Self {
        AuditApi { store, key }
    }

    fn key(&self) -> Result<&SigningKey, Status> {
        self.key.as_ref().ok_or_else(|| {
            Status::failed_precondition("this server has no checkpoint signing key configured")
        })
    }
}

/// Recomputes a tenant's chain from its stored entries, page by page.
pub async fn verify_log(
    store: &DynStore,
    tenant: &str,
    mut verifier: Verifier,
) -> StoreResult<Verification> {
    let mut after = 0;
    loop {
        let page = store.audit_range(tenant, after, VERIFY_PAGE).await?;
        let full = page.len() as u32 == VERIFY_PAGE;
        for entry in &page {
            verifier.push(entry.sequence, &entry.digest, Ok(entry.leaf()));
            if !verifier.wants_more() {
                return Ok(verifier.finish());
            }
            after = entry.sequence;
        }
        if !full {
            return Ok(verifier.finish());
        }
    }
}

/// Signs the tenant's log as it is now and keeps the checkpoint.
pub async fn sign_checkpoint(
    store: &DynStore,
    key: &SigningKey,
    tenant: &str,
) -> StoreResult<Checkpoint> {
    let (size, head) = store.audit_head(tenant).await?;
    let checkpoint = key.sign(tenant, size, &head, now_ms());
    store.save_checkpoint(&checkpoint).await?;
    Ok(checkpoint)
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
                Ok(true) => match sign_checkpoint(&store, &key, &tenant.name).await {
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
            list_request_from_proto(request.into_inner()).map_err(|e| to_status(&e))?;
        // One more than a page tells whether another page follows.
        let mut entries = self
            .store
            .list_audit(&caller.tenant.name, &filter, before, page_size + 1)
            .await
            .map_err(|e| to_status(&e))?;
        let more = entries.len() > page_size as usize;
        entries.truncate(page_size as usize);
        let next_page_token = match entries.last() {
            Some(last) if more => page_token(last.sequence),
            _ => String::new(),
        };
        Ok(Response::new(ListDecisionsResponse {
            entries: entries.iter().map(entry_to_proto).collect(),
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
            .map_err(|e| to_status(&e))?
            .ok_or_else(|| {
                Status::not_found(format!("no decision of proposal `{id}` is in the log"))
            })?;
        Ok(Response::new(entry_to_proto(&entry)))
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
            .map_err(|e| to_status(&e))?;
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
            self.store
                .latest_checkpoint(tenant)
                .await
                .map_err(|e| to_status(&e))?
        };
        let checkpoint = match latest {
            Some(checkpoint) => checkpoint,
            None => sign_checkpoint(&self.store, self.key()?, tenant)
                .await
                .map_err(|e| to_status(&e))?,
        };
        Ok(Response::new(checkpoint_to_proto(&checkpoint)))
    }
}
