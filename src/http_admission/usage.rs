//! A response's usage, read chunk by chunk as Envoy streams the body, for each API a policy
//! reads (`tokens: openai`, `tokens: anthropic`): a JSON body (kept until its end, at most
//! [`MAX_JSON_BODY`]) or a server-sent-events stream, its lines read as they come and each
//! event handed to its API's reader. Chunks may split anywhere, lines and UTF-8 included, and
//! the work is linear in the body whatever its bytes. No transport: bytes in, values out.

use serde_json::Value;

use super::{Api, anthropic, openai};
use crate::config::MAX_TOKENS;

/// Tokens a response reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Used {
    pub input: u64,
    pub output: u64,
}

/// The `usage` object `u` of a response: `prompt_tokens`/`completion_tokens` (or
/// `input_tokens`/`output_tokens`, with Anthropic's cache tokens counted as input); `None`
/// without one. A count past the largest the ledger takes (a trillion tokens) is read as that
/// largest: a response cannot be refused, and its count must never wrap an allowance.
pub(super) fn usage_of(u: &Value) -> Option<Used> {
    let n = |a: &str, b: &str| {
        u.get(a)
            .or_else(|| u.get(b))
            .and_then(Value::as_u64)
            .map(|n| n.min(MAX_TOKENS))
    };
    let cached = |k: &str| {
        u.get(k)
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_TOKENS)
    };
    let (input, output) = (
        n("prompt_tokens", "input_tokens"),
        n("completion_tokens", "output_tokens"),
    );
    (input.is_some() || output.is_some()).then(|| Used {
        input: input
            .unwrap_or(0)
            .saturating_add(cached("cache_creation_input_tokens"))
            .saturating_add(cached("cache_read_input_tokens"))
            .min(MAX_TOKENS),
        output: output.unwrap_or(0),
    })
}

/// The largest response body kept to read its usage; past it the usage is unknown.
pub const MAX_JSON_BODY: usize = 4 << 20;

/// A response body read chunk by chunk for its usage (see the module documentation).
#[derive(Debug)]
pub struct UsageReader {
    api: Api,
    sse: bool,
    /// JSON: the body so far; events: the unfinished last line.
    buf: Vec<u8>,
    too_long: bool,
    used: Option<Used>,
}

impl UsageReader {
    /// A reader for a response of `api` whose `content-type` is `content_type`.
    pub fn new(api: Api, content_type: &str) -> Self {
        UsageReader {
            api,
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
            if let Some(v) = event(&self.buf[start..end]) {
                self.used = self.api.event_usage(&v, self.used);
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
            return match event(&self.buf) {
                Some(v) => self.api.event_usage(&v, self.used),
                None => self.used,
            };
        }
        serde_json::from_slice::<Value>(&self.buf)
            .ok()
            .and_then(|v| v.get("usage").and_then(usage_of))
    }

    /// The usage read so far (a stream cut short: what its chunks said).
    pub fn so_far(&self) -> Option<Used> {
        self.used
    }
}

/// The JSON event of one server-sent-events line, if it is a `data:` line that holds one.
fn event(line: &[u8]) -> Option<Value> {
    let data = line.strip_prefix(b"data:")?.trim_ascii();
    if data.is_empty() || data == b"[DONE]" {
        return None;
    }
    serde_json::from_slice::<Value>(data).ok()
}

impl Api {
    /// The usage so far once `event` (a stream's event) is read, given what was read before.
    fn event_usage(self, event: &Value, so_far: Option<Used>) -> Option<Used> {
        match self {
            Api::OpenAi => openai::event_usage(event).or(so_far),
            Api::Anthropic => anthropic::event_usage(event, so_far),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_response_reports_its_usage_at_its_end_however_it_is_split() {
        let body =
            br#"{"id":"x","usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#;
        for split in [1, 5, 30, body.len()] {
            let mut r = UsageReader::new(Api::OpenAi, "application/json");
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
        let mut r = UsageReader::new(Api::OpenAi, "application/json");
        r.push(br#"{"id":"x"}"#);
        assert_eq!(r.finish(), None, "no usage");
        let mut r = UsageReader::new(Api::OpenAi, "application/json");
        r.push(br#"{"usage": {"prompt_tokens": 1"#);
        assert_eq!(r.finish(), None, "malformed: unknown, not a panic");
    }

    #[test]
    fn an_event_stream_reports_its_final_usage_chunk_however_it_is_split() {
        let stream = "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}\"}}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n\
                      data: [DONE]\n\n";
        for split in [1, 3, 7, 64, stream.len()] {
            let mut r = UsageReader::new(Api::OpenAi, "text/event-stream; charset=utf-8");
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
        let mut r = UsageReader::new(Api::OpenAi, "text/event-stream");
        r.push(b"data: {\"choices\":[]}\n\ndata: {broken\n\n");
        assert_eq!(r.finish(), None, "no usage chunk");
        // The last line without its newline is read at the end.
        let mut r = UsageReader::new(Api::OpenAi, "text/event-stream");
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
            let mut r = UsageReader::new(Api::OpenAi, "text/event-stream");
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
        let mut r = UsageReader::new(Api::OpenAi, "application/json");
        r.push(br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#);
        assert_eq!(
            r.finish(),
            Some(Used {
                input: MAX_TOKENS,
                output: 1
            })
        );
    }
}
