//! The pump: the only reader of new events in a process.

use std::{sync::Arc, time::Duration};

use countersign_domain::EventKind;
use countersign_peers::{PeerMessage, PeerSignal, Peers};
use countersign_store::{Escalations, EventLog, StoreEvent};
use tokio::{
    sync::broadcast::{
        self,
        error::{RecvError, TryRecvError},
    },
    task::JoinHandle,
};

use super::{Fanout, Published, WatchConfig, waiting_for};

/// Events read per query while catching up.
const PAGE: u32 = 512;
/// Pause after a failed read before trying again.
const BACKOFF: Duration = Duration::from_millis(500);
/// How long the events of decisions answered as they were stored may wait
/// for a read (see [`Wanted::Soon`]): one read answers every commit of that
/// time, not each of them its own, and the observers (the operator breaker's
/// count) still learn of them within it.
const SOON: Duration = Duration::from_millis(20);

/// Where the pump starts: the log position of the newest event committed now
/// (what is older is for replays to read). Read before the server answers its first call: an
/// `AwaitDecision` that saw its proposal still open must hear of every event
/// after that read, and a pump that took its start later could begin past the
/// decision and never publish it (the call would then wait out its deadline).
/// Retries while the log cannot be read.
pub async fn live_position(store: &dyn EventLog) -> u64 {
    loop {
        match store.event_horizon(None).await {
            Ok(horizon) => return horizon.latest,
            Err(error) => {
                tracing::warn!(%error, "fanout: cannot read the event log yet");
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// Starts the pump at `position` (see [`live_position`]); it runs until
/// [`Fanout::close`]. With `peers`, another process's "events committed"
/// wakes it at once, not at the next tick.
/// `escalations` supplies what an ESCALATED proposal's events show.
pub fn spawn_pump(
    fanout: Fanout,
    store: Arc<dyn EventLog>,
    escalations: Arc<dyn Escalations>,
    config: WatchConfig,
    peers: Option<Arc<dyn Peers>>,
    position: u64,
) -> JoinHandle<()> {
    tokio::spawn(run(fanout, store, escalations, config, peers, position))
}

async fn run(
    fanout: Fanout,
    store: Arc<dyn EventLog>,
    escalations: Arc<dyn Escalations>,
    config: WatchConfig,
    peers: Option<Arc<dyn Peers>>,
    mut position: u64,
) {
    let mut closing = fanout.closing();
    let mut signals = Some(store.subscribe());
    let mut remote = peers.map(|peers| peers.subscribe());
    let mut tick = tokio::time::interval(config.poll_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prune = tokio::time::interval(config.prune_every);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the events of answered decisions are read, if nothing reads them
    // sooner.
    let mut soon: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = closing.closed() => return,
            signal = next_signal(&mut signals) => match signal {
                // The store's signal is gone: the tick carries on alone.
                Err(_) => signals = None,
                // Only watchers want a proposal's progress: with none, its
                // events wait in the log for the next read (the tick's, or a
                // decision's) and reach the watchers of later in order.
                Ok(Wanted::ByWatchers) if !fanout.has_watchers() => continue,
                Ok(Wanted::Soon) if !fanout.has_watchers() => {
                    soon.get_or_insert_with(|| tokio::time::Instant::now() + SOON);
                    continue;
                }
                Ok(_) => {}
            },
            () = until(soon) => {}
            wake = next_remote(&mut remote) => {
                if !wake {
                    continue;
                }
            }
            _ = tick.tick() => {}
            _ = prune.tick() => {
                prune_expired(&*store, config.retention).await;
                continue;
            }
        }
        soon = None;
        position = drain(&fanout, &*store, &*escalations, position).await;
    }
}

/// Resolves at `at`; never without it.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Who wants the events a signal announces, in the order they win when
/// signals are swallowed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Wanted {
    /// Watchers only: a proposal's progress (submitted, review started).
    ByWatchers,
    /// Watchers and the observers, but no call: a decision answered to the
    /// call that stored it ([`StoreEvent::answered`]). Without watchers it
    /// is read within [`SOON`], with what else committed by then.
    Soon,
    /// Also the calls awaiting a decision and the suppression cache (or
    /// unknown: signals were lost).
    ByAll,
}

fn wanted(event: &StoreEvent) -> Wanted {
    match event.kind {
        EventKind::Submitted | EventKind::ReviewStarted => Wanted::ByWatchers,
        _ if event.answered => Wanted::Soon,
        _ => Wanted::ByAll,
    }
}

/// Waits for a signal and swallows the ones queued behind it: one read
/// answers them all.
async fn next_signal(
    signals: &mut Option<tokio::sync::broadcast::Receiver<StoreEvent>>,
) -> Result<Wanted, RecvError> {
    let Some(rx) = signals else {
        return std::future::pending().await;
    };
    let mut want = match rx.recv().await {
        Ok(event) => wanted(&event),
        Err(RecvError::Lagged(_)) => Wanted::ByAll,
        Err(RecvError::Closed) => return Err(RecvError::Closed),
    };
    loop {
        let next = match rx.try_recv() {
            Ok(event) => wanted(&event),
            Err(TryRecvError::Lagged(_)) => Wanted::ByAll,
            Err(_) => return Ok(want),
        };
        want = want.max(next);
    }
}

/// Waits for the next word from another process; true when it says events
/// were committed (or that some word may have been lost).
async fn next_remote(remote: &mut Option<broadcast::Receiver<PeerSignal>>) -> bool {
    let Some(rx) = remote else {
        return std::future::pending().await;
    };
    match rx.recv().await {
        Ok(PeerSignal::Message(PeerMessage::Events) | PeerSignal::Reconnected)
        | Err(RecvError::Lagged(_)) => true,
        Ok(PeerSignal::Message(_)) => false,
        Err(RecvError::Closed) => {
            *remote = None;
            false
        }
    }
}

/// Publishes the events after log position `position` that someone in the
/// process needs, in order; returns the new position. The log is read by
/// heads, and only what someone needs is read whole ([`Fanout::pick`]): the
/// events of a tenant a stream watches, what an observer reads, the ends of
/// proposals a call awaits. A decision answered to its submitter, that no
/// one else waits for or watches, is not read back at all. A stream that
/// subscribed during the read may have replayed the log before the page's
/// heads were committed: the page is then read again, whole.
async fn drain(
    fanout: &Fanout,
    store: &dyn EventLog,
    escalations: &dyn Escalations,
    mut position: u64,
) -> u64 {
    loop {
        let subscribed = fanout.subscriptions();
        let read = match store.events_picked(position, PAGE, fanout.pick()).await {
            Ok(_) if fanout.subscriptions() != subscribed => store
                .events_after(position, None, PAGE)
                .await
                .map(|events| {
                    let examined = events.len() as u32;
                    let through = events.last().map_or(position, |e| e.position);
                    (events, examined, through)
                }),
            read => read.map(|page| (page.events, page.examined, page.through)),
        };
        match read {
            Ok((events, examined, through)) => {
                for event in events {
                    let waiting = waiting_for(escalations, &event).await;
                    fanout.publish(Arc::new(Published::waiting(event, waiting)));
                }
                position = through;
                if examined < PAGE {
                    return position;
                }
            }
            Err(error) => {
                tracing::warn!(%error, position, "fanout: reading new events failed");
                tokio::time::sleep(BACKOFF).await;
                return position;
            }
        }
    }
}

async fn prune_expired(store: &dyn EventLog, retention: Duration) {
    let cutoff = countersign_domain::now_ms()
        .saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
    match store.prune_events(cutoff).await {
        Ok(0) => {}
        Ok(pruned) => tracing::info!(pruned, "pruned events past retention"),
        Err(error) => tracing::warn!(%error, "pruning events failed"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use countersign_domain::{Event, EventKind};
    use countersign_store::{Proposals, ReviewKey, Reviews, Tenants};
    use countersign_test_support::fixtures;

    use super::*;
    use crate::fanout::Observer;

    /// Records every event it is shown; reads rejections.
    #[derive(Default)]
    struct Shown(Mutex<Vec<(String, EventKind)>>);

    impl Observer for Shown {
        fn observes(&self, kind: EventKind) -> bool {
            kind == EventKind::Rejected
        }

        fn observe(&self, event: &Event) {
            let mut shown = self.0.lock().unwrap();
            shown.push((event.proposal.id.clone(), event.kind));
        }
    }

    fn signal(kind: EventKind, answered: bool) -> StoreEvent {
        StoreEvent {
            cursor: None,
            tenant: "a".into(),
            proposal_id: "p".into(),
            kind,
            state: countersign_domain::ProposalState::Rejected,
            answered,
        }
    }

    /// A decision answered to the call that stored it waits a moment for
    /// its read; any other end is read at once; progress only for watchers.
    /// Swallowed together, the most wanted signal wins.
    #[tokio::test]
    async fn signals_say_who_wants_their_events_and_the_most_wanted_wins() {
        assert_eq!(wanted(&signal(EventKind::Rejected, true)), Wanted::Soon);
        assert_eq!(wanted(&signal(EventKind::Rejected, false)), Wanted::ByAll);
        assert_eq!(wanted(&signal(EventKind::Cancelled, false)), Wanted::ByAll);
        assert_eq!(
            wanted(&signal(EventKind::Submitted, false)),
            Wanted::ByWatchers
        );
        let (tx, rx) = broadcast::channel(8);
        let mut rx = Some(rx);
        tx.send(signal(EventKind::Submitted, false)).unwrap();
        tx.send(signal(EventKind::Approved, true)).unwrap();
        assert_eq!(next_signal(&mut rx).await.unwrap(), Wanted::Soon);
        tx.send(signal(EventKind::Approved, true)).unwrap();
        tx.send(signal(EventKind::Approved, false)).unwrap();
        tx.send(signal(EventKind::Submitted, false)).unwrap();
        assert_eq!(next_signal(&mut rx).await.unwrap(), Wanted::ByAll);
    }

    async fn submitted(store: &countersign_store::SqliteStore) -> String {
        let new = fixtures::new_proposal("a", fixtures::spec());
        store
            .insert_proposal(new)
            .await
            .unwrap()
            .proposal()
            .id
            .clone()
    }

    /// With no stream watching its tenant, the pump reads whole only the
    /// events an observer reads and the ends a call awaits, and still moves
    /// past every event; once a stream watches the tenant, it publishes every
    /// event of it again.
    #[tokio::test]
    async fn with_no_stream_watching_a_tenant_only_what_someone_needs_of_it_is_read_whole() {
        let (store, _dir) = countersign_test_support::sqlite::store().await;
        let store = Arc::new(store);
        store.create_tenant("a").await.unwrap();
        let shown = Arc::new(Shown::default());
        let fanout = Fanout::new(64, vec![shown.clone()]);
        // Another tenant's watcher changes nothing for this one.
        let _elsewhere = fanout.subscribe("b");

        let rejected = submitted(&store).await;
        let key = ReviewKey {
            tenant: "a".into(),
            id: rejected.clone(),
        };
        store.begin_reviews(&[key]).await.unwrap();
        let rejection = fixtures::rejection(&fixtures::spec(), "target_state");
        store
            .record_decision("a", &rejected, rejection)
            .await
            .unwrap();
        let awaited = submitted(&store).await;
        let waiter = fanout.await_end("a", &awaited);
        let unwatched = submitted(&store).await;
        for id in [&awaited, &unwatched] {
            store.cancel_proposal("a", id, "no", None).await.unwrap();
        }

        let latest = store.event_horizon(None).await.unwrap().latest;
        let position = drain(&fanout, &*store, &*store, 0).await;
        assert_eq!(position, latest, "past every event, read whole or not");
        assert_eq!(
            *shown.0.lock().unwrap(),
            [
                (rejected.clone(), EventKind::Rejected),
                (awaited.clone(), EventKind::Cancelled)
            ],
            "the rejection an observer reads and the end a call awaits, nothing else"
        );
        let ended = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the awaited end is published")
            .expect("the waiter is woken");
        assert_eq!(ended.event.proposal.id, awaited);
        assert_eq!(ended.event.kind, EventKind::Cancelled);

        let mut watching = fanout.subscribe("a");
        let next = submitted(&store).await;
        drain(&fanout, &*store, &*store, position).await;
        let published = watching.try_recv().expect("a watcher gets every event");
        assert_eq!(
            (published.event.proposal.id.as_str(), published.event.kind),
            (next.as_str(), EventKind::Submitted)
        );
    }
}
