//! SOPs and targets.

use std::collections::BTreeMap;

use countersign_domain::{Sop, Target, TargetStatus};
use sqlx::{PgConnection, PgPool};

use super::scope;
use crate::{Result, SopInput, StoreError, now_ms};

pub(crate) use crate::rows::{sop_from_row, target_from_row};

/// The current SOP row and its version history entry.
async fn write_sop(conn: &mut PgConnection, tenant: &str, sop: &Sop) -> Result<()> {
    for table in ["sops", "sop_versions"] {
        let upsert = if table == "sops" {
            "ON CONFLICT (tenant, id) DO UPDATE SET version = excluded.version,
                 action = excluded.action, title = excluded.title, covers = excluded.covers,
                 rollback_path = excluded.rollback_path,
                 max_blast_radius = excluded.max_blast_radius,
                 selector_json = excluded.selector_json, retired = excluded.retired,
                 updated_at = excluded.updated_at"
        } else {
            ""
        };
        sqlx::query(&format!(
            "INSERT INTO {table} (tenant, id, version, action, title, covers, rollback_path,
                 max_blast_radius, selector_json, retired, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) {upsert}"
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
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The current version, locked until the transaction ends (two puts of one
/// SOP take consecutive versions).
async fn current_sop(conn: &mut PgConnection, tenant: &str, id: &str) -> Result<Option<Sop>> {
    sqlx::query("SELECT * FROM sops WHERE tenant = $1 AND id = $2 FOR UPDATE")
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(sop_from_row)
        .transpose()
}

#[tracing::instrument(name = "store.postgres.put_sop", skip(pool, input), fields(sop = %input.id))]
pub async fn put_sop(pool: &PgPool, tenant: &str, input: SopInput) -> Result<Sop> {
    let mut tx = scope::tenant(pool, tenant).await?;
    let current = current_sop(&mut tx, tenant, &input.id).await?;
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
    write_sop(&mut tx, tenant, &sop).await?;
    tx.commit().await?;
    Ok(sop)
}

#[tracing::instrument(name = "store.postgres.retire_sop", skip(pool))]
pub async fn retire_sop(pool: &PgPool, tenant: &str, id: &str) -> Result<Sop> {
    let mut tx = scope::tenant(pool, tenant).await?;
    let current = current_sop(&mut tx, tenant, id)
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
    write_sop(&mut tx, tenant, &sop).await?;
    tx.commit().await?;
    Ok(sop)
}

pub async fn get_sop(pool: &PgPool, tenant: &str, id: &str) -> Result<Option<Sop>> {
    let mut tx = scope::tenant(pool, tenant).await?;
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
pub async fn list_sops(
    pool: &PgPool,
    tenant: &str,
    include_retired: bool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Sop>> {
    let mut tx = scope::tenant(pool, tenant).await?;
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

#[tracing::instrument(name = "store.postgres.put_target", skip(pool, labels))]
pub async fn put_target(
    pool: &PgPool,
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
    let mut tx = scope::tenant(pool, tenant).await?;
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

pub async fn get_target_in(pool: &PgPool, tenant: &str, id: &str) -> Result<Option<Target>> {
    let mut tx = scope::tenant(pool, tenant).await?;
    let target = get_target(&mut tx, tenant, id).await?;
    tx.commit().await?;
    Ok(target)
}

/// A page in id order (byte order, as SQLite's). Ids are never empty, so
/// `''` is before the first.
pub async fn list_targets(
    pool: &PgPool,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Target>> {
    let mut tx = scope::tenant(pool, tenant).await?;
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
