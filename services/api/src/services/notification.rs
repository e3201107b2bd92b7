//! `countersign.v1.NotificationService`: a tenant's review stream. Each
//! stream replays from the store (when asked to resume), then follows the
//! process's one [`Fanout`], with no gap and no duplicate at the handover:
//! it subscribes before its last read and drops live events it already sent.
//! Every cursor a stream shows or accepts is its tenant's own (see
//! [`countersign_domain::Event`]): it counts no other tenant's events.

use std::{
    collections::{HashMap, HashSet},
    pin::Pin,
    sync::{Arc, Mutex},
};

use countersign_domain::{Event, Permission};
use countersign_proto::{
    OrStatus,
    convert::event::heartbeat,
    v1::{Notification, WatchRequest, notification_service_server::NotificationService},
};
use countersign_store::{Escalations, EventLog};
use tokio::sync::{
    broadcast::{self, error::RecvError},
    mpsc,
};
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};

use crate::{
    context::{Caller, require_id},
    fanout::{Fanout, Published, WatchConfig, waiting_for},
    services::{Receipts, Viewer},
};

/// Events read per query while replaying.
const PAGE: u32 = 256;
pub const MAX_PROPOSAL_IDS: usize = 1000;
const MAX_OPERATOR: usize = 256;

pub struct NotificationApi {
    store: Arc<dyn EventLog>,
    /// What an ESCALATED proposal's replayed events show.
    escalations: Arc<dyn Escalations>,
    fanout: Fanout,
    config: WatchConfig,
    slots: StreamSlots,
    /// What signs the receipts of approvals' notifications.
    receipts: Receipts,
}

impl NotificationApi {
    pub fn new(
        store: Arc<dyn EventLog>,
        escalations: Arc<dyn Escalations>,
        fanout: Fanout,
        config: WatchConfig,
        receipts: Receipts,
    ) -> Self {
        NotificationApi {
            store,
            escalations,
            fanout,
            config,
            slots: StreamSlots::default(),
            receipts,
        }
    }
}

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Notification, Status>> + Send>>;

#[tonic::async_trait]
impl NotificationService for NotificationApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let caller = Caller::authorize(&request, Permission::Watch)?;
        let request = request.into_inner();
        let filter = Filter::from_request(&request)?;
        let slot = self.slots.take(&caller, &self.config)?;
        // Subscribe first: whatever is published from here on reaches us.
        let live = self.fanout.subscribe(&caller.tenant.name);
        let horizon = self
            .store
            .event_horizon(Some(&caller.tenant.name))
            .await
            .or_status()?;
        let position = match request.after_cursor {
            None => None,
            Some(after) => {
                if horizon.is_pruned(after) {
                    return Err(Status::out_of_range(format!(
                        "after_cursor: {after} is older than the retained history; the oldest \
                         event available is {}: resume with after_cursor = {} (or 0)",
                        horizon.pruned_through + 1,
                        horizon.pruned_through
                    )));
                }
                Some(after)
            }
        };
        let (tx, rx) = mpsc::channel(self.config.buffer.max(1));
        let (end_tx, end_rx) = mpsc::channel(1);
        let watcher = Watcher {
            store: self.store.clone(),
            escalations: self.escalations.clone(),
            tenant: caller.tenant.name.clone(),
            viewer: Viewer::of(&caller),
            receipts: self.receipts.clone(),
            filter,
            config: self.config,
            // Live from now: from what is committed now, whether or not the
            // pump has published it yet.
            position: position.unwrap_or(horizon.latest),
            live,
            tx,
        };
        let closing = self.fanout.closing();
        let connected = Connected::open(&caller.tenant.name);
        tokio::spawn(async move {
            let _held = (slot, connected);
            let end = watcher.run(position.is_some(), closing).await;
            if let Some(status) = end {
                let _ = end_tx.send(status).await;
            }
        });
        metrics::counter!("countersign_watch_streams_total").increment(1);
        let stream = ReceiverStream::new(rx)
            .map(Ok)
            .chain(ReceiverStream::new(end_rx).map(Err));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The streams open in this process, per API key and per tenant, each count
