//! OpenAI-shaped bodies, for policies with `tokens: openai`: what a chat or completion request
//! asks for (its model, its output tokens, an estimate of its input), the request rewritten
//! to a lower grant, and the usage its response reports, whether a JSON body or a
//! server-sent-events stream whose last chunk carries it. No transport: bytes in, values out.
//! A body that is not what it should be is never a panic: the request goes on unreserved
//! only where the policy says so (see `service::ext_proc`), and a response without usage is
//! settled as unknown.

use serde_json::Value;

use crate::config::MAX_TOKENS;

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub model: String,
    /// `max_completion_tokens`, else `max_tokens`, else the policy's default.
    pub output_tokens: u64,
    /// The input, at 4 characters a token (messages' text, `prompt`, `input`).
    pub input_estimate: u64,
}

/// The request body `body` (a JSON object) as asked for, with `default_output` when it says
/// no output bound.
///
/// Fails when the body is not a JSON object, naming what is wrong.
pub fn asked(body: &[u8], default_output: u64) -> Result<Asked, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(o) = &v else {
        return Err("the body is not a JSON object".into());
    };
    // A bound past the largest count the ledger takes asks for all it can have.
    let bound = |k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .map(|n| n.min(MAX_TOKENS))
    };
    let output_tokens = bound("max_completion_tokens")
        .or_else(|| bound("max_tokens"))
        .unwrap_or(default_output);
    let mut chars = 0usize;
    if let Some(Value::Array(messages)) = o.get("messages") {
        for m in messages {
            match m.get("content") {
                Some(Value::String(s)) => chars += s.chars().count(),
                Some(Value::Array(parts)) => {
                    for p in parts {
                        if let Some(Value::String(t)) = p.get("text") {
                            chars += t.chars().count();
                        }
                    }
                }
                _ => {}
            }
        }
    }
    for k in ["prompt", "input"] {
        match o.get(k) {
            Some(Value::String(s)) => chars += s.chars().count(),
            Some(Value::Array(items)) => {
                chars += items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.chars().count())
                    .sum::<usize>();
            }
            _ => {}
        }
    }
    Ok(Asked {
        model: o
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        output_tokens,
        input_estimate: chars.div_ceil(4) as u64,
    })
}

/// A top-level string field of a JSON object body (a policy's `{ body: FIELD }` source).
pub fn field(body: &[u8], name: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get(name)?.as_str().map(str::to_string)
}

/// The request body with its output bound lowered to `granted` (the field the request used,
/// or `max_tokens`); `None` when it is not a JSON object.
pub fn with_output_bound(body: &[u8], granted: u64) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object_mut()?;
    let key = if o.contains_key("max_completion_tokens") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    o.insert(key.into(), Value::from(granted));
    serde_json::to_vec(&v).ok()
}

/// Tokens a response reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Used {
    pub input: u64,
    pub output: u64,
}

/// The `usage` of a JSON value: `prompt_tokens`/`completion_tokens` (or `input_tokens`/
/// `output_tokens`); `None` without one. A count past the largest the ledger takes (a
/// trillion tokens) is read as that largest: a response cannot be refused, and its count must
/// never wrap an allowance.
fn usage_of(v: &Value) -> Option<Used> {
    let u = v.get("usage")?;
    let n = |a: &str, b: &str| {
        u.get(a)
            .or_else(|| u.get(b))
            .and_then(Value::as_u64)
            .map(|n| n.min(MAX_TOKENS))
    };
    let (input, output) = (
        n("prompt_tokens", "input_tokens"),
        n("completion_tokens", "output_tokens"),
    );
    (input.is_some() || output.is_some()).then(|| Used {
        input: input.unwrap_or(0),
        output: output.unwrap_or(0),
    })
}

/// The largest response body kept to read its usage; past it the usage is unknown.
pub const MAX_JSON_BODY: usize = 4 << 20;

/// A response body read chunk by chunk for its usage: a JSON body (kept until its end, at most
/// [`MAX_JSON_BODY`]) or a server-sent-events stream (its lines read as they come; the last
/// `data:` chunk with a `usage` wins). Chunks may split anywhere, lines and UTF-8 included.
#[derive(Debug)]
pub struct UsageReader {
    sse: bool,
    /// JSON: the body so far; events: the unfinished last line.
    buf: Vec<u8>,
    too_long: bool,
    used: Option<Used>,
}

impl UsageReader {
    /// A reader for a response whose `content-type` is `content_type`.
    pub fn new(content_type: &str) -> Self {
        UsageReader {
            sse: content_type
                .to_ascii_lowercase()
                .starts_with("text/event-stream"),
            buf: Vec::new(),
            too_long: false,
            used: None,
        }
    }

