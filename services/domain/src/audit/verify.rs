//! Recomputes a chain entry by entry (streaming: a million entries never sit
//! in memory) and names the first one that does not hold: a broken link, or
//! (where the store's copies of the record's fields come with the entries)
//! a copy that does not say what its chained record says.

use super::{CopyCheck, EMPTY_HEAD, Hash, chain, parse_hash, time_index::Tide};

crate::named_enum! {
    /// Why an entry fails verification.
    pub enum FailureKind as "verification failure" {
        /// The record or its digest was changed (or cannot be read).
        Altered => "altered",
        /// A sequence number is absent: a row was deleted.
        Missing => "missing",
        /// Entries are out of order: rows were swapped or moved.
        Reordered => "reordered",
        /// The log is shorter than a checkpoint says it was.
        Truncated => "truncated",
        /// The log has a different history than the checkpoint pinned.
        CheckpointMismatch => "checkpoint_mismatch",
        /// The entry holds, but a stored copy of its record's fields (a
        /// filter column, its decision row, its proposal) says otherwise.
        Mismatch => "mismatch",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub sequence: u64,
    pub kind: FailureKind,
    pub detail: String,
    /// The copy that disagrees, as `table.column` (mismatch only).
    pub column: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub entries_checked: u64,
    /// Hex digest of the last entry that verified (64 zeros for none).
    pub head_digest: String,
    pub failure: Option<Failure>,
}

impl Verification {
    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }
}

/// An entry whose digest did not match; the next entry tells whether it was
/// altered or swapped with its neighbour.
#[derive(Debug)]
struct Suspect {
    sequence: u64,
    leaf: Hash,
    stored: Option<Hash>,
}

/// Feed entries in stored order (ascending sequence), then [`Verifier::finish`].
#[derive(Debug)]
pub struct Verifier {
    expected: u64,
    head: Hash,
    checked: u64,
    /// A checkpoint's `(size, head)` the chain must pass through.
    pin: Option<(u64, Hash)>,
    /// The running time values after the last entry that verified.
    tide: Tide,
    suspect: Option<Suspect>,
    /// An entry arrived past a gap: missing, unless the gap's entry comes next
    /// (two lines of an export swapped).
    gap: Option<u64>,
    failure: Option<Failure>,
}

impl Default for Verifier {
    fn default() -> Self {
        Verifier::new()
    }
}

impl Verifier {
    pub fn new() -> Verifier {
        Verifier {
            expected: 1,
            head: EMPTY_HEAD,
            checked: 0,
            pin: None,
            tide: Tide::before_first(),
            suspect: None,
            gap: None,
            failure: None,
        }
    }

    /// Verifies against a checkpoint's size and head digest (hex; a head that
    /// is not hex fails at the checkpoint's size).
    pub fn against(size: u64, head_digest: &str) -> Verifier {
        let head = parse_hash(head_digest).unwrap_or([0xff; 32]);
        Verifier {
            pin: Some((size, head)),
            ..Verifier::new()
        }
    }

    /// False once a failure is known: stop feeding.
    pub fn wants_more(&self) -> bool {
        self.failure.is_none()
    }

    fn fail(&mut self, sequence: u64, kind: FailureKind, detail: String) {
        self.failure = Some(Failure {
            sequence,
            kind,
            detail,
            column: None,
        });
    }

    fn fail_mismatch(&mut self, sequence: u64, column: &'static str) {
        self.failure = Some(Failure {
            sequence,
            kind: FailureKind::Mismatch,
            detail: format!("entry {sequence}: {column} does not say what the chained record says"),
            column: Some(column),
        });
    }

    /// One stored entry: its sequence, its stored digest (hex) and its leaf
    /// hash, or why its record could not be read.
    pub fn push(&mut self, sequence: u64, stored_digest: &str, leaf: Result<Hash, String>) {
        self.push_checked(sequence, stored_digest, leaf, None);
    }