/// capped (`watch.max_streams_per_key`, `watch.max_streams_per_tenant`): one
/// key cannot hold the memory of thousands of streams.
#[derive(Default, Clone)]
struct StreamSlots(Arc<Mutex<OpenStreams>>);

#[derive(Default)]
struct OpenStreams {
    by_key: HashMap<String, usize>,
    by_tenant: HashMap<String, usize>,
}

impl StreamSlots {
    /// A slot for one more stream of the caller's key and tenant, or
    /// RESOURCE_EXHAUSTED naming the limit it would pass.
    fn take(&self, caller: &Caller, config: &WatchConfig) -> Result<Slot, Status> {
        let key = &caller.principal.key_id;
        let tenant = &caller.tenant.name;
        let mut open = self.0.lock().expect("stream slots lock");
        let refused = |scope: &str, setting: &str, limit: usize| {
            metrics::counter!("countersign_watch_refused_total", "limit" => setting.to_owned())
                .increment(1);
            Status::resource_exhausted(format!(
                "{scope} has {limit} Watch streams open, the most allowed \
                 (watch.{setting} = {limit}): end one before opening another"
            ))
        };
        if open.by_key.get(key).copied().unwrap_or(0) >= config.max_streams_per_key {
            return Err(refused(
                "this API key",
                "max_streams_per_key",
                config.max_streams_per_key,
            ));
        }
        if open.by_tenant.get(tenant).copied().unwrap_or(0) >= config.max_streams_per_tenant {
            return Err(refused(
                "this tenant",
                "max_streams_per_tenant",
                config.max_streams_per_tenant,
            ));
        }
        *open.by_key.entry(key.clone()).or_default() += 1;
        *open.by_tenant.entry(tenant.clone()).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            key: key.clone(),
            tenant: tenant.clone(),
        })
    }
}

/// One open stream's place in [`StreamSlots`], given back when the stream's
/// task ends (client gone, cut off, shutdown) or the call is refused.
struct Slot {
    slots: StreamSlots,
    key: String,
    tenant: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.0.lock().expect("stream slots lock");
        let open = &mut *open;
        for (counts, name) in [
            (&mut open.by_key, &self.key),
            (&mut open.by_tenant, &self.tenant),
        ] {
            if let Some(n) = counts.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(name);
                }
            }
        }
    }
}

/// One open stream in `countersign_watchers_connected{tenant}`: up when the
/// stream opens, down when its task ends (client gone, cut off, shutdown).
struct Connected(String);

impl Connected {
    fn open(tenant: &str) -> Connected {
        metrics::gauge!("countersign_watchers_connected", "tenant" => tenant.to_owned())
            .increment(1.0);
        Connected(tenant.to_owned())
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        metrics::gauge!("countersign_watchers_connected", "tenant" => self.0.clone())
            .decrement(1.0);
    }
}

/// Which events a stream wants.
struct Filter {
    ids: HashSet<String>,
    operator: Option<String>,
    terminal_only: bool,
}

impl Filter {
    fn from_request(request: &WatchRequest) -> Result<Filter, Status> {
        if request.proposal_ids.len() > MAX_PROPOSAL_IDS {
            return Err(Status::invalid_argument(format!(
                "proposal_ids: at most {MAX_PROPOSAL_IDS} ids"
            )));
        }
        for (i, id) in request.proposal_ids.iter().enumerate() {
            require_id(&format!("proposal_ids[{i}]"), id)?;
        }
        if request.operator.len() > MAX_OPERATOR {
            return Err(Status::invalid_argument(format!(
                "operator: must be at most {MAX_OPERATOR} bytes"
            )));
        }
        Ok(Filter {
            ids: request.proposal_ids.iter().cloned().collect(),
            operator: (!request.operator.is_empty()).then(|| request.operator.clone()),
            terminal_only: request.terminal_only,
        })
    }

