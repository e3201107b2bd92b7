//! PostgreSQL only: each tenant's submissions commit in a group of their own,
//! beside the other tenants' groups, so one tenant's flood or a stuck commit
//! never holds another tenant's Submit.

use std::time::Duration;

use countersign_test_support::{
    fixtures::{new_proposal, spec_on},
    postgres::TestDatabase,
};
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn a_tenant_submits_while_another_tenants_group_cannot_commit() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    store.create_tenant("flood").await.unwrap();
    store.create_tenant("quiet").await.unwrap();

    // Holds the flood tenant's row: its next insert waits on the row's lock
    // (the proposals' foreign key), inside its group's transaction.
    let mut owner = PgConnection::connect(&db.owner_url).await.unwrap();
    let mut hold = owner.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.tenant_id', 'flood', true)")
        .execute(&mut *hold)
        .await
        .unwrap();
    sqlx::query("SELECT name FROM tenants WHERE name = 'flood' FOR UPDATE")
        .fetch_one(&mut *hold)
        .await
        .unwrap();

    let stuck = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .insert_proposal(new_proposal("flood", spec_on("node-01")))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stuck.is_finished(),
        "the held row holds the flood's insert"
    );

    let quiet = tokio::time::timeout(
        Duration::from_secs(10),
        store.insert_proposal(new_proposal("quiet", spec_on("node-02"))),
    )
    .await
    .expect("the quiet tenant's Submit waited for the flood's group")
    .unwrap();
    assert_eq!(quiet.proposal().tenant, "quiet");
    assert!(!stuck.is_finished());

    hold.rollback().await.unwrap();
    let flood = tokio::time::timeout(Duration::from_secs(10), stuck)
        .await
        .expect("the flood's insert goes on once the row is free")
        .unwrap()
        .unwrap();
    assert_eq!(flood.proposal().tenant, "flood");
    assert_eq!(
        store
            .get_proposal("quiet", &quiet.proposal().id)
            .await
            .unwrap()
            .map(|p| p.id),
        Some(quiet.proposal().id.clone())
    );
}
