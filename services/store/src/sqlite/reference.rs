//! SOPs and targets.

use std::collections::BTreeMap;

use async_trait::async_trait;
use countersign_domain::{Sop, Target, TargetStatus};
use rusqlite::{Connection, params};

use super::SqliteStore;
use crate::rows::NamedRows;
use crate::{Reference, Result, SopInput, StoreError, now_ms};

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
fn keep_version(conn: &Connection, tenant: &str, sop: &Sop) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO sop_versions (tenant, id, version, action, title, covers, rollback_path,
             max_blast_radius, selector_json, retired, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        tenant,
        sop.id,
        i64::from(sop.version),
        sop.action,
        sop.title,
        sop.covers,
        sop.rollback_path,
        sop.max_blast_radius.as_str(),
        serde_json::to_string(&sop.selector).expect("labels serialize"),
        sop.retired,
        sop.updated_at
    ])?;
    Ok(())
}

#[tracing::instrument(name = "store.sqlite.put_sop", skip(conn, input), fields(sop = %input.id))]
pub fn put_sop(conn: &mut Connection, tenant: &str, input: SopInput) -> Result<Sop> {
    let tx = conn.transaction()?;
    let sop = tx.prepare_cached(PUT_SOP)?.named_one(
        params![
            tenant,
            input.id,
            input.action,
            input.title,
            input.covers,
            input.rollback_path,
            input.max_blast_radius.as_str(),
            serde_json::to_string(&input.selector).expect("labels serialize"),
            now_ms()
        ],
        |row| sop_from_row(row),
    )?;
    keep_version(&tx, tenant, &sop)?;
    tx.commit()?;
    Ok(sop)
}

#[tracing::instrument(name = "store.sqlite.retire_sop", skip(conn))]
pub fn retire_sop(conn: &mut Connection, tenant: &str, id: &str) -> Result<Sop> {
    let tx = conn.transaction()?;
    let retired = tx
        .prepare_cached(RETIRE_SOP)?
        .named_row(params![tenant, id, now_ms()], |row| sop_from_row(row))?;
    let sop = match retired {
        Some(sop) => {
            keep_version(&tx, tenant, &sop)?;
            sop
        }
        // Already retired (it stays as it is), or no such SOP.
        None => {
            get_sop(&tx, tenant, id)?.ok_or_else(|| StoreError::NotFound(format!("SOP `{id}`")))?
        }
    };
    tx.commit()?;
    Ok(sop)
}

pub fn get_sop(conn: &Connection, tenant: &str, id: &str) -> Result<Option<Sop>> {
    conn.prepare_cached("SELECT * FROM sops WHERE tenant = ? AND id = ?")?
        .named_row([tenant, id], |row| sop_from_row(row))
}

/// A page in id order. Ids are never empty, so `''` is before the first.
pub fn list_sops(
    conn: &Connection,
    tenant: &str,
    include_retired: bool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Sop>> {
    conn.prepare_cached(
        "SELECT * FROM sops WHERE tenant = ? AND (? OR NOT retired) AND id > ?
         ORDER BY id LIMIT ?",
    )?
    .named_rows(
        params![tenant, include_retired, after.unwrap_or(""), limit],
        |row| sop_from_row(row),
    )
}

#[tracing::instrument(name = "store.sqlite.put_target", skip(conn, labels))]
pub fn put_target(
    conn: &Connection,
    tenant: &str,
    id: &str,
    status: TargetStatus,
    labels: BTreeMap<String, String>,
) -> Result<Target> {
    let target = crate::types::new_target(id, status, labels);
    conn.prepare_cached(
        "INSERT OR REPLACE INTO targets (tenant, id, status, labels_json, cluster, updated_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        tenant,
        id,
        status.as_str(),
        serde_json::to_string(&target.labels).expect("labels serialize"),
        target.cluster(),
        target.updated_at
    ])?;
    Ok(target)
}

pub fn get_target(conn: &Connection, tenant: &str, id: &str) -> Result<Option<Target>> {
    conn.prepare_cached("SELECT * FROM targets WHERE tenant = ? AND id = ?")?
        .named_row([tenant, id], |row| target_from_row(row))
}

/// A page in id order. Ids are never empty, so `''` is before the first.
pub fn list_targets(
    conn: &Connection,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Target>> {
    conn.prepare_cached("SELECT * FROM targets WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?")?
        .named_rows(params![tenant, after.unwrap_or(""), limit], |row| {
            target_from_row(row)
        })
}

#[async_trait]
impl Reference for SqliteStore {
    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop> {
        let tenant = tenant.to_owned();
        self.write(move |conn| put_sop(conn, &tenant, sop)).await
    }

    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| get_sop(conn, &tenant, &id)).await
    }

    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>> {
        let (tenant, after) = (tenant.to_owned(), after.map(str::to_owned));
        self.read(move |conn| list_sops(conn, &tenant, include_retired, after.as_deref(), limit))
            .await
    }

    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| retire_sop(conn, &tenant, &id)).await
    }

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: BTreeMap<String, String>,
    ) -> Result<Target> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| put_target(conn, &tenant, &id, status, labels))
            .await
    }

    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| get_target(conn, &tenant, &id)).await
    }

    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>> {
        let (tenant, after) = (tenant.to_owned(), after.map(str::to_owned));
        self.read(move |conn| list_targets(conn, &tenant, after.as_deref(), limit))
            .await
    }
}