    fn matches(&self, event: &Event) -> bool {
        (self.ids.is_empty() || self.ids.contains(&event.proposal.id))
            && self
                .operator
                .as_ref()
                .is_none_or(|o| *o == event.proposal.spec.operator)
            && (!self.terminal_only || event.kind.is_terminal())
    }
}

struct Watcher {
    store: Arc<dyn EventLog>,
    escalations: Arc<dyn Escalations>,
    tenant: String,
    viewer: Viewer,
    receipts: Receipts,
    filter: Filter,
    config: WatchConfig,
    /// Every event up to here has been sent or did not match.
    position: u64,
    live: broadcast::Receiver<Arc<Published>>,
    tx: mpsc::Sender<Notification>,
}

/// Why a stream ended early: `None` when the client went away.
type End = Option<Status>;

impl Watcher {
    async fn run(mut self, replay: bool, mut closing: crate::fanout::Closing) -> End {
        if replay && let Err(end) = self.catch_up().await {
            return end;
        }
        let idle = tokio::time::sleep(self.config.heartbeat);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                _ = closing.closed() => {
                    return Some(Status::unavailable(format!(
                        "server shutting down; resume from cursor {}",
                        self.position
                    )));
                }
                _ = self.tx.closed() => return None,
                _ = &mut idle => {
                    let beat = heartbeat(self.position, countersign_domain::now_ms());
                    let _ = self.tx.try_send(beat);
                }
                received = self.live.recv() => match received {
                    Ok(published) => match self.offer(&published) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(end) => return end,
                    },
                    // This task fell behind the ring (not its client): what it
                    // missed is in the store.
                    Err(RecvError::Lagged(_)) => {
                        if let Err(end) = self.catch_up().await {
                            return end;
                        }
                    }
                    Err(RecvError::Closed) => {
                        return Some(Status::unavailable(format!(
                            "notification path closed: resume from cursor {}",
                            self.position
                        )));
                    }
                },
            }
            idle.as_mut()
                .reset(tokio::time::Instant::now() + self.config.heartbeat);
        }
    }

    /// Queues one live event without waiting: a client whose buffer is full has
    /// fallen behind and is cut off. Returns whether something was sent.
    fn offer(&mut self, published: &Published) -> Result<bool, End> {
        let event = &published.event;
        if event.cursor <= self.position {
            return Ok(false); // sent during the replay
        }
        if !self.filter.matches(event) {
            self.position = event.cursor;
            return Ok(false);
        }
        match self
            .tx
            .try_send(published.notification(self.viewer, &self.receipts).clone())
        {
            Ok(()) => {
                self.position = event.cursor;
                Ok(true)
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(Some(self.fell_behind())),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(None),
        }
    }

    /// Sends every stored event after `position`, page by page, at the
    /// client's pace (bounded by the stall limit).
    async fn catch_up(&mut self) -> Result<(), End> {
        loop {
            let page = self
                .store
                .events_after(self.position, Some(&self.tenant), PAGE)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "watch replay failed");
                    Some(Status::unavailable(format!(
                        "event log unavailable: resume from cursor {}",
                        self.position
                    )))
                })?;
            let short = page.len() < PAGE as usize;
            for event in page {
                let cursor = event.cursor;
                if self.filter.matches(&event) {
                    let waiting = waiting_for(&*self.escalations, &event).await;
                    let published = Published::waiting(event, waiting);
                    let sent = tokio::time::timeout(
                        self.config.stall,
                        self.tx
                            .send(published.notification(self.viewer, &self.receipts).clone()),
                    )
                    .await;
                    match sent {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return Err(None),
                        Err(_) => return Err(Some(self.fell_behind())),
                    }
                }
                self.position = cursor;
            }
            if short {
                return Ok(());
            }
        }
    }

    /// The status that ends a stream whose client fell behind (and counts it).
    fn fell_behind(&self) -> Status {
        metrics::counter!("countersign_watch_cut_off_total").increment(1);
        Status::resource_exhausted(format!(
            "watcher fell behind: resume from cursor {}",
            self.position
        ))
    }
}
