//! Finding a time window in a log ordered by sequence.
//!
//! Entries are appended in commit order, so `decided_at` runs almost, but not
//! exactly, in sequence order (a review stamped earlier can commit later).
//! Each entry therefore also stores two running values that never go down:
//!
//! - `decided_max(n)`: the latest `decided_at` among entries 1..=n;
//! - `lateness_max(n)`: the most any entry 1..=n trails that maximum,
//!   `max(decided_max(k) − decided_at(k))`.
//!
//! Both are non-decreasing in sequence, so "the first entry whose
//! `decided_max` reaches t" is one index seek, and a window
//! `[from, until)` lies within the sequences [`SequenceWindow`] gives:
//!
//! - below `first(decided_max ≥ from)` every entry has
//!   `decided_at ≤ decided_max < from`;
//! - an entry with `decided_at < until` has
//!   `decided_max = decided_at + lateness ≤ decided_at + L < until + L`,
//!   with `L` the head's `lateness_max`, so it precedes
//!   `first(decided_max ≥ until + L)`.
//!
//! The bounds narrow the walk; the query still filters on `decided_at`.

use crate::Millis;

/// The running values stored with an entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tide {
    pub decided_max: Millis,
    pub lateness_max: i64,
}

impl Tide {
    /// The values of the entry after this one, decided at `decided_at`.
    /// Before the first entry, use `Tide::before_first()`.
    pub fn next(self, decided_at: Millis) -> Tide {
        let decided_max = self.decided_max.max(decided_at);
        Tide {
            decided_max,
            lateness_max: self
                .lateness_max
                .max(decided_max.saturating_sub(decided_at)),
        }
    }

    /// The values before the first entry.
    pub fn before_first() -> Tide {
        Tide {
            decided_max: Millis::MIN,
            lateness_max: 0,
        }
    }
}

/// The thresholds to seek for a window `[from, until)`, given the head's
/// `lateness_max`: the window's entries have sequences at or above the
/// first entry with `decided_max ≥ low_seek`, and below the first entry with
/// `decided_max ≥ high_seek` (if there is one).
pub fn seeks(from: Option<Millis>, until: Option<Millis>, lateness_max: i64) -> SequenceSeeks {
    SequenceSeeks {
        low_seek: from,
        high_seek: until.map(|until| until.saturating_add(lateness_max.max(0))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceSeeks {
    pub low_seek: Option<Millis>,
    pub high_seek: Option<Millis>,
}

/// The sequences a window's entries lie within, both inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceWindow {
    pub low: u64,
    pub high: u64,
}

impl SequenceWindow {
    /// From the seeks' answers: `first_at_low` and `first_at_high` are the
    /// first sequences whose `decided_max` reaches each seek (None: no such
    /// entry), `head` the log's size. None when no entry can be in the window.
    pub fn from_seeks(
        seeks: SequenceSeeks,
        first_at_low: Option<u64>,
        first_at_high: Option<u64>,
        head: u64,
    ) -> Option<SequenceWindow> {
        let low = match seeks.low_seek {
            None => 1,
            Some(_) => first_at_low?,
        };
        let high = match (seeks.high_seek, first_at_high) {
            (Some(_), Some(first)) => first.checked_sub(1)?,
            _ => head,
        };
        (low <= high && head > 0).then_some(SequenceWindow { low, high })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The window a log of `decided_at`s (sequence = index + 1) gives, by the
    /// same seeks the stores make.
    fn window(
        decided: &[Millis],
        from: Option<Millis>,
        until: Option<Millis>,
    ) -> Option<SequenceWindow> {
        let mut tides = Vec::new();
        let mut tide = Tide::before_first();
        for &at in decided {
            tide = tide.next(at);
            tides.push(tide);
        }
        let lateness = tides.last().map_or(0, |t| t.lateness_max);
        let seeks = seeks(from, until, lateness);
        let first = |seek: Option<Millis>| {
            seek.and_then(|t| {
                tides
                    .iter()
                    .position(|x| x.decided_max >= t)
                    .map(|i| i as u64 + 1)
            })
        };
        SequenceWindow::from_seeks(
            seeks,
            first(seeks.low_seek),
            first(seeks.high_seek),
            decided.len() as u64,
        )
    }

    #[test]
    fn the_running_values_never_go_down() {
        let mut tide = Tide::before_first();
        let mut seen = Vec::new();
        for at in [10, 30, 20, 25, 5, 40] {
            tide = tide.next(at);
            seen.push((tide.decided_max, tide.lateness_max));
        }
        assert_eq!(
            seen,
            [(10, 0), (30, 0), (30, 10), (30, 10), (30, 25), (40, 25)]
        );
    }

    #[test]
    fn an_entry_committed_late_stays_inside_its_window() {
        // Entry 3 was stamped at 15 but committed after entry 2 (30).
        let decided = [10, 30, 15, 40, 50];
        let w = window(&decided, Some(15), Some(16)).unwrap();
        assert!(w.low <= 3 && 3 <= w.high, "{w:?}");
    }

    #[test]
    fn a_window_before_or_after_every_entry_is_empty() {
        assert_eq!(window(&[10, 20], Some(21), None), None);
        assert_eq!(window(&[10, 20], None, Some(10)), None);
        assert_eq!(window(&[], None, None), None);
    }

    proptest! {
        #[test]
        fn every_entry_in_the_window_lies_within_the_bounds(
            decided in proptest::collection::vec(0i64..200, 0..60),
            from in proptest::option::of(0i64..220),
            span in proptest::option::of(1i64..80),
        ) {
            let until = span.map(|s| from.unwrap_or(0) + s);
            let bounds = window(&decided, from, until);
            for (i, &at) in decided.iter().enumerate() {
                let inside = from.is_none_or(|f| at >= f) && until.is_none_or(|u| at < u);
                if inside {
                    let w = bounds.expect("a matching entry means a window");
                    let sequence = i as u64 + 1;
                    prop_assert!(w.low <= sequence && sequence <= w.high, "{sequence} outside {w:?}");
                }
            }
        }
    }
}
