//! What the model's answer does to a reviewed proposal. The model is asked
//! only about proposals the gates would approve or send to people, and it can
//! only make that stricter: `approve` leaves it as it was; `reject` rejects;
//! `unsure` or any failure (timeout, provider error, malformed answer, over
//! budget) does what the profile's `on_unsure` says — reject, or escalate
//! where a human route matches (else reject). Nothing here leads to an
//! approval that the gates did not already give.

use super::{OnUnsure, Reply, reply::ModelVerdict};
use crate::{decision::GateResult, gates::MODEL};

/// Where the proposal stood after the gates (and routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// Every gate passed and no route applies.
    Approve,
    /// A route sends it to people.
    Escalate,
}

/// Why there is no verdict to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the endpoint's timeout (or the review's deadline).
    Timeout,
    /// The endpoint refused the connection or answered with an error status.
    ProviderError,
    /// The endpoint answered with something that is not a chat completion.
    Malformed,
    /// The tenant's calls per minute were spent; the model was not asked.
    OverBudget,
}

impl Failure {
    pub const ALL: [Failure; 4] = [
        Failure::Timeout,
        Failure::ProviderError,
        Failure::Malformed,
        Failure::OverBudget,
    ];

    /// The failure a failed `model` gate's detail names: the detail is
    /// exactly its name (a verdict's detail starts with the verdict).
    pub fn named(detail: &str) -> Option<Failure> {
        Failure::ALL.into_iter().find(|f| f.as_str() == detail)
    }

    /// The failure's name in the `model` gate's detail.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::ProviderError => "provider_error",
            Failure::Malformed => "malformed",
            Failure::OverBudget => "over_budget",
        }
    }
}

/// What came back from asking the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOutcome {
    /// A reply, parsed ([`super::parse_reply`]).
    Replied(Reply),
    Failed(Failure),
}

impl ModelOutcome {
    /// What a decision records of it: the verdict (`approve`, `reject` or
    /// `unsure`; a reply that is not a verdict is `unsure`), or the failure.
    pub fn verdict(&self) -> &'static str {
        match self {
            ModelOutcome::Replied(reply) => reply.verdict.as_str(),
            ModelOutcome::Failed(failure) => failure.as_str(),
        }
    }
}

/// Where the proposal goes after the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Approve,
    Escalate,
    Reject,
}

/// The `model` gate's result and where the proposal goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStep {
    pub gate: GateResult,
    pub then: Then,
}

/// The step after the model for a proposal that stood at `before`.
/// `human_route` says whether a human route matches the proposal (where
/// `on_unsure: escalate` may send it).
pub fn after_model(
    before: Before,
    outcome: &ModelOutcome,
    on_unsure: OnUnsure,
    human_route: bool,
) -> ModelStep {
    let unsure = || match on_unsure {
        OnUnsure::Escalate if human_route => Then::Escalate,
        OnUnsure::Escalate | OnUnsure::Reject => Then::Reject,
    };
    let (passed, detail, then) = match outcome {
        ModelOutcome::Replied(reply) => {
            let detail = with_reason(reply.verdict.as_str(), &reply.reason);
            match reply.verdict {
                ModelVerdict::Approve if reply.well_formed => (true, detail, stay(before)),
                ModelVerdict::Reject if reply.well_formed => (false, detail, Then::Reject),
                // An unsure answer, or a reply that was not a verdict.
                _ => (false, detail, unsure()),
            }
        }
        ModelOutcome::Failed(failure) => (false, failure.as_str().to_owned(), unsure()),
    };
    ModelStep {
        gate: GateResult {
            gate: MODEL.to_owned(),
            passed,
            detail,
        },
        then,
    }
}

fn stay(before: Before) -> Then {
    match before {
        Before::Approve => Then::Approve,
        Before::Escalate => Then::Escalate,
    }
}

