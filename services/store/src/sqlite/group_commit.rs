//! Group commit for submissions. In WAL mode a commit writes every page it
//! touched; a proposal touches about a dozen (the row, its indexes, its queue
//! entry and event). Submissions that arrive together share one transaction,
//! so the pages they share are written once. Each caller hears back only after
//! the commit: OK still means durable.
//!
//! The writer goes on from one group to what waited meanwhile, but takes no
//! more than its [`Pace`] allows: about as many as it handles in one
//! commit's time. Everything that waited, taken at once, is answered at
//! once: its callers come back together, the writer takes the first of
//! them alone, and groups swing between one and nearly every caller, with
//! one core idle in turn. In paced groups the callers of one group are
//! answered, and submit again, while the writer works on the next
//! (BENCHMARKS.md, "the writer's pace").

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::{SqliteWriter, proposals};
use crate::group_commit::{Group, Lanes, MAX_GROUP, Submitter, Waiting};

/// Starts the committer; each group commits on the write thread.
pub fn start(writer: SqliteWriter) -> Submitter {
    let pace = Arc::new(Mutex::new(Pace::default()));
    Submitter::start(Lanes::One, move |group, waiting: Waiting| {
        let writer = writer.clone();
        let pace = pace.clone();
        async move {
            // A group lost with the thread has no one to answer: its callers
            // hear that their submission was dropped, and nothing was written.
            // The writer goes on to what waited meanwhile, group by group.
            let _ = writer
                .run(move |conn| {
                    let mut pace = pace.lock().unwrap_or_else(|e| e.into_inner());
                    paced(group, &waiting, &mut pace, |group| commit(conn, group));
                })
                .await;
        }
    })
}

/// Commits `group`, then what waited meanwhile, group by group, each as
/// large as `pace` allows after the groups before it.
fn paced(group: Group, waiting: &Waiting, pace: &mut Pace, mut commit: impl FnMut(Group) -> Timed) {
    let mut group = group;
    while !group.is_empty() {
        let n = group.len();
        let timed = commit(group);
        pace.observe(n, timed.group, timed.commit);
        group = waiting.take(pace.most());
    }
}

/// How long a group took, and its COMMIT within that.
struct Timed {
    group: Duration,
    commit: Duration,
}

#[tracing::instrument(name = "store.sqlite.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
fn commit(conn: &mut Connection, group: Group) -> Timed {
    let started = Instant::now();
    // The group is one transaction of one INSERT a submission: a submission
    // whose statement fails fails only itself.
    let (submissions, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let done = proposals::insert_group(conn, submissions);
    for (result, reply) in done.answers.into_iter().zip(replies) {
        let _ = reply.send(result);
    }
    Timed {
        group: started.elapsed(),
        commit: done.commit,
    }
}

/// How many submissions the writer's next group takes, from what its groups
/// have cost: a group's time is its COMMIT (the sync, whatever the group's
/// size) and each submission's share of the rest. A group takes as many as
/// keep its commit at half its time ([`Pace::COMMIT_SHARE`]): about as many
/// as the writer handles in one commit's time, and at least
/// [`Pace::FEWEST`]. A slow disk's sync makes the groups larger (up to
/// `MAX_GROUP`), a fast one smaller. Until a group has been timed, a group
/// takes everything waiting.
#[derive(Debug, Clone, Copy, Default)]
struct Pace {
    /// The commit's time, averaged (seconds; 0 until a group was timed).
    commit: f64,
    /// A submission's share of the rest of a group's time, averaged.
    each: f64,
}

impl Pace {
    /// A group takes at least this many: below it, what its submissions
    /// share (the indexes' last pages, the tenant's cursor row) is written
    /// once for too few of them.
    const FEWEST: usize = 4;
    /// The share of a group's time its commit is left.
    const COMMIT_SHARE: f64 = 0.5;
    /// The weight of the latest group in the averages.
    const WEIGHT: f64 = 0.1;

    fn observe(&mut self, n: usize, total: Duration, commit: Duration) {
        let commit = commit.as_secs_f64();
        let each = (total.as_secs_f64() - commit).max(0.0) / n.max(1) as f64;
        if self.each == 0.0 {
            (self.commit, self.each) = (commit, each);
            return;
        }
        self.commit += Self::WEIGHT * (commit - self.commit);
        self.each += Self::WEIGHT * (each - self.each);
    }

    /// The most the next group takes.
    fn most(&self) -> usize {
        if self.each <= 0.0 {
            return MAX_GROUP;
        }
        // commit / (commit + n * each) <= share  <=>  n >= commit * (1 - share) / (share * each)
        let n = self.commit * (1.0 - Self::COMMIT_SHARE) / (Self::COMMIT_SHARE * self.each);
        (n.ceil() as usize).clamp(Self::FEWEST, MAX_GROUP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_commit::tests::waiting_with;

    #[test]
    fn after_its_first_group_the_writer_takes_what_waits_at_its_pace() {
        let (waiting, _answers) = waiting_with(40);
        let first = waiting.take(1);
        let mut pace = Pace::default();
        let mut sizes = Vec::new();
        // Each group: a 700 µs commit beside 100 µs a submission.
        paced(first, &waiting, &mut pace, |group| {
            sizes.push(group.len());
            Timed {
                group: Duration::from_micros(700 + 100 * group.len() as u64),
                commit: Duration::from_micros(700),
            }
        });
        assert_eq!(sizes, [1, 7, 7, 7, 7, 7, 4], "seven a group once timed");
    }

    fn most_after(commit_us: u64, each_us: u64) -> usize {
        let mut pace = Pace::default();
        let n = 10;
        let commit = Duration::from_micros(commit_us);
        pace.observe(
            n,
            commit + Duration::from_micros(each_us * n as u64),
            commit,
        );
        pace.most()
    }

    #[test]
    fn a_group_is_as_large_as_its_commit_needs_and_no_larger() {
        assert_eq!(Pace::default().most(), MAX_GROUP, "untimed: all that waits");
        // A 700 µs commit beside 100 µs a submission: seven, and it is half.
        assert_eq!(most_after(700, 100), 7);
        // A slow disk's 5 ms sync beside 10 µs a submission: as many as a
        // group may take.
        assert_eq!(most_after(5_000, 10), MAX_GROUP);
        // No sync to speak of: still a few a group.
        assert_eq!(most_after(1, 50), Pace::FEWEST);
    }

    #[test]
    fn the_pace_follows_the_groups_as_they_are_timed() {
        let mut pace = Pace::default();
        let fast = Duration::from_micros(800);
        for _ in 0..100 {
            pace.observe(8, fast + Duration::from_micros(8 * 100), fast);
        }
        assert_eq!(pace.most(), 8);
        let slow = Duration::from_millis(2);
        for _ in 0..100 {
            pace.observe(8, slow + Duration::from_micros(8 * 100), slow);
        }
        assert_eq!(pace.most(), 20, "the disk slowed: larger groups");
    }
}
