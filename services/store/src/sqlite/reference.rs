//! SOPs and targets.

use std::collections::BTreeMap;

use countersign_domain::{Sop, Target, TargetStatus};
use sqlx::SqlitePool;

use crate::{Result, SopInput, StoreError, now_ms};

pub(crate) use crate::rows::{sop_from_row, target_from_row};

async fn write_sop(pool: &SqlitePool, tenant: &str, sop: &Sop) -> Result<()> {
    let mut tx = pool.begin().await?;
    for table in ["sops", "sop_versions"] {
        let verb = if table == "sops" {
            "INSERT OR REPLACE"
        } else {
            "INSERT"
        };
        sqlx::query(&format!(
            "{verb} INTO {table} (tenant, id, version, action, title, covers, rollback_path,
                 max_blast_radius, selector_json, retired, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
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
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[tracing::instrument(name = "store.sqlite.put_sop", skip(pool, input), fields(sop = %input.id))]
pub async fn put_sop(pool: &SqlitePool, tenant: &str, input: SopInput) -> Result<Sop> {
    let current = get_sop(pool, tenant, &input.id).await?;
    let sop = Sop {
        version: current.map_or(1, |c| c.version + 1),
        id: input.id,
        action: input.action,
        title: input.title,
        covers: input.covers,
        rollback_path: input.rollback_path,
        max_blast_radius: input.max_blast_radius,
        selector: input.selector,
        retired: false,
        updated_at: now_ms(),
    };
    write_sop(pool, tenant, &sop).await?;
    Ok(sop)
}

pub async fn retire_sop(pool: &SqlitePool, tenant: &str, id: &str) -> Result<Sop> {
    let current = get_sop(pool, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("SOP `{id}`")))?;
    if current.retired {
        return Ok(current);
    }
    let sop = Sop {
        version: current.version + 1,
        retired: true,
        updated_at: now_ms(),
        ..current
    };
    write_sop(pool, tenant, &sop).await?;
    Ok(sop)
}

pub async fn get_sop(pool: &SqlitePool, tenant: &str, id: &str) -> Result<Option<Sop>> {
    sqlx::query("SELECT * FROM sops WHERE tenant = ? AND id = ?")
        .bind(tenant)
        .bind(id)
        .fetch_optional(pool)
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
