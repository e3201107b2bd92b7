//! The tenants' policy documents kept by id: routes and model profiles, each
//! kind put, listed and deleted by the same three statements, each in its
//! tenant's row-level-security scope.

use async_trait::async_trait;

use super::{PostgresStore, scope};
use crate::policy::{Param, PolicyDocument, PolicyDocuments};
use crate::{Result, StoreError, now_ms};

/// The tenant's documents of a kind, by id (byte order): the statement the
/// review's facts read them with too.
pub(super) fn list_statement<D: PolicyDocument>() -> String {
    format!(
        "SELECT * FROM {} WHERE tenant = $1 ORDER BY id COLLATE \"C\"",
        D::TABLE
    )
}

#[async_trait]
impl PolicyDocuments for PostgresStore {
    #[tracing::instrument(name = "store.postgres.put_policy", skip(self, doc), fields(kind = D::KIND, id = %doc.id()))]
    async fn put_document<D: PolicyDocument>(&self, tenant: &str, doc: &D) -> Result<D> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let mut query = sqlx::query(D::PUT).bind(tenant).bind(doc.id());
        for param in doc.params() {
            query = match param {
                Param::Text(text) => query.bind(text),
                Param::Int(n) => query.bind(n),
            };
        }
        let stored = query.bind(now_ms()).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        D::from_row(&stored)
    }

    async fn list_documents<D: PolicyDocument>(&self, tenant: &str) -> Result<Vec<D>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let rows = sqlx::query(&list_statement::<D>())
            .bind(tenant)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(D::from_row).collect()
    }

    #[tracing::instrument(name = "store.postgres.delete_policy", skip(self), fields(kind = D::KIND))]
    async fn delete_document<D: PolicyDocument>(&self, tenant: &str, id: &str) -> Result<D> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let statement = format!(
            "DELETE FROM {} WHERE tenant = $1 AND id = $2 RETURNING *",
            D::TABLE
        );
        let row = sqlx::query(&statement)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        match row {
            Some(row) => D::from_row(&row),
            None => Err(StoreError::NotFound(format!("{} `{id}`", D::KIND))),
        }
    }
}
