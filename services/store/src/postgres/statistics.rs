//! Planner statistics for the tables the service writes fastest, refreshed on
//! the service's clock rather than autovacuum's (see
//! migrations/postgres/0009_statistics.sql).

use sqlx::PgPool;

use crate::Result;

/// ANALYZEs the tables that changed enough since their last analysis (none
/// while another process does it); returns how many.
#[tracing::instrument(
    name = "store.postgres.refresh_statistics",
    level = "debug",
    skip(pool)
)]
pub async fn refresh(pool: &PgPool) -> Result<u64> {
    let analysed: i32 = sqlx::query_scalar("SELECT countersign_refresh_statistics()")
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(analysed).unwrap_or(0))
}
