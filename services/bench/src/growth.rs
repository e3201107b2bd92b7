//! The growth run's seed: a million decided proposals (with their decisions and
//! events) written straight into the server's database (its SQLite file, or
//! its PostgreSQL database as the owner role), in slices, so that
//! `submit-decide` can be measured again against full tables.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use sqlx::{
    ConnectOptions, Connection,
    postgres::PgConnectOptions,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

const SLICE: u64 = 50_000;

/// A PostgreSQL slice. Each seeded proposal logs two events at commit
/// (SUBMITTED and its decision), each a bump of the tenant's cursor row, and
/// a transaction that updates one row n times walks the chain of its n
/// versions on every update: a slice's commit grows with the square of its
/// events (50,000 proposals a slice ran one commit for more than six
/// minutes), so slices stay small.
const PG_SLICE: u64 = 2_000;

/// When seeded proposal `i` was decided: one per millisecond from here.
pub fn seeded_at(i: u64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Whole days, so that every run of one process agrees.
    let day = 24 * 3600 * 1000;
    (now / day - 30) * day + i as i64
}

/// The seeded proposals' columns (the caller adds the `SELECT` of its dialect).
const SEEDED_PROPOSALS: &str = "INSERT INTO proposals (id, tenant, action, class, target,
        blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at,
        updated_at, review_started_at, decided_at)";

/// Each seeded proposal's decision (the caller adds `FROM proposals WHERE …`).
const DECISIONS_OF_SEEDED: &str = "INSERT INTO decisions (proposal_id, tenant, outcome, reason,
        agent_message, sop_id, sop_version, rollback_path, gates_json, missing_gates_json,
        reviewer, decided_at, summary, review_latency_ms)
    SELECT id, tenant, CASE state WHEN 'approved' THEN 'approve' ELSE 'reject' END,
           'seeded', 'seeded', 'SOP-BENCH', 1, 'start it again', '[]',
           CASE state WHEN 'approved' THEN '[]' ELSE '[\"target_state\"]' END,
           'seed', decided_at, 'Decision: seeded', 1";

/// The spec every seeded proposal carries.
fn seeded_spec() -> String {
    serde_json::json!({
        "action": "bench_restart", "class": "write", "target": "bench-0",
        "parameters": {"n": 0}, "reason": "benchmark", "blast_radius": "single_device",
        "operator": "bench", "context_summary": "", "incident_id": "", "labels": {},
        "rollback_plan": "", "force_approve_no_sop": false, "idempotency_key": ""
    })
    .to_string()
}

/// Writes seeded proposals `from..to` of tenant `default` (decided; 80%
/// approved, 20% rejected, over `pool` targets, a month ago, one per ms); the
/// server must be stopped. Returns how long it took. Proposal `i` goes to
/// target `i % pool` and is rejected when `i / pool % 5 == 0`, so every
/// target holds both outcomes in the same shares and a target + outcome page
/// finds its entries instead of reading the whole target to answer empty.
pub async fn seed_decided(db: &Path, from: u64, to: u64, pool: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut conn = SqliteConnectOptions::new()
        .filename(db)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(60))
        .disable_statement_logging()
        .connect()
        .await?;
    let spec = seeded_spec();
    let base = seeded_at(0);
    let n = to;
    let mut from = from;
    while from < n {
        let to = (from + SLICE).min(n);
        let mut tx = conn.begin().await?;
        // The insert triggers write each proposal's queue entry and event.
        sqlx::query(&format!(
            "WITH RECURSIVE s(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?2)
             {SEEDED_PROPOSALS}
             SELECT printf('SEED%022d', i), 'default', 'bench_restart', 'write',
                    'bench-' || (i % ?3), 'single_device', 'bench', ?4, printf('%064d', i),
                    CASE WHEN (i / ?3) % 5 = 0 THEN 'rejected' ELSE 'approved' END, 'seed',
                    ?5 + i, ?5 + i, ?5 + i, ?5 + i
             FROM s"
        ))
        .bind(from as i64)
        .bind(to as i64)
        .bind(pool.max(1) as i64)
        .bind(&spec)
        .bind(base)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "{DECISIONS_OF_SEEDED}
             FROM proposals WHERE id >= printf('SEED%022d', ?1) AND id < printf('SEED%022d', ?2)"
        ))
        .bind(from as i64)
        .bind(to as i64)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM queue_entries WHERE proposal_id >= 'SEED'")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        from = to;
    }
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await?;
    Ok(started.elapsed())
}

/// [`seed_decided`] on PostgreSQL, as the owner role (`owner_url`): each slice
/// is one transaction that sets its tenant (the tables force row-level
/// security on their owner too). The insert triggers write each proposal's
/// event (at commit, under the event log's lock) and queue entry, which the
/// slice then deletes: the seed is decided, nothing is left to publish. The
/// decisions draw their commit order, so the server's sequencer chains them
/// into the audit log as it would its own.
pub async fn seed_decided_postgres(
    owner_url: &str,
    from: u64,
    to: u64,
    pool: u64,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    // Seeding slices take seconds each by design: no slow-statement warnings.
    let mut conn = owner_url
        .parse::<PgConnectOptions>()?
        .disable_statement_logging()
        .connect()
        .await?;
    let spec = seeded_spec();
    let base = seeded_at(0);
    let mut from = from;
    while from < to {
        let end = (from + PG_SLICE).min(to);
        let mut tx = conn.begin().await?;
        sqlx::query("SELECT set_config('app.tenant_id', 'default', true)")
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "{SEEDED_PROPOSALS}
             SELECT 'SEED' || lpad(i::text, 22, '0'), 'default', 'bench_restart', 'write',
                    'bench-' || (i % $3), 'single_device', 'bench', $4, lpad(i::text, 64, '0'),
                    CASE WHEN (i / $3) % 5 = 0 THEN 'rejected' ELSE 'approved' END, 'seed',
                    $5 + i, $5 + i, $5 + i, $5 + i
             FROM generate_series($1::bigint, $2::bigint - 1) AS i"
        ))
        .bind(from as i64)
        .bind(end as i64)
        .bind(pool.max(1) as i64)
        .bind(&spec)
        .bind(base)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "{DECISIONS_OF_SEEDED}
             FROM proposals
             WHERE id >= 'SEED' || lpad($1::text, 22, '0') AND id < 'SEED' || lpad($2::text, 22, '0')
             ORDER BY id"
        ))
        .bind(from as i64)
        .bind(end as i64)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM queue_entries WHERE proposal_id >= 'SEED'")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        from = end;
    }
    sqlx::query("ANALYZE proposals, decisions, events, queue_entries")
        .execute(&mut conn)
        .await?;
    Ok(started.elapsed())
}
