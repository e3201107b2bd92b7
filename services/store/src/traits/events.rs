use async_trait::async_trait;
use countersign_domain::{Event, EventHorizon, Millis};
use tokio::sync::broadcast;

use crate::{Pick, PickedPage, Result, StoreEvent};

/// State changes as they commit in this process: a wake-up signal for the
/// tasks that follow the store (the events table is the record).
pub trait Changes: Send + Sync + 'static {
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent>;
}

/// The event log: what watchers replay and the fan-out follows.
#[async_trait]
pub trait EventLog: Changes {
    /// Logged events, oldest first, each with its proposal as the event left
    /// it: with `tenant`, that tenant's events after its own cursor `after` (a
    /// watcher's replay); with `None`, every tenant's after log position
    /// `after` (the fan-out). See [`Event`] for the two numberings.
    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>>;
    /// Every tenant's next up to `limit` events after log position `after`,
    /// in one read: their heads first (position, tenant, proposal, kind),
    /// then whole, each with its proposal, the events `pick` takes, in log
    /// order. `pick` runs after the heads are read, so what it consults
    /// (who watches or waits for what) is no older than the page. The
    /// fan-out's read: most events concern no one in the process but their
    /// submitter, who has its answer.
    async fn events_picked(&self, after: u64, limit: u32, pick: Pick) -> Result<PickedPage>;
    /// How far the log reaches back, and its newest: `tenant`'s part in its
    /// own cursors, or (`None`) the whole log in positions.
    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon>;
    /// Deletes events committed before `created_before`; returns how many.
    async fn prune_events(&self, created_before: Millis) -> Result<u64>;
}