    /// [`Verifier::push`] with what the entry's stored copies say beside its
    /// record ([`super::StoredCopies::check`]), checked once the entry's link
    /// holds. Feed every entry with its copies or none with them: the running
    /// time values are followed from one entry to the next.
    pub fn push_checked(
        &mut self,
        sequence: u64,
        stored_digest: &str,
        leaf: Result<Hash, String>,
        copies: Option<Result<CopyCheck, String>>,
    ) {
        if self.failure.is_some() {
            return;
        }
        self.checked += 1;
        let stored = parse_hash(stored_digest);
        if let Some(suspect) = self.suspect.take() {
            let swapped = sequence == suspect.sequence + 1
                && leaf.as_ref().is_ok_and(|leaf| {
                    let first = chain(&self.head, leaf);
                    stored == Some(first) && suspect.stored == Some(chain(&first, &suspect.leaf))
                });
            if swapped {
                self.fail(
                    suspect.sequence,
                    FailureKind::Reordered,
                    format!(
                        "entries {} and {} are in each other's place",
                        suspect.sequence, sequence
                    ),
                );
            } else {
                self.fail_altered(suspect.sequence);
            }
            return;
        }
        if let Some(seen) = self.gap.take() {
            let expected = self.expected;
            if sequence == expected {
                self.fail(
                    expected,
                    FailureKind::Reordered,
                    format!("entry {seen} appears before {expected}"),
                );
            } else {
                self.fail_missing(expected, seen);
            }
            return;
        }
        if sequence != self.expected {
            let expected = self.expected;
            if sequence > expected {
                self.gap = Some(sequence);
            } else {
                self.fail(
                    expected,
                    FailureKind::Reordered,
                    format!("entry {sequence} appears where {expected} belongs"),
                );
            }
            return;
        }
        let leaf = match leaf {
            Ok(leaf) => leaf,
            Err(why) => {
                self.fail(
                    sequence,
                    FailureKind::Altered,
                    format!("entry {sequence} cannot be read: {why}"),
                );
                return;
            }
        };
        let computed = chain(&self.head, &leaf);
        if stored != Some(computed) {
            self.suspect = Some(Suspect {
                sequence,
                leaf,
                stored,
            });
            return;
        }
        self.head = computed;
        self.expected += 1;
        if let Some(copies) = copies {
            self.check_copies(sequence, copies);
            if self.failure.is_some() {
                return;
            }
        }
        if let Some((size, pinned)) = self.pin
            && size == sequence
            && pinned != computed
        {
            self.fail(
                sequence,
                FailureKind::CheckpointMismatch,
                format!("the log's digest at {size} differs from the checkpoint's"),
            );
        }
    }

    /// The copies of an entry whose link holds: each must say what the
    /// record says, and the stored running time values must be the ones the
    /// records so far give.
    fn check_copies(&mut self, sequence: u64, copies: Result<CopyCheck, String>) {
        let check = match copies {
            Ok(check) => check,
            Err(why) => {
                self.fail(
                    sequence,
                    FailureKind::Altered,
                    format!("entry {sequence}'s record cannot be read: {why}"),
                );
                return;
            }
        };
        let tide = self.tide.next(check.decided_at);
        let column = check
            .disagrees
            .or(if check.stored_tide.decided_max != tide.decided_max {
                Some("audit_log.decided_max")
            } else if check.stored_tide.lateness_max != tide.lateness_max {
                Some("audit_log.lateness_max")
            } else {
                None
            });
        self.tide = tide;
        if let Some(column) = column {
            self.fail_mismatch(sequence, column);
        }
    }

    fn fail_missing(&mut self, expected: u64, seen: u64) {
        self.fail(
            expected,
            FailureKind::Missing,
            if seen == expected + 1 {
                format!("entry {expected} is missing")
            } else {
                format!("entries {expected} to {} are missing", seen - 1)
            },
        );
    }

    fn fail_altered(&mut self, sequence: u64) {
        self.fail(
            sequence,
            FailureKind::Altered,
            format!("entry {sequence} does not match its digest"),
        );
    }

    pub fn finish(mut self) -> Verification {
        if let Some(suspect) = self.suspect.take() {
            self.fail_altered(suspect.sequence);
        }
        if let Some(seen) = self.gap.take() {
            self.fail_missing(self.expected, seen);
        }
        let verified = self.expected - 1;
        if self.failure.is_none()
            && let Some((size, pinned)) = self.pin
        {
            if verified < size {
                self.fail(
                    verified + 1,
                    FailureKind::Truncated,
                    format!("the log ends at {verified}; the checkpoint covers {size}"),
                );
            } else if size == 0 && pinned != EMPTY_HEAD {
                self.fail(
                    0,
                    FailureKind::CheckpointMismatch,
                    "the checkpoint's empty head is not the empty digest".into(),
                );
            }
        }
        Verification {
            entries_checked: self.checked,
            head_digest: hex::encode(self.head),
            failure: self.failure,
        }
    }
}
