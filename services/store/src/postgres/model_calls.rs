//! The tenants' model calls per minute (migrations/postgres/0019): a row per
//! call, checked and taken in one transaction in the tenant's scope holding
//! the tenant's advisory lock, so the reviewers of every replica take a
//! tenant's calls one at a time and share its cap.

use async_trait::async_trait;
use countersign_domain::{Millis, model::budget};

use super::{PostgresStore, scope};
use crate::{ModelCalls, Result};

#[async_trait]
impl ModelCalls for PostgresStore {
    #[tracing::instrument(name = "store.postgres.take_model_call", level = "debug", skip(self))]
    async fn take_model_call(&self, tenant: &str, now: Millis, per_minute: u32) -> Result<bool> {
        if per_minute == 0 {
            return Ok(true);
        }
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        // The tenant's calls are counted and taken by one caller at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(73102914, hashtext($1))")
            .bind(tenant)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM model_calls WHERE tenant = $1 AND at <= $2")
            .bind(tenant)
            .bind(budget::aged_out_at(now))
            .execute(&mut *tx)
            .await?;
        let counted: i64 = sqlx::query_scalar("SELECT count(*) FROM model_calls WHERE tenant = $1")
            .bind(tenant)
            .fetch_one(&mut *tx)
            .await?;
        let taken = budget::admits(counted.max(0) as u64, per_minute);
        if taken {
            sqlx::query("INSERT INTO model_calls (tenant, at) VALUES ($1, $2)")
                .bind(tenant)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(taken)
    }
}
