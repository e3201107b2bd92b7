//! Group commit for submissions. In WAL mode a commit writes every page it
//! touched; a proposal touches about a dozen (the row, its indexes, its queue
//! entry and event). Submissions that arrive together share one transaction,
//! so the pages they share are written once. Each caller hears back only after
//! the commit: OK still means durable.

use rusqlite::Connection;

use super::{SqliteWriter, proposals};
use crate::group_commit::{Group, Lanes, MAX_GROUP, Submitter, Waiting};

/// Starts the committer; each group commits on the write thread.
pub fn start(writer: SqliteWriter) -> Submitter {
    Submitter::start(Lanes::One, move |group, waiting: Waiting| {
        let writer = writer.clone();
        async move {
            // A group lost with the thread has no one to answer: its callers
            // hear that their submission was dropped, and nothing was written.
            // The writer goes on to what waited meanwhile, group by group.
            let _ = writer
                .run(move |conn| {
                    let mut group = group;
                    while !group.is_empty() {
                        commit(conn, group);
                        group = waiting.take(MAX_GROUP);
                    }
                })
                .await;
        }
    })
}

#[tracing::instrument(name = "store.sqlite.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
fn commit(conn: &mut Connection, group: Group) {
    // The group is one transaction of one INSERT a submission: a submission
    // whose statement fails fails only itself.
    let (submissions, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let results = proposals::insert_group(conn, submissions);
    for (result, reply) in results.into_iter().zip(replies) {
        let _ = reply.send(result);
    }
}
