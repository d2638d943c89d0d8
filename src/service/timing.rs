//! The latency of every unary RPC, by method and status code, into
//! [`RpcLatency`](crate::metrics::RpcLatency): a tower layer around every service of the gRPC
//! port, from the request's arrival to its answer's headers. A unary handler has finished by
//! then; its status is the `grpc-status` header of an error (a trailers-only answer) or OK.
//! Streams (Wait, health Watch, reflection) are not timed: their answer's headers only say
//! that the stream opened.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::HeaderName;

use crate::clock::Stopwatch;
use crate::metrics::Metrics;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The streaming methods the gRPC port serves, which are not timed.
const STREAMS: [&str; 4] = [
    "/admission.v1.Admission/Wait",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The tower layer; see the module documentation.
#[derive(Clone, Debug)]
pub struct RpcTiming(pub Arc<Metrics>);

impl<S> tower_layer::Layer<S> for RpcTiming {
    type Service = TimingService<S>;
    fn layer(&self, inner: S) -> TimingService<S> {
        TimingService(inner, self.0.clone())
    }
}

#[derive(Clone, Debug)]
pub struct TimingService<S>(S, Arc<Metrics>);

impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for TimingService<S>
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
        let path = req.uri().path();
        let timed =
            (!STREAMS.contains(&path)).then(|| (self.1.rpc.method(path), Stopwatch::start()));
        let fut = self.0.call(req);
        let metrics = self.1.clone();
        Box::pin(async move {
            let res = fut.await?;
            if let Some((method, watch)) = timed {
                let code = res
                    .headers()
                    .get(&GRPC_STATUS)
                    .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                method.observe(&metrics.rpc, code, watch.elapsed());
            }
            Ok(res)
        })
    }
}
