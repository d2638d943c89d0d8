//! OpenAI-shaped bodies, for policies with `tokens: openai`: what a request asks for (its
//! model, its output tokens, an estimate of its input) in the Chat Completions, Completions
//! and Responses APIs, the request rewritten to a lower grant, and the usage a stream's event
//! reports (a chat chunk's `usage`, or the Responses API's `response.completed`; the reading
//! of a whole response is `usage`'s). No transport: bytes in, values out. A body that is not
//! what it should be is never a panic: the request goes on unreserved only where the policy
//! says so (see `service::ext_proc`), and a response without usage is settled as unknown.

use serde_json::Value;

use super::usage::{Used, usage_of};
use crate::config::MAX_TOKENS;

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub model: String,
    /// Its output bound (`max_completion_tokens`, `max_output_tokens` or `max_tokens`), else
    /// the policy's default.
    pub output_tokens: u64,
    /// The input, at 4 characters a token (messages' text, `prompt`, `input`, `system`).
    pub input_estimate: u64,
}

/// The request body `body` (a JSON object) as asked for, with `default_output` when it says
/// no output bound.
///
/// Fails when the body is not a JSON object, naming what is wrong.
pub fn asked(body: &[u8], default_output: u64) -> Result<Asked, String> {
    let o = object(body)?;
    let output_tokens = ["max_completion_tokens", "max_output_tokens", "max_tokens"]
        .iter()
        .find_map(|k| bound(&o, k))
        .unwrap_or(default_output);
    let mut chars = 0usize;
    if let Some(Value::Array(messages)) = o.get("messages") {
        chars += messages
            .iter()
            .map(|m| text_chars(m.get("content")))
            .sum::<usize>();
    }
    for k in ["prompt", "input", "instructions"] {
        match o.get(k) {
            // The Responses API's input items are messages: `content` a string or parts.
            Some(Value::Array(items)) => {
                chars += items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => s.chars().count(),
                        item => text_chars(item.get("content")),
                    })
                    .sum::<usize>();
            }
            other => chars += text_chars(other),
        }
    }
    Ok(Asked {
        model: model(&o),
        output_tokens,
        input_estimate: chars.div_ceil(4) as u64,
    })
}

/// The body as a JSON object, or what is wrong with it.
pub(super) fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))? {
        Value::Object(o) => Ok(o),
        _ => Err("the body is not a JSON object".into()),
    }
}

/// A positive output bound `k` of request `o`; one past the largest count the ledger takes
/// asks for all it can have.
pub(super) fn bound(o: &serde_json::Map<String, Value>, k: &str) -> Option<u64> {
    o.get(k)
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .map(|n| n.min(MAX_TOKENS))
}

/// The request's `model`, or empty.
pub(super) fn model(o: &serde_json::Map<String, Value>) -> String {
    o.get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The characters of a content value: a string, or parts (blocks) whose `text` counts.
pub(super) fn text_chars(content: Option<&Value>) -> usize {
    match content {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.chars().count(),
                p => p
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or(0, |t| t.chars().count()),
            })
            .sum(),
        _ => 0,
    }
}

/// A top-level string field of a JSON object body (a policy's `{ body: FIELD }` source).
pub fn field(body: &[u8], name: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get(name)?.as_str().map(str::to_string)
}

/// The request body with its output bound lowered to `granted`: the field the request used,
/// else the one its API reads (`max_output_tokens` for a Responses request, which has `input`
/// and no `messages` or `prompt`; `max_tokens` otherwise); `None` when it is not a JSON object.
pub fn with_output_bound(body: &[u8], granted: u64) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object_mut()?;
    let responses =
        o.contains_key("input") && !o.contains_key("messages") && !o.contains_key("prompt");
    let key = ["max_completion_tokens", "max_output_tokens", "max_tokens"]
        .into_iter()
        .find(|k| o.contains_key(*k))
        .unwrap_or(if responses {
            "max_output_tokens"
        } else {
            "max_tokens"
        });
    o.insert(key.into(), Value::from(granted));
    serde_json::to_vec(&v).ok()
}

