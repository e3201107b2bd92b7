//! The outbox on PostgreSQL (see migrations/postgres/0006_outbox.sql): reads
//! across tenants in the system scope; marking uses its own UPDATE policy. The
//! queries' errors reach the publisher as the queue's backend errors.

use async_trait::async_trait;
use countersign_queue::{Outbox, QueueError};

use super::{PostgresStore, scope};
use crate::{Result, ReviewKey};

fn keys(rows: Vec<(String, String)>) -> Vec<ReviewKey> {
    rows.into_iter()
        .map(|(tenant, id)| ReviewKey { tenant, id })
        .collect()
}

#[async_trait]
impl Outbox for PostgresStore {
    async fn unpublished(&self, limit: u32) -> countersign_queue::Result<Vec<ReviewKey>> {
        self.unpublished_rows(limit)
            .await
            .map_err(QueueError::backend)
    }

    async fn mark_published(&self, keys: &[ReviewKey]) -> countersign_queue::Result<()> {
        self.mark_rows_published(keys)
            .await
            .map_err(QueueError::backend)
    }

    async fn undecided(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> countersign_queue::Result<Vec<ReviewKey>> {
        self.undecided_rows(after, limit)
            .await
            .map_err(QueueError::backend)
    }
}

impl PostgresStore {
    #[tracing::instrument(name = "store.postgres.unpublished", skip(self))]
    async fn unpublished_rows(&self, limit: u32) -> Result<Vec<ReviewKey>> {
        let mut tx = scope::system(&self.pool).await?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT tenant, proposal_id FROM queue_entries
             WHERE published_at IS NULL ORDER BY id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(keys(rows))
    }

    #[tracing::instrument(name = "store.postgres.mark_published", skip_all, fields(n = keys.len()))]
    async fn mark_rows_published(&self, keys: &[ReviewKey]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
        let mut tx = scope::system(&self.pool).await?;
        sqlx::query(
            "UPDATE queue_entries SET published_at = $2
             WHERE proposal_id = ANY($1) AND published_at IS NULL",
        )
        .bind(&ids)
        .bind(crate::now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(name = "store.postgres.undecided", skip(self))]
    async fn undecided_rows(&self, after: Option<&str>, limit: u32) -> Result<Vec<ReviewKey>> {
        let mut tx = scope::system(&self.pool).await?;
        // Published entries only: an unpublished one is the publisher's, and
        // re-publishing it here too would queue it twice.
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT p.tenant, p.id FROM proposals p
             JOIN queue_entries q ON q.proposal_id = p.id
             WHERE p.state IN ('pending', 'reviewing') AND p.id > $1
               AND q.published_at IS NOT NULL
             ORDER BY p.id LIMIT $2",
        )
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(keys(rows))
    }
}
