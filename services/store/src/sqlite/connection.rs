//! Where the embedded database is and how its connections are opened: the
//! `sqlite:` URL, the file's mode, and the settings every connection takes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::Synchronous;
use crate::{Result, StoreError};

/// A statement this slow is a finding: it goes to the log.
const SLOW_STATEMENT: Duration = Duration::from_millis(250);

/// How long a connection waits for a lock another holds before it answers
/// `SQLITE_BUSY` (another process on the file, a checkpoint).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Room for every statement a connection runs again and again (the writer's
/// hot paths are about twenty).
const STATEMENT_CACHE: usize = 64;

/// The database a `sqlite:` URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    File(PathBuf),
    /// `sqlite::memory:`: one connection's private database, gone with it.
    Memory,
}

impl Location {
    /// `sqlite://path`, `sqlite:path` or `sqlite::memory:`; the path is
    /// percent-decoded; `?mode=rw` and `?mode=rwc` are accepted (the store
    /// creates a missing file either way), any other parameter is refused.
    pub(crate) fn parse(url: &str) -> Result<Location> {
        let rest = url
            .strip_prefix("sqlite:")
            .ok_or_else(|| StoreError::Unsupported(format!("not a sqlite: URL: `{url}`")))?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (database, parameters) = match rest.split_once('?') {
            Some((database, parameters)) => (database, parameters),
            None => (rest, ""),
        };
        for parameter in parameters.split('&').filter(|p| !p.is_empty()) {
            if !matches!(parameter, "mode=rw" | "mode=rwc") {
                return Err(StoreError::Unsupported(format!(
                    "database URL parameter `{parameter}` (the embedded store takes `mode=rw` or `mode=rwc`)"
                )));
            }
        }
        if database == ":memory:" {
            return Ok(Location::Memory);
        }
        if database.is_empty() {
            return Err(StoreError::Unsupported(format!(
                "the database URL `{url}` names no file"
            )));
        }
        Ok(Location::File(PathBuf::from(percent_decode(database)?)))
    }
}

fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    StoreError::Unsupported(format!("a malformed %-escape in `{text}`"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| StoreError::Unsupported(format!("`{text}` is not UTF-8 once decoded")))
}

/// The file a `sqlite:` URL names (`None` for an in-memory database).
pub fn database_file(url: &str) -> Result<Option<PathBuf>> {
    Ok(match Location::parse(url)? {
        Location::File(path) => Some(path),
        Location::Memory => None,
    })
}

/// Creates an empty database file (SQLite takes an empty file for an empty
/// database) with mode 0600, where there is none yet; an existing file is
/// left as it is. A missing directory is left for the open to report.
pub(crate) fn create_owner_only(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;

    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(StoreError::Unavailable(format!(
            "creating {}: {e}",
            path.display()
        ))),
    }
}

fn log_slow(statement: &str, took: Duration) {
    if took >= SLOW_STATEMENT {
        tracing::warn!(
            elapsed_ms = took.as_millis() as u64,
            statement = statement.trim(),
            "slow SQLite statement"
        );
    }
}

/// The writer's connection: it makes the file WAL (every later connection
/// finds it so) and commits as `synchronous` says.
pub(crate) fn open_writer(location: &Location, synchronous: Synchronous) -> Result<Connection> {
    let mut conn = match location {
        Location::File(path) => {
            create_owner_only(path)?;
            Connection::open_with_flags(path, OpenFlags::default())?
        }
        Location::Memory => Connection::open_in_memory()?,
    };
    configure(&mut conn)?;
    // Every transaction takes the write lock at its BEGIN, waiting out the
    // busy timeout for it. One that began as a reader (its first statement a
    // read) could not take the lock later once another process on the file
    // (`countersign admin`) had committed since: SQLite fails it at once,
    // with no wait. This process writes through this connection alone, so
    // taking the lock early holds no one of ours back.
    conn.set_transaction_behavior(TransactionBehavior::Immediate);
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // A batch statement inside a transaction keeps a statement journal (the
    // pages it changed, as they were, so that it can fail alone); past 64 KiB
    // SQLite spills it to a temporary file, written and thrown away at every
    // batch. In memory it is never written: about a ninth of the writer's
    // bytes written a decision (BENCHMARKS.md).
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(
        None,
        "synchronous",
        match synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        },
    )?;
    Ok(conn)
}

