//! The role checks: the service never runs on a role that row-level security
//! would not bind, and never on a schema older than this build.

use sqlx::{PgConnection, Row};

use crate::{Result, StoreError};

/// Refuses a role that is (or can become) a superuser or BYPASSRLS role, or
/// that owns (or can act as the owner of) any table of the schema.
pub async fn refuse_unsafe_role(conn: &mut PgConnection) -> Result<()> {
    let row = sqlx::query(
        "SELECT current_user::text AS role,
                EXISTS (SELECT 1 FROM pg_roles r
                        WHERE r.rolsuper AND pg_has_role(current_user, r.oid, 'MEMBER'))
                    AS superuser,
                EXISTS (SELECT 1 FROM pg_roles r
                        WHERE r.rolbypassrls AND pg_has_role(current_user, r.oid, 'MEMBER'))
                    AS bypassrls,
                (SELECT string_agg(c.relname::text, ', ' ORDER BY c.relname)
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
                   AND pg_has_role(current_user, c.relowner, 'MEMBER')) AS owned",
    )
    .fetch_one(conn)
    .await?;
    let role: String = row.try_get("role")?;
    let fix = "connect as a role with NOSUPERUSER NOBYPASSRLS that owns no table \
               (migrations run as the owner role; see README, PostgreSQL)";
    if row.try_get::<bool, _>("superuser")? {
        return Err(StoreError::UnsafeRole(format!(
            "`{role}`: it is a superuser (or can become one), and row-level security \
             does not apply to superusers; {fix}"
        )));
    }
    if row.try_get::<bool, _>("bypassrls")? {
        return Err(StoreError::UnsafeRole(format!(
            "`{role}`: it has BYPASSRLS (or can become a role that has), so row-level \
             security does not apply to it; {fix}"
        )));
    }
    if let Some(owned) = row.try_get::<Option<String>, _>("owned")? {
        return Err(StoreError::UnsafeRole(format!(
            "`{role}`: it owns the tables ({owned}), and an owner can turn row-level \
             security off; {fix}"
        )));
    }
    Ok(())
}

/// The tables whose rows belong to tenants: each must have row-level security
/// enabled and forced. So must every other table of the schema with a
/// `tenant` column ([`check_schema`] finds those itself), so a table a later
/// migration adds is covered whether or not it is named here.
const TENANT_TABLES: &[&str] = &[
    "tenants",
    "api_keys",
    "proposals",
    "sops",
    "sop_versions",
    "targets",
    "queue_entries",
    "decisions",
    "events",
    "discarded_results",
    "event_retention",
    "tenant_event_cursors",
    "tenant_event_retention",
    "breaker_resets",
    "audit_log",
    "audit_checkpoints",
    "routes",
    "escalations",
    "votes",
    "model_profiles",
];

/// The schema is at least this build's migrations, and every tenant table
/// (those named above, and any table with a `tenant` column) has row-level
/// security enabled and forced.
pub async fn check_schema(
    conn: &mut PgConnection,
    migrator: &sqlx::migrate::Migrator,
) -> Result<()> {
    let outdated = || {
        StoreError::FailedPrecondition(
            "the database schema is older than this build: run `countersign migrate` \
             with the owner role's URL (COUNTERSIGN_MIGRATE_DATABASE_URL)"
                .to_owned(),
        )
    };
    let applied: Vec<i64> = match sqlx::query_scalar(
        "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
    )
    .fetch_all(&mut *conn)
    .await
    {
        Ok(applied) => applied,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => {
            return Err(outdated());
        }
        Err(e) => return Err(e.into()),
    };
    if migrator
        .iter()
        .any(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version))
    {
        return Err(outdated());
    }
    let unprotected: Vec<String> = sqlx::query_scalar(
        "WITH tenant_tables AS (
             SELECT name FROM unnest($1::text[]) AS t(name)
             UNION
             SELECT c.relname::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
               AND a.attname = 'tenant' AND NOT a.attisdropped)
         SELECT t.name FROM tenant_tables t
         WHERE NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = current_schema() AND c.relname = t.name
                             AND c.relrowsecurity AND c.relforcerowsecurity)
         ORDER BY t.name",
    )
    .bind(TENANT_TABLES)
    .fetch_all(&mut *conn)
    .await?;
    if !unprotected.is_empty() {
        return Err(StoreError::FailedPrecondition(format!(
            "row-level security is not forced on {}: the schema was not made by \
             `countersign migrate`",
            unprotected.join(", ")
        )));
    }
    Ok(())
}
