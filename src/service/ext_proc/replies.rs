//! What the external processor answers Envoy: the answers that let a part go on (a body
//! rewritten to a grant), the headers of an immediate answer, and reading Envoy's headers.

use crate::api::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use crate::api::envoy::service::ext_proc::v3::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpHeaders,
    TrailersResponse, body_mutation,
};
use crate::scheduler::Outcome;

/// A header to set. Envoy 1.40 reads header values from `raw_value` (as it sends them).
pub(super) fn option(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.into(),
            value: String::new(),
            raw_value: value.as_bytes().to_vec(),
        }),
        append: None,
        append_action: 0,
    }
}

pub(super) fn go() -> HeadersResponse {
    HeadersResponse {
        response: Some(CommonResponse::default()),
    }
}

pub(super) fn go_body() -> BodyResponse {
    BodyResponse {
        response: Some(CommonResponse::default()),
    }
}

/// Go on, with the body replaced by `rewritten` (and its length with it) when given.
pub(super) fn body_answer(rewritten: Option<Vec<u8>>) -> BodyResponse {
    let Some(body) = rewritten else {
        return go_body();
    };
    BodyResponse {
        response: Some(CommonResponse {
            header_mutation: Some(HeaderMutation {
                set_headers: vec![option("content-length", &body.len().to_string())],
                remove_headers: Vec::new(),
            }),
            body_mutation: Some(BodyMutation {
                mutation: Some(body_mutation::Mutation::Body(body)),
            }),
            ..CommonResponse::default()
        }),
    }
}

pub(super) fn trailers() -> TrailersResponse {
    TrailersResponse::default()
}

/// The headers `wanted` (by lower-cased key) as (lower-cased key, value): `value`, or
/// `raw_value` as text. Only those are copied: a request's other headers cost nothing.
pub(super) fn header_pairs(
    h: &HttpHeaders,
    wanted: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let Some(m) = h.headers.as_ref() else {
        return Vec::new();
    };
    m.headers
        .iter()
        .filter_map(|v| {
            // Envoy sends keys lower-cased; another sender's are lowered before the test.
            let key = if v.key.bytes().any(|b| b.is_ascii_uppercase()) {
                std::borrow::Cow::Owned(v.key.to_ascii_lowercase())
            } else {
                std::borrow::Cow::Borrowed(v.key.as_str())
            };
            if !wanted(&key) {
                return None;
            }
            let value = if v.value.is_empty() {
                String::from_utf8_lossy(&v.raw_value).into_owned()
            } else {
                v.value.clone()
            };
            Some((key.into_owned(), value))
        })
        .collect()
}

/// The value of header `name` (lower-cased) among `pairs`.
pub(super) fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// What the upstream's status says of the provider behind it (the adaptive caps' signal).
pub(super) fn outcome_of(status: u16) -> Outcome {
    match status {
        200..=399 => Outcome::Ok,
        429 => Outcome::RateLimited,
        500..=599 => Outcome::Overloaded,
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::envoy::config::core::v3::HeaderMap;

    fn headers(pairs: &[(&str, &str, &[u8])]) -> HttpHeaders {
        HttpHeaders {
            headers: Some(HeaderMap {
                headers: pairs
                    .iter()
                    .map(|(k, v, raw)| HeaderValue {
                        key: k.to_string(),
                        value: v.to_string(),
                        raw_value: raw.to_vec(),
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_headers_wanted_are_copied_keys_lowered_values_raw_or_not() {
        let h = headers(&[
            (":path", "/v1/chat", b""),
            ("X-Tenant", "", b"acme"),
            ("user-agent", "curl", b""),
            ("x-request-id", "r1", b""),
        ]);
        let pairs = header_pairs(&h, |k| k == "x-tenant" || k == "x-request-id");
        assert_eq!(
            pairs,
            vec![
                ("x-tenant".to_string(), "acme".to_string()),
                ("x-request-id".to_string(), "r1".to_string())
            ]
        );
        assert_eq!(value(&pairs, "x-tenant"), Some("acme"));
        assert!(header_pairs(&HttpHeaders::default(), |_| true).is_empty());
    }
}
