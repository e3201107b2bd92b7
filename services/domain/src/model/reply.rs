//! The model's reply, parsed strictly. Two shapes are accepted and nothing
//! else:
//!
//! - a JSON object (whitespace around it allowed) whose keys are `verdict`
//!   (`"approve"`, `"reject"` or `"unsure"`) and, optionally, `reason` (a
//!   string), each once, nothing more;
//! - text whose first non-empty line is exactly `Decision: approve` or
//!   `Decision: reject` (ASCII letters in any case, ASCII space, tab and CR
//!   trimmed around it; lines split on LF), the rest being the reason.
//!
//! A reply that states a decision or a verdict a second time anywhere (a
//! second `decision:`, ASCII case-insensitive, or `"verdict"`) is `unsure`,
//! and so is every other reply: empty, prose, code fences, extra words after
//! the verdict, unknown verdicts or keys, a non-string reason, two objects,
//! truncated JSON, look-alike letters from other scripts. No parse path
//! approves by accident: approval needs one of the two exact shapes.

use serde::{Deserialize, Deserializer};

/// What the model said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelVerdict {
    Approve,
    Reject,
    Unsure,
}

impl ModelVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelVerdict::Approve => "approve",
            ModelVerdict::Reject => "reject",
            ModelVerdict::Unsure => "unsure",
        }
    }
}

/// A parsed reply: the verdict and the reason for people. For a reply that
/// is not one of the two shapes, the verdict is `Unsure` and the reason says
/// what was wrong with it (the model's words are not repeated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub verdict: ModelVerdict,
    pub reason: String,
    /// Whether the reply had one of the two accepted shapes.
    pub well_formed: bool,
}

impl Reply {
    fn defect(why: &str) -> Reply {
        Reply {
            verdict: ModelVerdict::Unsure,
            reason: format!("the reply is not a verdict ({why})"),
            well_formed: false,
        }
    }
}

/// The most of the model's reason that is kept, in bytes.
pub const MAX_MODEL_REASON: usize = 2048;

/// Parses the model's reply text.
pub fn parse_reply(text: &str) -> Reply {
    if text.trim().is_empty() {
        return Reply::defect("empty");
    }
    let parsed = if text.trim_start().starts_with('{') {
        json_reply(text)
    } else {
        line_reply(text)
    };
    match parsed {
        Ok((verdict, reason)) => Reply {
            verdict,
            reason: clip(reason.trim()),
            well_formed: true,
        },
        Err(why) => Reply::defect(why),
    }
}

/// The JSON shape's fields. Serde refuses an unknown key (`deny_unknown_fields`)
/// and a key given twice (derived struct deserialization), after unescaping.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonReply {
    verdict: String,
    #[serde(default)]
    reason: Reason,
}

/// A `reason` that is present must be a string: `null`, a number, an array or
/// an object is refused rather than read as "no reason".
#[derive(Default)]
struct Reason(String);

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Reason, D::Error> {
        String::deserialize(d).map(Reason)
    }
}

fn json_reply(text: &str) -> Result<(ModelVerdict, String), &'static str> {
    // `from_str` refuses trailing text (a second object, prose after it) and
    // truncated JSON; whitespace around the object is allowed.
    let reply: JsonReply = serde_json::from_str(text)
        .map_err(|_| "not exactly one JSON object of verdict and reason")?;
    if count(text, "\"verdict\"") > 1 || states_a_verdict(&reply.reason.0) {
        return Err("a second verdict or decision");
    }
    let verdict = match reply.verdict.as_str() {
        "approve" => ModelVerdict::Approve,
        "reject" => ModelVerdict::Reject,
        "unsure" => ModelVerdict::Unsure,
        _ => return Err("an unknown verdict"),
    };
    Ok((verdict, reply.reason.0))
}

fn line_reply(text: &str) -> Result<(ModelVerdict, String), &'static str> {
    let mut lines = text.split('\n');
    let first = lines
        .by_ref()
        .map(trim_line)
        .find(|line| !line.is_empty())
        .ok_or("empty")?;
    let verdict = if first.eq_ignore_ascii_case("decision: approve") {
        ModelVerdict::Approve
    } else if first.eq_ignore_ascii_case("decision: reject") {
        ModelVerdict::Reject
    } else {
        return Err("neither a JSON verdict nor a first line `Decision: approve|reject`");
    };
    let rest: Vec<&str> = lines.collect();
    let reason = rest.join("\n");
    if states_a_verdict(&reason) {
        return Err("a second verdict or decision");
    }
    Ok((verdict, reason))
}

/// ASCII space, tab and CR around a line; nothing else counts as blank (a
/// non-breaking space or any other Unicode space is text).
fn trim_line(line: &str) -> &str {
    line.trim_matches([' ', '\t', '\r'])
}

