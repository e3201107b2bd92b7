//! Group commit for submissions. In WAL mode a commit writes every page it
//! touched; a proposal touches about a dozen (the row, its indexes, its queue
//! entry and event). Submissions that arrive together share one transaction,
//! so the pages they share are written once. Each caller hears back only after
//! the commit: OK still means durable.

use sqlx::SqlitePool;

use super::proposals;
use crate::StoreError;
use crate::group_commit::{Group, Submitter};

/// Starts the committer on the writer pool.
pub fn start(writer: SqlitePool) -> Submitter {
    Submitter::start(move |group| {
        let writer = writer.clone();
        async move { commit(&writer, group).await }
    })
}

#[tracing::instrument(name = "store.sqlite.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
async fn commit(writer: &SqlitePool, group: Group) {
    let mut tx = match writer.begin().await {
        Ok(tx) => tx,
        Err(error) => {
            for (_, reply) in group {
                let _ = reply.send(Err(StoreError::Unavailable(error.to_string())));
            }
            return;
        }
    };
    // A failed submission fails only itself; the others go on.
    let (news, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let results = proposals::insert_group(&mut tx, news).await;
    match tx.commit().await {
        Ok(()) => {
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(result);
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(format!(
                    "commit failed: {error}"
                ))));
            }
        }
    }
}
