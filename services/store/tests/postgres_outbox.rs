//! PostgreSQL only: the outbox that feeds the Redis queue. A proposal's row is
//! unpublished from its commit until marked; undecided proposals are listed
//! across tenants for the sweeper.

use countersign_queue::Outbox;
use countersign_store::{DynStore, PostgresStore, ReviewKey};
use countersign_test_support::{
    fixtures::{new_proposal, spec_on},
    postgres::TestDatabase,
};

async fn submit(store: &DynStore, tenant: &str, target: &str) -> ReviewKey {
    let proposal = store
        .insert_proposal(new_proposal(tenant, spec_on(target)))
        .await
        .unwrap()
        .proposal()
        .clone();
    ReviewKey {
        tenant: tenant.into(),
        id: proposal.id,
    }
}

async fn stores(db: &TestDatabase) -> (DynStore, PostgresStore) {
    let outbox = PostgresStore::connect_with(&db.app_url, 2).await.unwrap();
    (db.store().await, outbox)
}

#[tokio::test]
async fn a_committed_proposal_is_unpublished_until_marked_in_every_tenant() {
    let db = TestDatabase::migrated().await;
    let (store, outbox) = stores(&db).await;
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let first = submit(&store, "a", "node-01").await;
    let second = submit(&store, "b", "node-02").await;

    assert_eq!(
        outbox.unpublished(10).await.unwrap(),
        vec![first.clone(), second.clone()]
    );
    outbox
        .mark_published(std::slice::from_ref(&first))
        .await
        .unwrap();
    assert_eq!(outbox.unpublished(10).await.unwrap(), vec![second.clone()]);
    outbox.mark_published(&[first, second]).await.unwrap();
    assert!(outbox.unpublished(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn undecided_pages_through_published_pending_and_reviewing_proposals_of_every_tenant() {
    let db = TestDatabase::migrated().await;
    let (store, outbox) = stores(&db).await;
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let mut keys = vec![
        submit(&store, "a", "node-01").await,
        submit(&store, "b", "node-02").await,
        submit(&store, "a", "node-03").await,
    ];
    let cancelled = submit(&store, "b", "node-04").await;
    store
        .cancel_proposal("b", &cancelled.id, "not needed", None)
        .await
        .unwrap();
    store
        .begin_reviews(&[countersign_store::ReviewKey {
            tenant: String::from("a"),
            id: String::from(&keys[0].id),
        }])
        .await
        .unwrap();
    outbox.mark_published(&keys).await.unwrap();
    outbox.mark_published(&[cancelled]).await.unwrap();
    // Not yet published: the publisher's, not the sweeper's.
    submit(&store, "b", "node-05").await;
    keys.sort_by(|x, y| x.id.cmp(&y.id));

    let first = outbox.undecided(None, 2).await.unwrap();
    let rest = outbox
        .undecided(Some(&first.last().unwrap().id), 2)
        .await
        .unwrap();
    assert_eq!([first, rest].concat(), keys);
}
