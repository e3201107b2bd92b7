//! SOPs and targets.

use std::collections::BTreeMap;

use async_trait::async_trait;
use countersign_domain::{Sop, Target, TargetStatus};
use sqlx::PgConnection;

use super::{PostgresStore, scope};
use crate::{Reference, Result, SopInput, StoreError, now_ms};

pub(crate) use crate::rows::{sop_from_row, target_from_row};

/// Creates the SOP at version 1 or replaces it with the next version, in one
/// statement: concurrent puts of one SOP wait for each other on its row (a
/// first put's insert included) and take consecutive versions.
const PUT_SOP: &str = "
INSERT INTO sops (tenant, id, version, action, title, covers, rollback_path, max_blast_radius,
    selector_json, retired, updated_at)
VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8, FALSE, $9)
ON CONFLICT (tenant, id) DO UPDATE SET version = sops.version + 1, action = excluded.action,
    title = excluded.title, covers = excluded.covers, rollback_path = excluded.rollback_path,
    max_blast_radius = excluded.max_blast_radius, selector_json = excluded.selector_json,
    retired = FALSE, updated_at = excluded.updated_at
RETURNING *";

/// Retires an active SOP as its next version (a retired one is left as it is).
const RETIRE_SOP: &str = "
UPDATE sops SET version = version + 1, retired = TRUE, updated_at = $3
WHERE tenant = $1 AND id = $2 AND NOT retired
RETURNING *";

/// Keeps `sop` in the version history, in the transaction that made it.
async fn keep_version(conn: &mut PgConnection, tenant: &str, sop: &Sop) -> Result<()> {
    sqlx::query(
        "INSERT INTO sop_versions (tenant, id, version, action, title, covers, rollback_path,
             max_blast_radius, selector_json, retired, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(tenant)
    .bind(&sop.id)
    .bind(i64::from(sop.version))
    .bind(&sop.action)
    .bind(&sop.title)
    .bind(&sop.covers)
    .bind(&sop.rollback_path)
    .bind(sop.max_blast_radius.as_str())
    .bind(serde_json::to_string(&sop.selector).expect("labels serialize"))
    .bind(sop.retired)
    .bind(sop.updated_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A target, read in the caller's transaction (in the tenant's scope).
pub async fn get_target(conn: &mut PgConnection, tenant: &str, id: &str) -> Result<Option<Target>> {
    sqlx::query("SELECT * FROM targets WHERE tenant = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(target_from_row)
        .transpose()
}

#[async_trait]
impl Reference for PostgresStore {
    #[tracing::instrument(name = "store.postgres.put_sop", skip(self, input), fields(sop = %input.id))]
    async fn put_sop(&self, tenant: &str, input: SopInput) -> Result<Sop> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let row = sqlx::query(PUT_SOP)
            .bind(tenant)
            .bind(&input.id)
            .bind(&input.action)
            .bind(&input.title)
            .bind(&input.covers)
            .bind(&input.rollback_path)
            .bind(input.max_blast_radius.as_str())
            .bind(serde_json::to_string(&input.selector).expect("labels serialize"))
            .bind(now_ms())
            .fetch_one(&mut *tx)
            .await?;
        let sop = sop_from_row(&row)?;
        keep_version(&mut tx, tenant, &sop).await?;
        tx.commit().await?;
        Ok(sop)
    }

    #[tracing::instrument(name = "store.postgres.retire_sop", skip(self))]
    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let retired = sqlx::query(RETIRE_SOP)
            .bind(tenant)
            .bind(id)
            .bind(now_ms())
            .fetch_optional(&mut *tx)
            .await?;
        let sop = match retired {
            Some(row) => {
                let sop = sop_from_row(&row)?;
                keep_version(&mut tx, tenant, &sop).await?;
                sop
            }
            // Already retired (it stays as it is), or no such SOP.
            None => sqlx::query("SELECT * FROM sops WHERE tenant = $1 AND id = $2")
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .as_ref()
                .map(sop_from_row)
                .transpose()?
                .ok_or_else(|| StoreError::NotFound(format!("SOP `{id}`")))?,
        };
        tx.commit().await?;
        Ok(sop)
    }

    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let row = sqlx::query("SELECT * FROM sops WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        row.as_ref().map(sop_from_row).transpose()
    }

    /// A page in id order (byte order, as SQLite's). Ids are never empty, so
    /// `''` is before the first.
    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let rows = sqlx::query(
            "SELECT * FROM sops WHERE tenant = $1 AND ($2 OR NOT retired)
                 AND id COLLATE \"C\" > $3
             ORDER BY id COLLATE \"C\" LIMIT $4",
        )
        .bind(tenant)
        .bind(include_retired)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(sop_from_row).collect()
    }

    #[tracing::instrument(name = "store.postgres.put_target", skip(self, labels))]
    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: BTreeMap<String, String>,
    ) -> Result<Target> {
        let target = crate::types::new_target(id, status, labels);
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        sqlx::query(
            "INSERT INTO targets (tenant, id, status, labels_json, cluster, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant, id) DO UPDATE SET status = excluded.status,
                 labels_json = excluded.labels_json, cluster = excluded.cluster,
                 updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(id)
        .bind(status.as_str())
        .bind(serde_json::to_string(&target.labels).expect("labels serialize"))
        .bind(target.cluster())
        .bind(target.updated_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(target)
    }

    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let target = get_target(&mut tx, tenant, id).await?;
        tx.commit().await?;
        Ok(target)
    }

    /// A page in id order (byte order, as SQLite's). Ids are never empty, so
    /// `''` is before the first.
    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let rows = sqlx::query(
            "SELECT * FROM targets WHERE tenant = $1 AND id COLLATE \"C\" > $2
             ORDER BY id COLLATE \"C\" LIMIT $3",
        )
        .bind(tenant)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(target_from_row).collect()
    }
}