fn with_reason(verdict: &str, reason: &str) -> String {
    if reason.is_empty() {
        verdict.to_owned()
    } else {
        format!("{verdict}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::parse_reply;

    fn outcomes() -> impl Strategy<Value = ModelOutcome> {
        prop_oneof![
            "\\PC{0,40}".prop_map(|t| ModelOutcome::Replied(parse_reply(&t))),
            prop::sample::select(vec![
                r#"{"verdict": "approve", "reason": "ok"}"#,
                r#"{"verdict": "reject", "reason": "no"}"#,
                r#"{"verdict": "unsure"}"#,
                "Decision: approve\nfine",
                "Decision: reject",
                "approve",
            ])
            .prop_map(|t| ModelOutcome::Replied(parse_reply(t))),
            prop::sample::select(vec![
                Failure::Timeout,
                Failure::ProviderError,
                Failure::Malformed,
                Failure::OverBudget,
            ])
            .prop_map(ModelOutcome::Failed),
        ]
    }

    fn befores() -> impl Strategy<Value = Before> {
        prop::sample::select(vec![Before::Approve, Before::Escalate])
    }

    fn on_unsures() -> impl Strategy<Value = OnUnsure> {
        prop::sample::select(vec![OnUnsure::Reject, OnUnsure::Escalate])
    }

    proptest! {
        /// The model only makes a decision stricter: it approves only what the
        /// gates approved and only on an approving, well-formed reply; it never
        /// turns an escalation into an approval.
        #[test]
        fn the_model_never_loosens_a_decision(
            before in befores(), outcome in outcomes(), on_unsure in on_unsures(),
            human_route in any::<bool>(),
        ) {
            let step = after_model(before, &outcome, on_unsure, human_route);
            let approving = matches!(
                &outcome,
                ModelOutcome::Replied(r) if r.verdict == ModelVerdict::Approve && r.well_formed
            );
            if step.then == Then::Approve {
                prop_assert_eq!(before, Before::Approve);
                prop_assert!(approving);
            }
            if step.then == Then::Escalate {
                prop_assert!(before == Before::Escalate || human_route);
            }
            prop_assert_eq!(step.gate.passed, approving);
            prop_assert_eq!(step.gate.gate.as_str(), MODEL);
        }

        /// Without a human route, nothing but an approving reply keeps a
        /// proposal from being rejected.
        #[test]
        fn unsure_without_a_route_rejects(before in befores(), outcome in outcomes()) {
            let step = after_model(before, &outcome, OnUnsure::Escalate, false);
            let approving = matches!(
                &outcome,
                ModelOutcome::Replied(r) if r.verdict == ModelVerdict::Approve && r.well_formed
            );
            if !approving {
                prop_assert_eq!(step.then, Then::Reject);
            }
        }
    }

    #[test]
    fn each_answer_does_what_the_profile_says() {
        let approve =
            ModelOutcome::Replied(parse_reply(r#"{"verdict":"approve","reason":"fits"}"#));
        let reject = ModelOutcome::Replied(parse_reply("Decision: reject\nnot covered"));
        let unsure = ModelOutcome::Replied(parse_reply(r#"{"verdict":"unsure"}"#));
        let timeout = ModelOutcome::Failed(Failure::Timeout);
        let cases = [
            (
                Before::Approve,
                &approve,
                OnUnsure::Reject,
                false,
                Then::Approve,
                "approve: fits",
            ),
            (
                Before::Escalate,
                &approve,
                OnUnsure::Reject,
                true,
                Then::Escalate,
                "approve: fits",
            ),
            (
                Before::Approve,
                &reject,
                OnUnsure::Escalate,
                true,
                Then::Reject,
                "reject: not covered",
            ),
            (
                Before::Approve,
                &unsure,
                OnUnsure::Reject,
                true,
                Then::Reject,
                "unsure",
            ),
            (
                Before::Approve,
                &unsure,
                OnUnsure::Escalate,
                true,
                Then::Escalate,
                "unsure",
            ),
            (
                Before::Approve,
                &unsure,
                OnUnsure::Escalate,
                false,
                Then::Reject,
                "unsure",
            ),
            (
                Before::Approve,
                &timeout,
                OnUnsure::Reject,
                true,
                Then::Reject,
                "timeout",
            ),
            (
                Before::Escalate,
                &timeout,
                OnUnsure::Escalate,
                true,
                Then::Escalate,
                "timeout",
            ),
        ];
        for (before, outcome, on_unsure, route, then, detail) in cases {
            let step = after_model(before, outcome, on_unsure, route);
            assert_eq!(
                (step.then, step.gate.detail.as_str()),
                (then, detail),
                "{before:?} {outcome:?}"
            );
        }
        for failure in [
            Failure::ProviderError,
            Failure::Malformed,
            Failure::OverBudget,
        ] {
            let step = after_model(
                Before::Approve,
                &ModelOutcome::Failed(failure),
                OnUnsure::Reject,
                false,
            );
            assert_eq!(step.then, Then::Reject);
            assert_eq!(step.gate.detail, failure.as_str());
        }
    }
}
