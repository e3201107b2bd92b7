//! The tenants' model calls per minute (migrations/sqlite/0019): a row per
//! call, checked and taken in one transaction on the one writer, so the
//! reviewers of every process sharing the database share each tenant's cap.

use async_trait::async_trait;
use countersign_domain::{Millis, model::budget};
use rusqlite::{Connection, params};

use super::SqliteStore;
use crate::{ModelCalls, Result};

/// Drops the tenant's calls that left the window, then takes one if the
/// rest leave room under `per_minute`.
#[tracing::instrument(name = "store.sqlite.take_model_call", level = "debug", skip(conn))]
pub fn take(conn: &mut Connection, tenant: &str, now: Millis, per_minute: u32) -> Result<bool> {
    let tx = conn.transaction()?;
    tx.prepare_cached("DELETE FROM model_calls WHERE tenant = ?1 AND at <= ?2")?
        .execute(params![tenant, budget::aged_out_at(now)])?;
    let counted: i64 = tx
        .prepare_cached("SELECT count(*) FROM model_calls WHERE tenant = ?1")?
        .query_row([tenant], |row| row.get(0))?;
    let taken = budget::admits(counted.max(0) as u64, per_minute);
    if taken {
        tx.prepare_cached("INSERT INTO model_calls (tenant, at) VALUES (?1, ?2)")?
            .execute(params![tenant, now])?;
    }
    tx.commit()?;
    Ok(taken)
}

#[async_trait]
impl ModelCalls for SqliteStore {
    async fn take_model_call(&self, tenant: &str, now: Millis, per_minute: u32) -> Result<bool> {
        if per_minute == 0 {
            return Ok(true);
        }
        let tenant = tenant.to_owned();
        self.write(move |conn| take(conn, &tenant, now, per_minute))
            .await
    }
}