    /// Read the next chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.too_long {
            return;
        }
        self.buf.extend_from_slice(chunk);
        if !self.sse {
            if self.buf.len() > MAX_JSON_BODY {
                self.too_long = true;
                self.buf = Vec::new();
            }
            return;
        }
        // Linear in the body whatever its bytes: each byte is looked at once for a line's
        // end (the unfinished line before this chunk has none), and the lines read leave the
        // buffer together.
        let mut start = 0;
        let mut from = self.buf.len() - chunk.len();
        while let Some(at) = self.buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + at;
            if let Some(u) = line_usage(&self.buf[start..end]) {
                self.used = Some(u);
            }
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_JSON_BODY {
            self.too_long = true;
            self.buf = Vec::new();
        }
    }

    /// The usage read, at the response's end.
    pub fn finish(self) -> Option<Used> {
        if self.too_long {
            return None;
        }
        if self.sse {
            return line_usage(&self.buf).or(self.used);
        }
        serde_json::from_slice::<Value>(&self.buf)
            .ok()
            .and_then(|v| usage_of(&v))
    }

    /// The usage read so far (a stream cut short: what its chunks said).
    pub fn so_far(&self) -> Option<Used> {
        self.used
    }
}

/// The usage of one server-sent-events line, if it is a `data:` line that reports one.
fn line_usage(line: &[u8]) -> Option<Used> {
    let data = line.strip_prefix(b"data:")?.trim_ascii();
    if data.is_empty() || data == b"[DONE]" {
        return None;
    }
    serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| usage_of(&v))
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

    #[test]
    fn a_json_response_reports_its_usage_at_its_end_however_it_is_split() {
        let body =
            br#"{"id":"x","usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#;
        for split in [1, 5, 30, body.len()] {
            let mut r = UsageReader::new("application/json");
            for chunk in body.chunks(split) {
                r.push(chunk);
            }
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 11,
                    output: 7
                }),
                "split {split}"
            );
        }
        let mut r = UsageReader::new("application/json");
        r.push(br#"{"id":"x"}"#);
        assert_eq!(r.finish(), None, "no usage");
        let mut r = UsageReader::new("application/json");
        r.push(br#"{"usage": {"prompt_tokens": 1"#);
        assert_eq!(r.finish(), None, "malformed: unknown, not a panic");
    }

    #[test]
    fn an_event_stream_reports_its_final_usage_chunk_however_it_is_split() {
        let stream = "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}\"}}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n\
                      data: [DONE]\n\n";
        for split in [1, 3, 7, 64, stream.len()] {
            let mut r = UsageReader::new("text/event-stream; charset=utf-8");
            for chunk in stream.as_bytes().chunks(split) {
                r.push(chunk);
            }
            assert_eq!(
                r.so_far(),
                Some(Used {
                    input: 5,
                    output: 2
                }),
                "split {split}"
            );
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 5,
                    output: 2
                })
            );
        }
        let mut r = UsageReader::new("text/event-stream");
        r.push(b"data: {\"choices\":[]}\n\ndata: {broken\n\n");
        assert_eq!(r.finish(), None, "no usage chunk");
        // The last line without its newline is read at the end.
        let mut r = UsageReader::new("text/event-stream");
        r.push(b"data: {\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}");
        assert_eq!(
            r.finish(),
            Some(Used {
                input: 3,
                output: 4
            })
        );
    }

    #[test]
    fn a_body_of_newlines_is_read_in_one_pass() {
        // 4 MiB of empty lines, in Envoy-sized chunks and as one chunk: each byte is looked at
        // once (draining each line off the front of the buffer made this quadratic: 2.9 s for
        // 512 KiB, minutes for this).
        let blank = vec![b'\n'; 4 << 20];
        for chunk in [64 << 10, blank.len()] {
            let mut r = UsageReader::new("text/event-stream");
            for part in blank.chunks(chunk) {
                r.push(part);
            }
            r.push(b"data: {\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\n");
            assert_eq!(
                r.finish(),
                Some(Used {
                    input: 2,
                    output: 1
                })
            );
        }
    }

    #[test]
    fn counts_past_what_the_ledger_takes_are_read_as_its_largest() {
        let mut r = UsageReader::new("application/json");
        r.push(br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#);
        assert_eq!(
            r.finish(),
            Some(Used {
                input: MAX_TOKENS,
                output: 1
            })
        );
        let body = br#"{"model":"m","max_tokens":18446744073709551615}"#;
        assert_eq!(asked(body, 1).unwrap().output_tokens, MAX_TOKENS);
    }
}
