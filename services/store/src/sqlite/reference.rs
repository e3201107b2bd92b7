//! SOPs and targets.

use std::collections::BTreeMap;

use countersign_domain::{Sop, Target, TargetStatus};
use sqlx::{SqliteConnection, SqlitePool};

use crate::{Result, SopInput, StoreError, now_ms};

pub(crate) use crate::rows::{sop_from_row, target_from_row};

/// Creates the SOP at version 1 or replaces it with the next version, in one
/// statement: the version is read and bumped where it is written, so puts of
/// one SOP, however many at once, take consecutive versions.
const PUT_SOP: &str = "
INSERT INTO sops (tenant, id, version, action, title, covers, rollback_path, max_blast_radius,
    selector_json, retired, updated_at)
VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9)
ON CONFLICT (tenant, id) DO UPDATE SET version = sops.version + 1, action = excluded.action,
    title = excluded.title, covers = excluded.covers, rollback_path = excluded.rollback_path,
    max_blast_radius = excluded.max_blast_radius, selector_json = excluded.selector_json,
    retired = 0, updated_at = excluded.updated_at
RETURNING *";

/// Retires an active SOP as its next version (a retired one is left as it is).
const RETIRE_SOP: &str = "
UPDATE sops SET version = version + 1, retired = 1, updated_at = ?3
WHERE tenant = ?1 AND id = ?2 AND NOT retired
RETURNING *";

/// Keeps `sop` in the version history, in the transaction that made it.
async fn keep_version(conn: &mut SqliteConnection, tenant: &str, sop: &Sop) -> Result<()> {
    sqlx::query(
        "INSERT INTO sop_versions (tenant, id, version, action, title, covers, rollback_path,
             max_blast_radius, selector_json, retired, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

#[tracing::instrument(name = "store.sqlite.put_sop", skip(pool, input), fields(sop = %input.id))]
pub async fn put_sop(pool: &SqlitePool, tenant: &str, input: SopInput) -> Result<Sop> {
    let mut tx = pool.begin().await?;
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

#[tracing::instrument(name = "store.sqlite.retire_sop", skip(pool))]
pub async fn retire_sop(pool: &SqlitePool, tenant: &str, id: &str) -> Result<Sop> {
    let mut tx = pool.begin().await?;
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
        None => get_sop(&mut *tx, tenant, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("SOP `{id}`")))?,
    };
    tx.commit().await?;
    Ok(sop)
}

pub async fn get_sop<'e>(
    db: impl sqlx::SqliteExecutor<'e>,
    tenant: &str,
    id: &str,
) -> Result<Option<Sop>> {
    sqlx::query("SELECT * FROM sops WHERE tenant = ? AND id = ?")
        .bind(tenant)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(sop_from_row)
        .transpose()
}

/// A page in id order. Ids are never empty, so `''` is before the first.
pub async fn list_sops(
    pool: &SqlitePool,
    tenant: &str,
    include_retired: bool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Sop>> {
    sqlx::query(
        "SELECT * FROM sops WHERE tenant = ? AND (? OR NOT retired) AND id > ?
         ORDER BY id LIMIT ?",
    )
    .bind(tenant)
    .bind(include_retired)
    .bind(after.unwrap_or(""))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?
    .iter()
    .map(sop_from_row)
    .collect()
}

#[tracing::instrument(name = "store.sqlite.put_target", skip(pool, labels))]
pub async fn put_target(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    status: TargetStatus,
    labels: BTreeMap<String, String>,
) -> Result<Target> {
    let target = Target {
        id: id.to_owned(),
        status,
        labels,
        updated_at: now_ms(),
    };
    sqlx::query(
        "INSERT OR REPLACE INTO targets (tenant, id, status, labels_json, cluster, updated_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(tenant)
    .bind(id)
    .bind(status.as_str())
    .bind(serde_json::to_string(&target.labels).expect("labels serialize"))
    .bind(target.cluster())
    .bind(target.updated_at)
    .execute(pool)
    .await?;
    Ok(target)
}

pub async fn get_target<'e>(
    db: impl sqlx::SqliteExecutor<'e>,
    tenant: &str,
    id: &str,
) -> Result<Option<Target>> {
    sqlx::query("SELECT * FROM targets WHERE tenant = ? AND id = ?")
        .bind(tenant)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(target_from_row)
        .transpose()
}

/// A page in id order. Ids are never empty, so `''` is before the first.
pub async fn list_targets(
    pool: &SqlitePool,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Target>> {
    sqlx::query("SELECT * FROM targets WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?")
        .bind(tenant)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?
        .iter()
        .map(target_from_row)
        .collect()
}
