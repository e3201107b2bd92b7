//! The operator breaker's rule: which of an operator's rejections count, when
//! they open the breaker, and which rejection trips it. The API's in-memory
//! breakers ([`crate::suppression::Breaker`]) and both stores (which log
//! BREAKER_TRIPPED in the transaction that records the rejection) ask it; none
//! counts on its own.

use crate::{Millis, TenantPolicy};

/// A tenant's breaker: open while `threshold` of an operator's rejections fall
/// within `window_ms` before now and after the operator's last reset. A
/// threshold of 0 turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerRule {
    pub threshold: u32,
    pub window_ms: Millis,
}

impl BreakerRule {
    pub fn of(policy: &TenantPolicy) -> BreakerRule {
        BreakerRule {
            threshold: policy.breaker_threshold,
            window_ms: policy.breaker_window_ms,
        }
    }

    /// Whether a rejection decided at `at` counts at `now`, after a reset at
    /// `reset_at` (0: never reset).
    pub fn counts(&self, at: Millis, reset_at: Millis, now: Millis) -> bool {
        at > reset_at && now - at < self.window_ms
    }

    /// The moment after which a rejection may count at `now` (those decided
    /// at or before it have left the window); `None` with the breaker off.
    pub fn window_start(&self, now: Millis) -> Option<Millis> {
        (self.threshold > 0).then(|| now - self.window_ms)
    }

    /// Whether the breaker of an operator with these rejections is open at `now`.
    pub fn is_open(
        &self,
        rejections: impl IntoIterator<Item = Millis>,
        reset_at: Millis,
        now: Millis,
    ) -> bool {
        self.threshold > 0
            && rejections
                .into_iter()
                .filter(|&at| self.counts(at, reset_at, now))
                .count()
                >= self.threshold as usize
    }

    /// Of an operator's rejections (when decided, and an id that orders those
    /// decided in the same millisecond), the one that trips the breaker at
    /// `now`: the threshold-th of those that count, oldest first. `None` while
    /// fewer count, or with the breaker off.
    pub fn tripping<'a, K: Ord>(
        &self,
        rejections: &'a [(Millis, K)],
        reset_at: Millis,
        now: Millis,
    ) -> Option<&'a K> {
        let nth = (self.threshold as usize).checked_sub(1)?;
        let mut counted: Vec<&(Millis, K)> = rejections
            .iter()
            .filter(|(at, _)| self.counts(*at, reset_at, now))
            .collect();
        counted.sort_unstable();
        counted.get(nth).map(|(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const WINDOW: Millis = 300_000;

    fn rule(threshold: u32) -> BreakerRule {
        BreakerRule {
            threshold,
            window_ms: WINDOW,
        }
    }

    #[test]
    fn a_rejection_counts_inside_the_window_and_after_the_reset_only() {
        let r = rule(3);
        assert!(r.counts(1_000, 0, 1_000 + WINDOW - 1));
        assert!(!r.counts(1_000, 0, 1_000 + WINDOW), "aged out");
        assert!(!r.counts(1_000, 1_000, 1_001), "reset at the same moment");
        assert!(r.counts(1_001, 1_000, 1_001));
    }

    #[test]
    fn no_rejection_at_or_before_the_windows_start_counts() {
        let r = rule(3);
        let start = r.window_start(1_000_000).unwrap();
        assert!(!r.counts(start, 0, 1_000_000));
        assert!(r.counts(start + 1, 0, 1_000_000));
        assert_eq!(rule(0).window_start(1_000_000), None);
    }

    #[test]
    fn a_threshold_of_zero_turns_the_breaker_off() {
        assert!(!rule(0).is_open([1, 2, 3], 0, 3));
        assert_eq!(rule(0).tripping(&[(1, "a")], 0, 1), None);
    }

    #[test]
    fn rejections_in_the_same_millisecond_trip_in_id_order() {
        let rejections = [(5, "b"), (5, "a"), (4, "z")];
        assert_eq!(rule(2).tripping(&rejections, 0, 5), Some(&"a"));
    }

    proptest! {
        /// With rejections inside the window, the breaker opens exactly at
        /// the K-th, and the K-th is the one that trips it.
        #[test]
        fn the_breaker_opens_exactly_at_k_rejections_within_the_window(
            threshold in 1..8_u32,
            gaps in prop::collection::vec(0..1_000_i64, 0..16),
        ) {
            let r = rule(threshold);
            let mut at = 10_000;
            let times: Vec<Millis> = gaps.iter().map(|g| { at += g; at }).collect();
            let now = at;
            let k = threshold as usize;
            for n in 0..=times.len() {
                prop_assert_eq!(r.is_open(times[..n].iter().copied(), 0, now), n >= k, "{} of {:?}", n, times);
            }
            let keyed: Vec<(Millis, usize)> = times.iter().copied().zip(0..).collect();
            prop_assert_eq!(r.tripping(&keyed, 0, now).copied(), (times.len() >= k).then_some(k - 1));
        }

        /// Rejections that aged out of the window, or came at or before the
        /// last reset, change nothing.
        #[test]
        fn old_or_reset_rejections_do_not_count(
            threshold in 1..6_u32,
            recent in prop::collection::vec(0..1_000_i64, 0..10),
            old in prop::collection::vec(WINDOW..10 * WINDOW, 0..10),
            before_reset in prop::collection::vec(0..1_000_i64, 0..10),
        ) {
            let r = rule(threshold);
            let now = 20 * WINDOW;
            let reset_at = now - 1_000;
            // Within the window and after the reset.
            let counted: Vec<Millis> = recent.iter().map(|d| now - d).collect();
            let mut all = counted.clone();
            all.extend(old.iter().map(|d| now - d));
            all.extend(before_reset.iter().map(|d| reset_at - d));
            prop_assert_eq!(
                r.is_open(all.iter().copied(), reset_at, now),
                counted.len() >= threshold as usize
            );
            let keyed = |times: &[Millis]| -> Vec<(Millis, Millis)> { times.iter().map(|&t| (t, t)).collect() };
            prop_assert_eq!(
                r.tripping(&keyed(&all), reset_at, now).copied(),
                r.tripping(&keyed(&counted), reset_at, now).copied()
            );
        }
    }
}
