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

/// The headers as (lower-cased key, value): `value`, or `raw_value` as text.
pub(super) fn header_pairs(h: &HttpHeaders) -> Vec<(String, String)> {
    h.headers
        .as_ref()
        .map(|m| {
            m.headers
                .iter()
                .map(|v| {
                    let value = if v.value.is_empty() {
                        String::from_utf8_lossy(&v.raw_value).into_owned()
                    } else {
                        v.value.clone()
                    };
                    (v.key.to_ascii_lowercase(), value)
                })
                .collect()
        })
        .unwrap_or_default()
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
