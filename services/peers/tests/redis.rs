//! [`RedisPeers`]: what the processes of a deployment tell each other, and the
//! shared rejection tier. Against a real Redis (`countersign-test-support`).

use std::time::Duration;

use countersign_peers::{PeerMessage, PeerSignal, Peers, RedisPeers};
use countersign_test_support::redis::{options as isolated_options, url as redis_url};
use tokio::sync::broadcast::error::TryRecvError;

const WAIT: Duration = Duration::from_secs(5);

async fn peers(prefix: &str) -> std::sync::Arc<RedisPeers> {
    let peers = RedisPeers::new(&redis_url(), prefix, WAIT).unwrap();
    assert!(peers.subscribed(WAIT).await, "subscribed in time");
    peers
}

#[tokio::test]
async fn a_message_reaches_every_other_process_of_the_deployment_but_not_its_sender() {
    let prefix = isolated_options().prefix;
    let (a, b, c) = (
        peers(&prefix).await,
        peers(&prefix).await,
        peers(&prefix).await,
    );
    let other_deployment = peers(&isolated_options().prefix).await;
    let (mut at_a, mut at_b, mut at_c) = (a.subscribe(), b.subscribe(), c.subscribe());
    let mut elsewhere = other_deployment.subscribe();

    let message = PeerMessage::Invalidate {
        tenant: "acme".into(),
        scope: "target:node-01".into(),
        at: 42,
    };
    a.publish(&message).await.unwrap();
    for rx in [&mut at_b, &mut at_c] {
        let got = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, PeerSignal::Message(message.clone()));
    }
    b.publish(&PeerMessage::Events).await.unwrap();
    let got = tokio::time::timeout(WAIT, at_a.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, PeerSignal::Message(PeerMessage::Events));
    // The sender hears only the others; another prefix hears nothing.
    assert_eq!(at_a.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(elsewhere.try_recv(), Err(TryRecvError::Empty));
}

#[tokio::test]
async fn a_shared_rejection_is_read_back_with_the_latest_change_of_the_scopes_asked_about() {
    let prefix = isolated_options().prefix;
    let (a, b) = (peers(&prefix).await, peers(&prefix).await);
    let scopes = [
        "action:restart".to_owned(),
        "target:node-01".to_owned(),
        "policy".to_owned(),
    ];
    assert_eq!(a.rejection("acme", "fp-1", &scopes).await.unwrap(), None);

    a.put_rejection("fp-1", b"the rejection", WAIT)
        .await
        .unwrap();
    let found = b.rejection("acme", "fp-1", &scopes).await.unwrap().unwrap();
    assert_eq!(found.value, b"the rejection");
    assert_eq!(found.changed_at, None);

    let keep = Duration::from_secs(60);
    b.scope_changed("acme", "target:node-01", 1_000, keep)
        .await
        .unwrap();
    b.scope_changed("acme", "policy", 2_000, keep)
        .await
        .unwrap();
    // A late writer never moves a change back in time.
    a.scope_changed("acme", "policy", 1_500, keep)
        .await
        .unwrap();
    // Another tenant's change, or another scope's, is not asked about.
    a.scope_changed("other", "target:node-01", 9_000, keep)
        .await
        .unwrap();
    a.scope_changed("acme", "target:node-02", 9_000, keep)
        .await
        .unwrap();
    let found = a.rejection("acme", "fp-1", &scopes).await.unwrap().unwrap();
    assert_eq!(found.changed_at, Some(2_000));
}

#[tokio::test]
async fn a_shared_rejection_expires_with_its_ttl() {
    let prefix = isolated_options().prefix;
    let a = peers(&prefix).await;
    a.put_rejection("fp-short", b"x", Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(a.rejection("acme", "fp-short", &[]).await.unwrap(), None);
}
