//! The tenants' routes.

use async_trait::async_trait;
use countersign_domain::escalation::Route;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use crate::escalation::{PUT_ROUTE, RouteRow, route_from_row};
use crate::{Result, Routes, StoreError, now_ms};

#[tracing::instrument(name = "store.sqlite.put_route", skip(conn, route), fields(route = %route.id))]
pub fn put(conn: &Connection, tenant: &str, route: &Route) -> Result<Route> {
    let row = RouteRow::of(route);
    conn.prepare_cached(PUT_ROUTE)?.query_row(
        params![
            tenant,
            route.id,
            row.actions_json,
            row.classes_json,
            row.blast_radii_json,
            row.target_selector_json,
            row.approvals_required,
            row.approver_roles_json,
            row.expires_after_ms,
            row.escalate_on_json,
            now_ms()
        ],
        |row| Ok(route_from_row(row)),
    )?
}

pub fn list(conn: &Connection, tenant: &str) -> Result<Vec<Route>> {
    conn.prepare_cached("SELECT * FROM routes WHERE tenant = ? ORDER BY id")?
        .query_map([tenant], |row| Ok(route_from_row(row)))?
        .map(|row| row?)
        .collect()
}

pub fn delete(conn: &Connection, tenant: &str, id: &str) -> Result<Route> {
    conn.prepare_cached("DELETE FROM routes WHERE tenant = ? AND id = ? RETURNING *")?
        .query_row([tenant, id], |row| Ok(route_from_row(row)))
        .optional()?
        .unwrap_or_else(|| Err(StoreError::NotFound(format!("route `{id}`"))))
}

#[async_trait]
impl Routes for SqliteStore {
    async fn put_route(&self, tenant: &str, route: &Route) -> Result<Route> {
        let (tenant, route) = (tenant.to_owned(), route.clone());
        self.write(move |conn| put(conn, &tenant, &route)).await
    }

    async fn list_routes(&self, tenant: &str) -> Result<Vec<Route>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| list(conn, &tenant)).await
    }

    async fn delete_route(&self, tenant: &str, id: &str) -> Result<Route> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| delete(conn, &tenant, &id)).await
    }
}
