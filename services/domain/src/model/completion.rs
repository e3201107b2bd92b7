//! An OpenAI-compatible chat completion's body (`/v1/chat/completions`), read
//! strictly: exactly one choice whose message content is a string, and the
//! token counts where the endpoint reports them. Anything else is not a chat
//! completion (`malformed` in the `model` gate's detail).

use serde::{Deserialize, Serialize};

/// Tokens the call used, as the endpoint reports them (0 where it does not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt: u64,
    pub completion: u64,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_prompt: u64,
}

/// The model's answer text and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub usage: TokenUsage,
}

#[derive(Deserialize)]
struct Body {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// The completion in `body`; `None` when it is not a chat completion with
/// exactly one choice holding text.
pub fn parse_completion(body: &str) -> Option<Completion> {
    let body: Body = serde_json::from_str(body).ok()?;
    let [choice] = <[Choice; 1]>::try_from(body.choices).ok()?;
    let text = choice.message.content?;
    let usage = body.usage.map_or_else(TokenUsage::default, |u| TokenUsage {
        prompt: u.prompt_tokens.unwrap_or_default(),
        completion: u.completion_tokens.unwrap_or_default(),
        cached_prompt: u
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or_default(),
    });
    Some(Completion { text, usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_completion_gives_its_text_and_token_counts() {
        let body = r#"{"id":"c1","object":"chat.completion","model":"m",
            "choices":[{"index":0,"message":{"role":"assistant","content":"Decision: reject\nno"},
                        "finish_reason":"stop"}],
            "usage":{"prompt_tokens":812,"completion_tokens":9,"total_tokens":821,
                     "prompt_tokens_details":{"cached_tokens":768}}}"#;
        assert_eq!(
            parse_completion(body),
            Some(Completion {
                text: "Decision: reject\nno".into(),
                usage: TokenUsage {
                    prompt: 812,
                    completion: 9,
                    cached_prompt: 768
                },
            })
        );
        let bare = r#"{"choices":[{"message":{"content":"x"}}]}"#;
        assert_eq!(parse_completion(bare).unwrap().usage, TokenUsage::default());
    }

    #[test]
    fn anything_but_one_choice_with_text_is_not_a_completion() {
        for body in [
            "",
            "not json",
            "<html>502 Bad Gateway</html>",
            "{}",
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"content":"a"}},{"message":{"content":"b"}}]}"#,
            r#"{"choices":[{"message":{"content":null,"refusal":"no"}}]}"#,
            r#"{"choices":[{"message":{}}]}"#,
            r#"{"choices":[{"text":"Decision: approve"}]}"#,
            r#"{"choices":[{"message":{"content":["Decision: approve"]}}]}"#,
            r#"{"error":{"message":"rate limited"}}"#,
        ] {
            assert_eq!(parse_completion(body), None, "{body}");
        }
    }
}
