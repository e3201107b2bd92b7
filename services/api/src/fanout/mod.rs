//! [`Fanout`]: the one notification path of a process. A single pump reads
//! newly committed events from the store (woken by the store's in-process
//! signal, and on a short tick for events other processes commit) and hands
//! each, once, to every watcher of its tenant through a broadcast ring, and to
//! the `AwaitDecision` calls waiting for its proposal. No watcher reads the
//! database while it follows live; a slow one never slows the pump.

mod published;
mod pump;
mod waiters;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use countersign_store::{EventHead, Pick};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use published::{Published, waiting_for};
pub use pump::{live_position, spawn_pump};
pub use waiters::Waiter;

/// Settings of the notification path and of `Watch` streams.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// An idle stream gets a heartbeat at least this often.
    pub heartbeat: Duration,
    /// Events older than this are pruned; resuming before them is OUT_OF_RANGE.
    pub retention: Duration,
    /// Events a tenant's broadcast ring holds for watchers that lag.
    pub ring: usize,
    /// Notifications queued for one watcher before it counts as fallen behind.
    pub buffer: usize,
    /// How long a send to one watcher may wait (its client not reading) before
    /// the stream is ended.
    pub stall: Duration,
    /// How often the pump looks for events committed by other processes.
    pub poll_every: Duration,
    /// How often expired events are pruned.
    pub prune_every: Duration,
    /// Streams one API key may hold open in this process.
    pub max_streams_per_key: usize,
    /// Streams one tenant's keys may hold open in this process.
    pub max_streams_per_tenant: usize,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            heartbeat: Duration::from_secs(15),
            retention: Duration::from_secs(7 * 24 * 3600),
            ring: 4096,
            buffer: 1024,
            stall: Duration::from_secs(10),
            poll_every: Duration::from_millis(200),
            prune_every: Duration::from_secs(60),
            max_streams_per_key: 64,
            max_streams_per_tenant: 1024,
        }
    }
}

#[derive(Clone)]
pub struct Fanout {
    inner: Arc<Inner>,
}

/// Sees the events the pump publishes, before any watcher does: of a tenant
/// no stream watches, only the kinds it [`observes`](Observer::observes) are
/// sure to reach it.
pub trait Observer: Send + Sync {
    /// Whether events of `kind` matter to it.
    fn observes(&self, kind: countersign_domain::EventKind) -> bool;
    fn observe(&self, event: &countersign_domain::Event);
}

struct Inner {
    ring: usize,
    observers: Vec<Arc<dyn Observer>>,
    tenants: Mutex<HashMap<String, broadcast::Sender<Arc<Published>>>>,
    /// Streams that have subscribed, ever: a read by heads that saw it move
    /// may have left out events a new stream's replay did not reach.
    subscribed: AtomicU64,
    waiters: waiters::Registry,
    /// Cancelled by [`Fanout::close`]: every stream ends, and the pump stops.
    closing: CancellationToken,
}

impl Inner {
    /// Whether a stream watches `tenant` now.
    fn watched(&self, tenant: &str) -> bool {
        let tenants = self.tenants.lock().expect("fanout lock");
        tenants
            .get(tenant)
            .is_some_and(|sender| sender.receiver_count() > 0)
    }
}

impl Fanout {
    pub fn new(ring: usize, observers: Vec<Arc<dyn Observer>>) -> Self {
        Fanout {
            inner: Arc::new(Inner {
                ring: ring.max(1),
                observers,
                tenants: Mutex::new(HashMap::new()),
                subscribed: AtomicU64::new(0),
                waiters: waiters::Registry::default(),
                closing: CancellationToken::new(),
            }),
        }
    }

    /// Every event of `tenant` published from now on.
    pub fn subscribe(&self, tenant: &str) -> broadcast::Receiver<Arc<Published>> {
        let mut tenants = self.inner.tenants.lock().expect("fanout lock");
        self.inner.subscribed.fetch_add(1, Ordering::SeqCst);
        match tenants.get(tenant) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = broadcast::channel(self.inner.ring);
                tenants.insert(tenant.to_owned(), sender);
                receiver
            }
        }
    }

    /// Whether any stream watches any tenant now.
    pub fn has_watchers(&self) -> bool {
        let tenants = self.inner.tenants.lock().expect("fanout lock");
        tenants.values().any(|sender| sender.receiver_count() > 0)
    }

    /// How many streams have subscribed so far.
    pub fn subscriptions(&self) -> u64 {
        self.inner.subscribed.load(Ordering::SeqCst)
    }

    /// Resolves with the event that ends proposal `id` of `tenant`, if it is
    /// published while the waiter lives.
    pub fn await_end(&self, tenant: &str, id: &str) -> Waiter {
        self.inner.waiters.register(tenant, id)
    }

    /// Which events this process needs: every event of a tenant a stream
    /// watches, the kinds an observer reads, and the ends of the proposals a
    /// call awaits (consulted as each page of heads is read).
    pub fn pick(&self) -> Pick {
        let inner = self.inner.clone();
        Arc::new(move |head: &EventHead| {
            inner.observers.iter().any(|o| o.observes(head.kind))
                || (head.kind.is_terminal()
                    && inner.waiters.waits_for(&head.tenant, &head.proposal_id))
                || inner.watched(&head.tenant)
        })
    }

    /// Ends every stream (server shutdown).
    pub fn close(&self) {
        self.inner.closing.cancel();
    }

    /// Resolves once [`Fanout::close`] is called.
    pub fn closing(&self) -> Closing {
        Closing(self.inner.closing.clone())
    }

    fn publish(&self, published: Arc<Published>) {
        for observer in &self.inner.observers {
            observer.observe(&published.event);
        }
        if published.event.kind.is_terminal() {
            self.inner.waiters.wake(&published);
        }
        let mut tenants = self.inner.tenants.lock().expect("fanout lock");
        let tenant = published.event.tenant();
        if let Some(sender) = tenants.get(tenant)
            && sender.send(published.clone()).is_err()
        {
            // Nobody watches this tenant any more.
            tenants.remove(tenant);
        }
        drop(tenants);
    }
}

/// Resolves when the fan-out closes (the process stops serving).
pub struct Closing(CancellationToken);

impl Closing {
    pub async fn closed(&mut self) {
        self.0.cancelled().await;
    }
}
