//! Deadlines answered as gRPC means them. A call whose deadline runs out on the server (the
//! caller's `grpc-timeout`, or the server's own bound on every call, `grpc.unary_timeout`) is
//! answered `DEADLINE_EXCEEDED`, what grpcurl, third-party stubs and every gRPC client retry
//! on. tonic's own timeout answers `CANCELLED` "Timeout expired", and it sits outside every
//! layer a service can add, reading the same header; this layer, inside it, runs out first
//! (a millisecond before the caller's deadline) and answers the call itself, so tonic's never
//! fires. As tonic's does, it bounds the handler (a streaming call's, until its stream opens).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The tower layer; see the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// The server's bound on every call, whatever the caller asks.
    pub bound: Duration,
}

impl<S> tower_layer::Layer<S> for Deadlines {
    type Service = DeadlineService<S>;
    fn layer(&self, inner: S) -> DeadlineService<S> {
        DeadlineService {
            inner,
            bound: self.bound,
        }
    }
}

#[derive(Clone, Debug)]
pub struct DeadlineService<S> {
    inner: S,
    bound: Duration,
}

/// How much sooner than the caller's deadline this layer answers: enough that its timer is
/// never later than tonic's, set from the same header a moment before.
const AHEAD: Duration = Duration::from_millis(1);

impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for DeadlineService<S>
where
    S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let asked = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout)
            .map(|d| d.saturating_sub(AHEAD));
        let limit = asked.map_or(self.bound, |d| d.min(self.bound));
        let fut = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout(limit, fut).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "the call's deadline ran out on the server after {} ms",
                    limit.as_millis()
                ))
                .into_http()),
            }
        })
    }
}

/// A `grpc-timeout` header's value: at most 8 digits and a unit (`H`ours, `M`inutes,
/// `S`econds, `m`illi-, `u`micro-, `n`anoseconds); `None` when it is not one (tonic then
/// ignores it too).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if !v.is_ascii() {
        return None;
    }
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_as_the_protocol_writes_them() {
        assert_eq!(parse_grpc_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "m", "123456789m", "12x", "-1S", "1.5S", "５S", "S５"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
