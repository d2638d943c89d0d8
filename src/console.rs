//! The operator console's page and assets, built from `console/` (TypeScript, bundled by
//! `scripts/build-console`) and compiled into the binary: the page needs nothing beyond the
//! authority. Every response carries a Content-Security-Policy that allows only these assets
//! and calls to the admin endpoint's own origin (gRPC-Web, see [`crate::admin`]).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use tonic::body::Body;

const PAGE: &str = include_str!("../console/static/index.html");
const STYLE: &str = include_str!("../console/dist/console.css");
const SCRIPT: &str = include_str!("../console/dist/console.js");
const ICON: &str = include_str!("../console/static/favicon.svg");

/// Only the console's own script, style and origin; no inline script, no frames, no forms
/// posted elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The console's page or asset at `path`, if it is one.
pub fn asset(path: &str) -> Option<Response<Body>> {
    let (content_type, body) = match path {
        "/console" | "/console/" => ("text/html; charset=utf-8", PAGE),
        "/console/console.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/console/console.css" => ("text/css; charset=utf-8", STYLE),
        "/console/favicon.svg" => ("image/svg+xml", ICON),
        _ => return None,
    };
    Some(response(StatusCode::OK, content_type, body))
}

/// A console response (a page, an asset, or why the console is not served here), with the
/// headers of [`secure`].
pub fn response(status: StatusCode, content_type: &str, body: &'static str) -> Response<Body> {
    let mut response = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Body::new(Full::new(Bytes::from_static(body.as_bytes()))))
        .expect("a valid response");
    secure(response.headers_mut());
    response
}

/// The headers every console response carries: the policy, no sniffing, no caching (the page
/// and the data change with the binary and every second), no referrer.
pub fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CONTENT_SECURITY_POLICY);
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "cache-control", "no-store");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "x-frame-options", "DENY");
}
