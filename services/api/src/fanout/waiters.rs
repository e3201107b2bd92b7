//! `AwaitDecision` calls waiting for one proposal's end: woken by the pump
//! with the event itself, so a decided await costs no second read.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use tokio::sync::oneshot;

use super::Published;

type Key = (String, String);
type Senders = Vec<(u64, oneshot::Sender<Arc<Published>>)>;

#[derive(Default, Clone)]
pub struct Registry {
    inner: Arc<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    next: AtomicU64,
    waiting: Mutex<HashMap<Key, Senders>>,
}

impl Registry {
    pub fn register(&self, tenant: &str, id: &str) -> Waiter {
        let token = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let key = (tenant.to_owned(), id.to_owned());
        let (tx, rx) = oneshot::channel();
        self.inner
            .waiting
            .lock()
            .expect("waiters lock")
            .entry(key.clone())
            .or_default()
            .push((token, tx));
        Waiter {
            rx,
            key,
            token,
            registry: self.clone(),
        }
    }

    /// Whether a call awaits proposal `id` of `tenant` now.
    pub fn waits_for(&self, tenant: &str, id: &str) -> bool {
        self.inner
            .waiting
            .lock()
            .expect("waiters lock")
            .contains_key(&(tenant.to_owned(), id.to_owned()))
    }

    pub fn wake(&self, published: &Arc<Published>) {
        let key = (
            published.event.tenant().to_owned(),
            published.event.proposal.id.clone(),
        );
        let senders = self
            .inner
            .waiting
            .lock()
            .expect("waiters lock")
            .remove(&key);
        for (_, tx) in senders.into_iter().flatten() {
            let _ = tx.send(published.clone());
        }
    }

    fn forget(&self, key: &Key, token: u64) {
        let mut waiting = self.inner.waiting.lock().expect("waiters lock");
        if let Some(senders) = waiting.get_mut(key) {
            senders.retain(|(t, _)| *t != token);
            if senders.is_empty() {
                waiting.remove(key);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.waiting.lock().unwrap().len()
    }
}

/// Resolves with the ending event; deregisters when dropped.
pub struct Waiter {
    rx: oneshot::Receiver<Arc<Published>>,
    key: Key,
    token: u64,
    registry: Registry,
}

impl Future for Waiter {
    type Output = Option<Arc<Published>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(Result::ok)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.registry.forget(&self.key, self.token);
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::{
        BlastRadius, Event, EventKind, OperationClass, Proposal, ProposalSpec, ProposalState,
    };

    use super::*;

    fn ended(tenant: &str, id: &str) -> Arc<Published> {
        let spec = ProposalSpec {
            action: "a".into(),
            class: OperationClass::Write,
            target: "t".into(),
            parameters: Default::default(),
            reason: "r".into(),
            blast_radius: BlastRadius::SingleDevice,
            operator: "o".into(),
            context_summary: String::new(),
            incident_id: String::new(),
            labels: Default::default(),
            rollback_plan: String::new(),
            force_approve_no_sop: false,
            idempotency_key: String::new(),
        };
        let proposal = Proposal {
            id: id.into(),
            tenant: tenant.into(),
            spec,
            state: ProposalState::Approved,
            submitted_by: "k".into(),
            submitted_by_person: None,
            created_at: 0,
            updated_at: 0,
            decision: None,
            suppressed_retries: 0,
            cancel_reason: None,
        };
        Arc::new(Published::new(Event::at(
            7,
            3,
            EventKind::Approved,
            ProposalState::Approved,
            0,
            proposal,
        )))
    }

    #[tokio::test]
    async fn a_waiter_gets_its_own_proposals_end_and_no_other() {
        let registry = Registry::default();
        let mine = registry.register("acme", "p1");
        let other_tenant = registry.register("globex", "p1");
        registry.wake(&ended("acme", "p1"));
        assert_eq!(mine.await.unwrap().event.proposal.id, "p1");
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), other_tenant);
        assert!(
            pending.await.is_err(),
            "another tenant's p1 must not wake it"
        );
    }

    #[test]
    fn dropped_waiters_leave_nothing_behind() {
        let registry = Registry::default();
        let a = registry.register("acme", "p1");
        let b = registry.register("acme", "p1");
        assert_eq!(registry.len(), 1);
        drop(a);
        assert_eq!(registry.len(), 1);
        drop(b);
        assert_eq!(registry.len(), 0);
    }
}
