//! The tenants' routes, each in its tenant's row-level-security scope.

use async_trait::async_trait;
use countersign_domain::escalation::Route;

use super::{PostgresStore, scope};
use crate::escalation::{PUT_ROUTE, RouteRow, route_from_row};
use crate::{Result, Routes, StoreError, now_ms};

#[async_trait]
impl Routes for PostgresStore {
    #[tracing::instrument(name = "store.postgres.put_route", skip(self, route), fields(route = %route.id))]
    async fn put_route(&self, tenant: &str, route: &Route) -> Result<Route> {
        let row = RouteRow::of(route);
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let stored = sqlx::query(PUT_ROUTE)
            .bind(tenant)
            .bind(&route.id)
            .bind(&row.actions_json)
            .bind(&row.classes_json)
            .bind(&row.blast_radii_json)
            .bind(&row.target_selector_json)
            .bind(row.approvals_required)
            .bind(&row.approver_roles_json)
            .bind(row.expires_after_ms)
            .bind(&row.escalate_on_json)
            .bind(now_ms())
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        route_from_row(&stored)
    }

    async fn list_routes(&self, tenant: &str) -> Result<Vec<Route>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let rows = sqlx::query("SELECT * FROM routes WHERE tenant = $1 ORDER BY id COLLATE \"C\"")
            .bind(tenant)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(route_from_row).collect()
    }

    #[tracing::instrument(name = "store.postgres.delete_route", skip(self))]
    async fn delete_route(&self, tenant: &str, id: &str) -> Result<Route> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let row = sqlx::query("DELETE FROM routes WHERE tenant = $1 AND id = $2 RETURNING *")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        match row {
            Some(row) => route_from_row(&row),
            None => Err(StoreError::NotFound(format!("route `{id}`"))),
        }
    }
}