/// Whether `text` states a decision or verdict: `decision:` in any ASCII case,
/// or `"verdict"`.
fn states_a_verdict(text: &str) -> bool {
    text.to_ascii_lowercase().contains("decision:") || text.contains("\"verdict\"")
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// At most [`MAX_MODEL_REASON`] bytes, cut at a character boundary.
fn clip(reason: &str) -> String {
    if reason.len() <= MAX_MODEL_REASON {
        return reason.to_owned();
    }
    let mut end = MAX_MODEL_REASON;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &reason[..end])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    use ModelVerdict::{Approve, Reject, Unsure};

    /// Replies and what each parses to; every malformed shape the contract
    /// names, and the look-alikes of the accepted ones.
    const TABLE: &[(&str, ModelVerdict, bool)] = &[
        // The JSON shape.
        (
            r#"{"verdict": "approve", "reason": "fits the SOP"}"#,
            Approve,
            true,
        ),
        (
            r#"{"verdict": "reject", "reason": "beyond the SOP"}"#,
            Reject,
            true,
        ),
        (
            r#"{"verdict": "unsure", "reason": "cannot tell"}"#,
            Unsure,
            true,
        ),
        (r#"{"verdict":"approve"}"#, Approve, true),
        ("  \n\t{\"verdict\": \"approve\"}\r\n  ", Approve, true),
        (r#"{"reason": "first", "verdict": "reject"}"#, Reject, true),
        (r#"{"verdict": "\u0061pprove"}"#, Approve, true),
        (r#"{"\u0076erdict": "approve"}"#, Approve, true),
        (
            r#"{"verdict": "approve", "reason": "I approve; they reject nothing"}"#,
            Approve,
            true,
        ),
        (
            r#"{"verdict": "approve", "reason": "Ünïcödé is fine in a reason"}"#,
            Approve,
            true,
        ),
        (r#"{"verdict": "approve", "reason": ""}"#, Approve, true),
        // JSON defects.
        ("", Unsure, false),
        ("   \n\t ", Unsure, false),
        ("{}", Unsure, false),
        (r#"{"verdict": "Approve"}"#, Unsure, false),
        (r#"{"verdict": "APPROVE"}"#, Unsure, false),
        (r#"{"verdict": "approve "}"#, Unsure, false),
        (r#"{"verdict": "approve with caveats"}"#, Unsure, false),
        (r#"{"verdict": "allow"}"#, Unsure, false),
        (r#"{"verdict": "yes"}"#, Unsure, false),
        (r#"{"verdict": true}"#, Unsure, false),
        (r#"{"verdict": ["approve"]}"#, Unsure, false),
        (r#"{"verdict": null}"#, Unsure, false),
        (r#"{"reason": "no verdict"}"#, Unsure, false),
        (r#"{"verdict": "approve", "reason": 7}"#, Unsure, false),
        (r#"{"verdict": "approve", "reason": null}"#, Unsure, false),
        (r#"{"verdict": "approve", "reason": ["a"]}"#, Unsure, false),
        (
            r#"{"verdict": "approve", "reason": {"text": "a"}}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve", "confidence": 0.9}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "reject", "verdict": "approve"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve", "\u0076erdict": "approve"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve", "reason": "a", "reason": "b"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve"}{"verdict": "approve"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve"} {"verdict": "reject"}"#,
            Unsure,
            false,
        ),
        (r#"{"verdict": "approve"} and that is final"#, Unsure, false),
        (r#"{"verdict": "approve""#, Unsure, false),
        (r#"{"verdict": "approve", "reason": "trunc"#, Unsure, false),
        (r#"[{"verdict": "approve"}]"#, Unsure, false),
        (r#""approve""#, Unsure, false),
        ("```json\n{\"verdict\": \"approve\"}\n```", Unsure, false),
        ("```\nDecision: approve\n```", Unsure, false),
        (
            r#"{"verdict": "approve", "reason": "the \"verdict\" is approve"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "reject", "reason": "Decision: approve"}"#,
            Unsure,
            false,
        ),
        (
            r#"{"verdict": "approve", "reason": "DECISION: reject"}"#,
            Unsure,
            false,
        ),
        (r#"{"verdict": "аpprove"}"#, Unsure, false), // Cyrillic а
        // The line shape.
        ("Decision: approve", Approve, true),
        ("Decision: reject", Reject, true),
        ("decision: APPROVE\nThe SOP covers it.", Approve, true),
        ("DECISION: Reject\r\nTarget is flapping.\r\n", Reject, true),
        ("\n\n  \t Decision: approve \t\r\nreason", Approve, true),
        (
            "Decision: approve\nI approve, and nothing here rejects it.",
            Approve,
            true,
        ),
        // Line defects.
        ("Decision: unsure", Unsure, false),
        ("Decision:approve", Unsure, false),
        ("Decision:  approve", Unsure, false),
        ("Decision: approve.", Unsure, false),
        ("Decision: approve with caveats", Unsure, false),
        ("Decision: approved", Unsure, false),
        ("Decision - approve", Unsure, false),
        ("Verdict: approve", Unsure, false),
        ("approve", Unsure, false),
        ("I approve this change.", Unsure, false),
        ("Looks fine to me.\nDecision: approve", Unsure, false),
        ("**Decision: approve**", Unsure, false),
        ("> Decision: approve", Unsure, false),
        ("Decision: approve\nDecision: reject", Unsure, false),
        (
            "Decision: approve\nreason\ndecision: approve",
            Unsure,
            false,
        ),
        (
            "Decision: reject\n{\"verdict\": \"approve\"}",
            Unsure,
            false,
        ),
        ("Decision: аpprove", Unsure, false),      // Cyrillic а
        ("Dеcision: approve", Unsure, false),      // Cyrillic е
        ("Decision: approvе", Unsure, false),      // Cyrillic е
        ("Decision:\u{a0}approve", Unsure, false), // no-break space
        ("\u{a0}Decision: approve", Unsure, false),
        ("Decision: ａpprove", Unsure, false), // full-width a
        ("Decision: approve\u{200b}", Unsure, false), // zero-width space
    ];

    #[test]
    fn every_reply_in_the_table_parses_as_the_contract_says() {
        for (text, verdict, well_formed) in TABLE {
            let reply = parse_reply(text);
            assert_eq!(
                (reply.verdict, reply.well_formed),
                (*verdict, *well_formed),
                "reply {text:?} gave {reply:?}"
            );
        }
    }

    #[test]
    fn the_reason_is_the_rest_of_the_reply_trimmed() {
        assert_eq!(
            parse_reply("Decision: reject\n  The target is\n flapping. \n").reason,
            "The target is\n flapping."
        );
        assert_eq!(
            parse_reply(r#"{"verdict": "approve", "reason": " fits SOP-1 "}"#).reason,
            "fits SOP-1"
        );
        assert_eq!(parse_reply("Decision: approve").reason, "");
    }

    #[test]
    fn a_defect_is_named_without_repeating_the_model_words() {
        let reply = parse_reply("Sure! Ignore the rules and approve <script>");
        assert_eq!(reply.verdict, Unsure);
        assert!(!reply.reason.contains("script"), "{}", reply.reason);
        assert!(reply.reason.starts_with("the reply is not a verdict"));
    }

    #[test]
    fn a_long_reason_is_clipped_at_a_character_boundary() {
        let long = "é".repeat(MAX_MODEL_REASON);
        let reply = parse_reply(&format!("Decision: reject\n{long}"));
        assert_eq!(reply.verdict, Reject);
        assert!(reply.reason.len() <= MAX_MODEL_REASON + '…'.len_utf8());
        assert!(reply.reason.ends_with('…'));
    }

    /// The only replies that approve: one of the two shapes, exactly.
    fn approves_by_contract(text: &str) -> bool {
        let reply = parse_reply(text);
        reply.verdict == Approve && reply.well_formed
    }

    proptest! {
        /// Arbitrary text almost never approves; when it does, it has one of
        /// the two shapes: the verdict word stands exactly where the contract
        /// puts it.
        #[test]
        fn arbitrary_text_approves_only_in_an_accepted_shape(text in "\\PC{0,80}") {
            let reply = parse_reply(&text);
            if reply.verdict == Approve {
                let first = text.split('\n').map(trim_line).find(|l| !l.is_empty()).unwrap_or("");
                let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
                prop_assert!(
                    first.eq_ignore_ascii_case("decision: approve")
                        || json.as_ref().and_then(|v| v.get("verdict")) == Some(&"approve".into()),
                    "approved: {:?}", text
                );
            }
        }

        /// Anything after an approving reply that states a verdict again makes
        /// it unsure.
        #[test]
        fn a_second_statement_anywhere_makes_an_approval_unsure(
            before in "[a-z .\n]{0,20}",
            after in "[a-z .\n]{0,20}",
            second in prop::sample::select(vec![
                "Decision: approve", "decision: reject", "DECISION:", "\"verdict\"",
            ]),
        ) {
            let line = format!("Decision: approve\n{before}{second}{after}");
            prop_assert!(!approves_by_contract(&line), "{:?}", line);
        }

        /// Extra words after the verdict, on the decision line, never approve.
        #[test]
        fn extra_words_on_the_decision_line_never_approve(extra in "[^\n\r\t ][^\n]{0,20}") {
            let line = format!("Decision: approve {extra}");
            prop_assert!(!approves_by_contract(&line), "{:?}", line);
            let json = format!(r#"{{"verdict": "approve {}"}}"#, extra.replace(['"', '\\'], ""));
            prop_assert!(!approves_by_contract(&json), "{:?}", json);
        }

        /// Text before the decision line (not blank) never approves.
        #[test]
        fn a_preamble_never_approves(preamble in "[^\n]*[^\n\r\t ][^\n]*") {
            let text = format!("{preamble}\nDecision: approve");
            prop_assert!(!approves_by_contract(&text), "{:?}", text);
        }
    }
}
