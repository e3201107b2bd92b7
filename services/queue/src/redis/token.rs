//! What a Redis lease's token means: the consumer that holds the entry and the
//! delivery count it was handed out with, `"<delivered>/<consumer>"`. The
//! scripts compare both with the entry's pending-list record, so a holder
//! whose entry was reclaimed, released or fetched again has a void token.

use crate::Lease;

pub(super) fn token(consumer: &str, delivered: u32) -> String {
    format!("{delivered}/{consumer}")
}

/// `(consumer, delivered)` of a lease; a token that is not ours matches no entry.
pub(super) fn holder(lease: &Lease) -> (&str, u32) {
    lease
        .token
        .split_once('/')
        .and_then(|(n, consumer)| Some((consumer, n.parse().ok()?)))
        .unwrap_or(("", 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_the_consumer_and_the_delivery_count() {
        let lease = Lease {
            entry_id: "1-0".into(),
            tenant: "a".into(),
            proposal_id: "p".into(),
            attempts: 3,
            token: token("reviewer/0", 3),
            expires_at: 0,
        };
        assert_eq!(holder(&lease), ("reviewer/0", 3));
        let foreign = Lease {
            token: "not-a-token".into(),
            ..lease
        };
        assert_eq!(holder(&foreign), ("", 0));
    }
}
