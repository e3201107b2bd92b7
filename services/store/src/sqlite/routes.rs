//! The tenants' policy documents kept by id: routes and model profiles, each
//! kind put, listed and deleted by the same three statements.

use async_trait::async_trait;
use rusqlite::{Connection, params_from_iter, types::Value};

use super::SqliteStore;
use crate::policy::{Param, PolicyDocument, PolicyDocuments};
use crate::rows::NamedRows;
use crate::{Result, StoreError, now_ms};

impl From<Param> for Value {
    fn from(param: Param) -> Value {
        match param {
            Param::Text(text) => Value::Text(text),
            Param::Int(n) => Value::Integer(n),
        }
    }
}

#[tracing::instrument(name = "store.sqlite.put_policy", skip(conn, doc), fields(kind = D::KIND, id = %doc.id()))]
pub fn put<D: PolicyDocument>(conn: &Connection, tenant: &str, doc: &D) -> Result<D> {
    let mut params: Vec<Value> = vec![tenant.to_owned().into(), doc.id().to_owned().into()];
    params.extend(doc.params().into_iter().map(Value::from));
    params.push(now_ms().into());
    conn.prepare_cached(D::PUT)?
        .named_one(params_from_iter(params), |row| D::from_row(row))
}

/// The tenant's documents of a kind, by id: the statement the review's facts
/// read them with too.
pub fn list_statement<D: PolicyDocument>() -> String {
    format!("SELECT * FROM {} WHERE tenant = ?1 ORDER BY id", D::TABLE)
}

pub fn list<D: PolicyDocument>(conn: &Connection, tenant: &str) -> Result<Vec<D>> {
    conn.prepare_cached(&list_statement::<D>())?
        .named_rows([tenant], |row| D::from_row(row))
}

pub fn delete<D: PolicyDocument>(conn: &Connection, tenant: &str, id: &str) -> Result<D> {
    let statement = format!(
        "DELETE FROM {} WHERE tenant = ? AND id = ? RETURNING *",
        D::TABLE
    );
    conn.prepare_cached(&statement)?
        .named_row([tenant, id], |row| D::from_row(row))?
        .ok_or_else(|| StoreError::NotFound(format!("{} `{id}`", D::KIND)))
}

#[async_trait]
impl PolicyDocuments for SqliteStore {
    async fn put_document<D: PolicyDocument>(&self, tenant: &str, doc: &D) -> Result<D> {
        let (tenant, doc) = (tenant.to_owned(), doc.clone());
        self.write(move |conn| put(conn, &tenant, &doc)).await
    }

    async fn list_documents<D: PolicyDocument>(&self, tenant: &str) -> Result<Vec<D>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| list(conn, &tenant)).await
    }

    async fn delete_document<D: PolicyDocument>(&self, tenant: &str, id: &str) -> Result<D> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| delete(conn, &tenant, &id)).await
    }
}
