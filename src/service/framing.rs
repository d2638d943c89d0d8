//! gRPC framing errors as bad input. tonic answers a request whose body ends inside a frame
//! ("Unexpected EOF decoding stream.") or that carries no message ("Missing request message.")
//! with INTERNAL, before any handler runs; the caller sent bad bytes, so this layer turns those
//! answers into INVALID_ARGUMENT. (A message with the compressed flag set and no
//! `grpc-encoding` stays INTERNAL: the gRPC specification requires it.)

use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue};

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// The tower layer; see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct FramingErrorsAsBadInput;

impl<S> tower_layer::Layer<S> for FramingErrorsAsBadInput {
    type Service = FramingService<S>;
    fn layer(&self, inner: S) -> FramingService<S> {
        FramingService(inner)
    }
}

#[derive(Clone, Debug)]
pub struct FramingService<S>(S);

/// tonic's messages for a request that is not a whole gRPC frame, as they appear
/// percent-encoded in `grpc-message`.
const FRAMING_MESSAGES: [&str; 2] = ["Unexpected%20EOF", "Missing%20request%20message"];

impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for FramingService<S>
where
    S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut res = fut.await?;
            let h = res.headers();
            let framing = h.get(&GRPC_STATUS).is_some_and(|s| s == "13")
                && h.get(&GRPC_MESSAGE).is_some_and(|m| {
                    let m = m.as_bytes();
                    FRAMING_MESSAGES.iter().any(|f| m.starts_with(f.as_bytes()))
                });
            if framing {
                let h = res.headers_mut();
                h.insert(&GRPC_STATUS, HeaderValue::from_static("3"));
                h.insert(
                    &GRPC_MESSAGE,
                    HeaderValue::from_static("request:%20not%20a%20whole%20gRPC%20message%20frame"),
                );
            }
            Ok(res)
        })
    }
}
