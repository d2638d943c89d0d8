//! Anthropic's Messages API (`POST /v1/messages`), for policies with `tokens: anthropic`: what
//! a request asks for (its model, `max_tokens`, and an estimate of its input from `system` and
//! `messages`), the request rewritten to a lower grant, and the usage a stream's events report:
//! the input in `message_start`'s `message.usage`, the output cumulative in each
//! `message_delta`'s `usage` (the last one read wins). A whole JSON response's `usage` is read
//! by `usage`; cache tokens count as input. No transport: bytes in, values out.

use serde_json::Value;

use super::openai::{Asked, bound, model, object, text_chars};
use super::usage::{Used, usage_of};

/// The request body `body` (a JSON object) as asked for, with `default_output` when it says
/// no `max_tokens` (the API requires one; a request without is still reserved for).
///
/// Fails when the body is not a JSON object, naming what is wrong.
pub fn asked(body: &[u8], default_output: u64) -> Result<Asked, String> {
    let o = object(body)?;
    let mut chars = text_chars(o.get("system"));
    if let Some(Value::Array(messages)) = o.get("messages") {
        chars += messages
            .iter()
            .map(|m| text_chars(m.get("content")))
            .sum::<usize>();
    }
    Ok(Asked {
        model: model(&o),
        output_tokens: bound(&o, "max_tokens").unwrap_or(default_output),
        input_estimate: chars.div_ceil(4) as u64,
    })
}

/// The request body with `max_tokens` lowered to `granted`; `None` when it is not a JSON
/// object.
pub fn with_output_bound(body: &[u8], granted: u64) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    v.as_object_mut()?
        .insert("max_tokens".into(), Value::from(granted));
    serde_json::to_vec(&v).ok()
}

/// The usage once one event of a Messages stream is read, given what was read before:
/// `message_start` gives the input (and the output so far), each `message_delta` the
/// cumulative output.
pub(super) fn event_usage(v: &Value, so_far: Option<Used>) -> Option<Used> {
    match v.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            let u = v.get("message")?.get("usage").and_then(usage_of)?;
            Some(Used {
                input: u.input,
                output: u.output.max(so_far.map_or(0, |s| s.output)),
            })
        }
        Some("message_delta") => {
            let out = v.get("usage").and_then(usage_of)?;
            Some(Used {
                input: so_far.map_or(out.input, |s| s.input.max(out.input)),
                output: out.output,
            })
        }
        _ => so_far,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_admission::Api;
    use crate::http_admission::usage::UsageReader;

    /// Anthropic's published example request (the Messages API reference), with a system prompt
    /// in blocks.
    #[test]
    fn a_messages_request_asks_for_its_max_tokens_and_an_input_estimate() {
        let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1024,
            "system":[{"type":"text","text":"You are a helpful assistant."}],
            "messages":[{"role":"user","content":"Hello, world"},
                        {"role":"assistant","content":[{"type":"text","text":"Hi!"}]}]}"#;
        assert_eq!(
            asked(body, 4096).unwrap(),
            Asked {
                model: "claude-sonnet-4-5".into(),
                output_tokens: 1024,
                // 28 + 12 + 3 characters.
                input_estimate: 11,
            }
        );
        assert_eq!(asked(br#"{"messages":[]}"#, 77).unwrap().output_tokens, 77);
        assert!(asked(b"[1]", 1).unwrap_err().contains("not a JSON object"));
        let lowered = with_output_bound(body, 100).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&lowered).unwrap()["max_tokens"],
            100
        );
    }

    /// The published non-streamed response: `usage` with input and output tokens (and cache
    /// tokens, counted as input).
    #[test]
    fn a_messages_response_reports_its_usage() {
        let body = br#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant",
            "content":[{"type":"text","text":"Hi! My name is Claude."}],"model":"claude-sonnet-4-5",
            "stop_reason":"end_turn","stop_sequence":null,
            "usage":{"input_tokens":2095,"output_tokens":503,"cache_creation_input_tokens":5,"cache_read_input_tokens":10}}"#;
        for split in [1, 7, body.len()] {
            let mut r = UsageReader::new(Api::Anthropic, "application/json");
            for chunk in body.chunks(split) {
                r.push(chunk);
            }
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 2110,
                    output: 503
                })
            );
        }
    }

    /// The published streamed response: `message_start` carries the input, each
    /// `message_delta` the cumulative output; split anywhere; cut short it says what it read.
    #[test]
    fn a_messages_stream_reports_its_input_and_its_last_cumulative_output() {
        let stream = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":8}}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";
        for split in [1, 5, 64, stream.len()] {
            let mut r = UsageReader::new(Api::Anthropic, "text/event-stream");
            for chunk in stream.as_bytes().chunks(split) {
                r.push(chunk);
            }
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 25,
                    output: 15
                }),
                "split {split}"
            );
        }
        // Cut after the first delta: what it reported so far.
        let cut = stream.find("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15").unwrap();
        let mut r = UsageReader::new(Api::Anthropic, "text/event-stream");
        r.push(&stream.as_bytes()[..cut]);
        assert_eq!(
            r.so_far(),
            Some(Used {
                input: 25,
                output: 8
            })
        );
        // No usage at all, or malformed events: unknown, not a panic.
        let mut r = UsageReader::new(Api::Anthropic, "text/event-stream");
        r.push(b"data: {\"type\":\"ping\"}\n\ndata: {broken\n\n");
        assert_eq!(r.finish(), None);
    }
}
