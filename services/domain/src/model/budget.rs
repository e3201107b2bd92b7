//! A tenant's model calls per minute: at most `calls_per_minute` calls in
//! any minute (a sliding window: a call counts against the next 60 s). The
//! store keeps every process's calls and applies this rule to them
//! (`countersign_store::ModelCalls`), so the cap is the tenant's, not a
//! process's. The clock is an argument.

use crate::Millis;

/// How long a call counts against its tenant's cap.
pub const WINDOW_MS: Millis = 60_000;

/// The newest time of a call that no longer counts at `now`: calls at it or
/// before it have left the window.
pub fn aged_out_at(now: Millis) -> Millis {
    now.saturating_sub(WINDOW_MS)
}

/// Whether one more call may be taken while `counted` calls are in the
/// window under a cap of `per_minute` (0: no cap).
pub fn admits(counted: u64, per_minute: u32) -> bool {
    per_minute == 0 || counted < u64::from(per_minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_for_a_minute_and_the_cap_is_exact() {
        assert_eq!(aged_out_at(60_000), 0);
        assert_eq!(aged_out_at(90_500), 30_500);
        assert!(admits(0, 2) && admits(1, 2));
        assert!(!admits(2, 2) && !admits(3, 2));
    }

    #[test]
    fn zero_means_no_cap() {
        assert!(admits(u64::MAX, 0));
    }
}