/// The usage one event of an OpenAI stream reports: a Chat Completions chunk's `usage` (the
/// last chunk's, with `stream_options.include_usage`), or the Responses API's
/// `response.completed` event's `response.usage`.
pub(super) fn event_usage(v: &Value) -> Option<Used> {
    v.get("usage")
        .or_else(|| v.get("response").and_then(|r| r.get("usage")))
        .and_then(usage_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_asks_for_its_bound_and_an_input_estimate() {
        let body = br#"{"model":"gpt-x","max_tokens":250,"messages":[
            {"role":"user","content":"12345678"},
            {"role":"user","content":[{"type":"text","text":"abcd"}]}]}"#;
        assert_eq!(
            asked(body, 4096).unwrap(),
            Asked {
                model: "gpt-x".into(),
                output_tokens: 250,
                input_estimate: 3,
            }
        );
        let newer = br#"{"model":"m","max_tokens":9,"max_completion_tokens":70,"prompt":"abc"}"#;
        assert_eq!(asked(newer, 1).unwrap().output_tokens, 70);
        assert_eq!(
            asked(br#"{"input":["ab","cd"]}"#, 1)
                .unwrap()
                .input_estimate,
            1
        );
        assert_eq!(
            asked(br#"{"model":"m"}"#, 4096).unwrap().output_tokens,
            4096
        );
    }

    #[test]
    fn a_body_that_is_not_an_object_is_named() {
        assert!(
            asked(b"{nope", 1)
                .unwrap_err()
                .starts_with("the body is not JSON")
        );
        assert_eq!(
            asked(b"[1]", 1).unwrap_err(),
            "the body is not a JSON object"
        );
        assert_eq!(field(b"[1]", "model"), None);
        assert_eq!(field(br#"{"model":"m"}"#, "model").as_deref(), Some("m"));
        assert_eq!(with_output_bound(b"nope", 3), None);
    }

    #[test]
    fn a_lower_grant_rewrites_the_field_the_request_used() {
        let out = with_output_bound(br#"{"max_completion_tokens":90,"x":1}"#, 40).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["max_completion_tokens"].as_u64(), v["x"].as_u64()),
            (Some(40), Some(1))
        );
        let out = with_output_bound(br#"{"model":"m"}"#, 40).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap()["max_tokens"],
            40
        );
    }

    /// The Responses API (`POST /v1/responses`): `max_output_tokens` bounds the output, the
    /// `input` (a string, or message items with content parts) and `instructions` are read
    /// for the estimate, and a lower grant rewrites `max_output_tokens` (also when the request
    /// set none: `max_tokens` is not a Responses field).
    #[test]
    fn a_responses_request_asks_for_its_max_output_tokens() {
        let simple = br#"{"model":"gpt-4.1","input":"Tell me a three sentence bedtime story about a unicorn.","max_output_tokens":300}"#;
        let a = asked(simple, 4096).unwrap();
        assert_eq!(
            (a.model.as_str(), a.output_tokens, a.input_estimate),
            ("gpt-4.1", 300, 14)
        );
        let items = br#"{"model":"gpt-4.1","instructions":"abcd","input":[
            {"role":"user","content":[{"type":"input_text","text":"abcdefgh"}]},
            {"type":"message","role":"assistant","content":"abcd"}]}"#;
        let a = asked(items, 4096).unwrap();
        assert_eq!((a.output_tokens, a.input_estimate), (4096, 4));
        let lowered = with_output_bound(items, 50).unwrap();
        let v: Value = serde_json::from_slice(&lowered).unwrap();
        assert_eq!(
            (v["max_output_tokens"].as_u64(), v.get("max_tokens")),
            (Some(50), None)
        );
    }

    /// The Responses API's usage: in a JSON body (`usage.input_tokens`/`output_tokens`, as
    /// its published example), or in a stream's `response.completed` event.
    #[test]
    fn a_responses_usage_is_read_from_its_body_or_its_completed_event() {
        use crate::http_admission::Api;
        use crate::http_admission::usage::UsageReader;
        let body = br#"{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","status":"completed","model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove...","annotations":[]}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}"#;
        let mut r = UsageReader::new(Api::OpenAi, "application/json");
        r.push(body);
        assert_eq!(
            r.finish(),
            Some(Used {
                input: 36,
                output: 87
            })
        );
        let stream = "event: response.created
data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"usage\":null}}

event: response.output_text.delta
data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}

event: response.completed
data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":37,\"output_tokens\":11,\"total_tokens\":48}}}

";
        for split in [1, 9, stream.len()] {
            let mut r = UsageReader::new(Api::OpenAi, "text/event-stream");
            for chunk in stream.as_bytes().chunks(split) {
                r.push(chunk);
            }
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 37,
                    output: 11
                }),
                "split {split}"
            );
        }
        // Cut before `response.completed`: nothing reported, the usage is unknown.
        let cut = stream.find("event: response.completed").unwrap();
        let mut r = UsageReader::new(Api::OpenAi, "text/event-stream");
        r.push(&stream.as_bytes()[..cut]);
        assert_eq!(r.so_far(), None);
    }
}