/// A reader's connection: read-only, a WAL reader beside the writer.
pub(crate) fn open_reader(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    configure(&mut conn)?;
    Ok(conn)
}

/// What every connection takes: the busy timeout, foreign keys, the slow
/// statement log, a statement cache.
fn configure(conn: &mut Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.profile(Some(log_slow));
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_a_file_or_memory_and_refuses_what_the_store_cannot_honour() {
        let file = |p: &str| Location::File(PathBuf::from(p));
        assert_eq!(
            Location::parse("sqlite://data/cs.db").unwrap(),
            file("data/cs.db")
        );
        assert_eq!(
            Location::parse("sqlite:///var/cs.db").unwrap(),
            file("/var/cs.db")
        );
        assert_eq!(Location::parse("sqlite:cs.db").unwrap(), file("cs.db"));
        assert_eq!(
            Location::parse("sqlite://data/cs.db?mode=rwc").unwrap(),
            file("data/cs.db")
        );
        assert_eq!(
            Location::parse("sqlite://a%20b.db").unwrap(),
            file("a b.db")
        );
        assert_eq!(
            Location::parse("sqlite::memory:").unwrap(),
            Location::Memory
        );
        for refused in [
            "sqlite://cs.db?mode=ro",
            "sqlite://cs.db?cache=shared",
            "sqlite://",
            "sqlite://bad%zz.db",
            "postgres://x/y",
        ] {
            assert!(
                matches!(Location::parse(refused), Err(StoreError::Unsupported(_))),
                "{refused}"
            );
        }
    }

    /// A writer's transaction that reads before it writes, with another
    /// process committing between the two: the other waits for it, and both
    /// commit.
    #[test]
    fn another_processs_commit_never_fails_a_writer_transaction_that_read_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut conn = open_writer(&Location::File(path.clone()), Synchronous::Full).unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY)")
            .unwrap();
        let tx = conn.transaction().unwrap();
        let before: i64 = tx
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        let other = std::thread::spawn(move || {
            let other = Connection::open(&path).unwrap();
            other.busy_timeout(BUSY_TIMEOUT).unwrap();
            other.execute("INSERT INTO t VALUES (1)", []).map(|_| ())
        });
        // Time for the other process's insert to commit, were it not held.
        std::thread::sleep(Duration::from_millis(300));
        tx.execute("INSERT INTO t VALUES (?)", [before + 2])
            .expect("the writer's transaction keeps its lock from its start");
        tx.commit().unwrap();
        other.join().unwrap().unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    /// Bytes this thread has passed to `write` so far.
    fn written_by_this_thread() -> u64 {
        std::fs::read_to_string("/proc/thread-self/io")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("wchar:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }

    /// A statement that changes many pages inside a transaction journals
    /// them in memory: nothing is written until the commit.
    #[test]
    fn the_writers_statement_journals_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("s.db"));
        let conn = open_writer(&location, Synchronous::Full).unwrap();
        conn.execute_batch(
            "CREATE TABLE t (n INTEGER PRIMARY KEY, body BLOB CHECK (length(body) > 0));
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT i, randomblob(1000) FROM n;",
        )
        .unwrap();
        conn.execute_batch("BEGIN; UPDATE t SET body = randomblob(1000) WHERE n = 1;")
            .unwrap();
        let before = written_by_this_thread();
        // 400 rows, under a constraint that may fail the statement after some
        // of them: SQLite journals the hundred-odd pages it changes (some
        // 400 KB, well past the 64 KiB it holds in memory otherwise), and the
        // page cache holds them all until the commit.
        conn.execute("UPDATE t SET body = randomblob(1000) WHERE n <= 400", [])
            .unwrap();
        let journalled = written_by_this_thread() - before;
        conn.execute_batch("COMMIT").unwrap();
        assert!(
            journalled < 64 * 1024,
            "the statement wrote {journalled} bytes before its commit"
        );
    }
}
