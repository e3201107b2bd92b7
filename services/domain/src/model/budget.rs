//! A tenant's model calls per minute: a sliding window of the last minute's
//! calls. The clock is an argument.

use std::collections::VecDeque;

use crate::Millis;

const MINUTE_MS: Millis = 60_000;

/// The calls made in the last minute.
#[derive(Debug, Clone, Default)]
pub struct CallBudget {
    calls: VecDeque<Millis>,
}

impl CallBudget {
    /// Takes one call at `now` if fewer than `per_minute` were made in the
    /// minute before it (0: no cap); `false` when the budget is spent, and
    /// then nothing is taken.
    pub fn try_take(&mut self, now: Millis, per_minute: u32) -> bool {
        while self
            .calls
            .front()
            .is_some_and(|&at| at <= now.saturating_sub(MINUTE_MS))
        {
            self.calls.pop_front();
        }
        if per_minute == 0 {
            return true;
        }
        if self.calls.len() >= per_minute as usize {
            return false;
        }
        self.calls.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_cap_holds_within_a_minute_and_frees_as_calls_age() {
        let mut budget = CallBudget::default();
        assert!(budget.try_take(0, 2));
        assert!(budget.try_take(10, 2));
        assert!(!budget.try_take(20, 2));
        assert!(!budget.try_take(59_999, 2));
        assert!(budget.try_take(60_000, 2), "the first call aged out");
        assert!(!budget.try_take(60_001, 2));
        assert!(budget.try_take(60_010, 2));
    }

    #[test]
    fn zero_means_no_cap() {
        let mut budget = CallBudget::default();
        assert!((0..10_000).all(|i| budget.try_take(i, 0)));
    }

    proptest! {
        /// In any minute, at most `per_minute` calls are taken.
        #[test]
        fn no_minute_holds_more_than_the_cap(
            per_minute in 1u32..20,
            gaps in prop::collection::vec(0i64..10_000, 1..200),
        ) {
            let mut budget = CallBudget::default();
            let mut now = 0;
            let mut taken = Vec::new();
            for gap in gaps {
                now += gap;
                if budget.try_take(now, per_minute) {
                    taken.push(now);
                }
            }
            for (i, &start) in taken.iter().enumerate() {
                let within = taken[i..].iter().take_while(|&&t| t < start + MINUTE_MS).count();
                prop_assert!(within <= per_minute as usize);
            }
        }
    }
}
