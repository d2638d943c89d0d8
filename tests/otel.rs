//! OpenTelemetry export: a small OTLP receiver (gRPC, built from opentelemetry-proto) runs in the
//! test; the server, started with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it, must deliver
//! spans of its RPCs and its metrics.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, eventually, submit_req};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    metrics_service_server::{MetricsService, MetricsServiceServer},
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};
use tonic::{Request, Response, Status};

/// What the receiver got: span names with their `rpc` attribute, and metric names.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<(String, String)>>>,
    metrics: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    let rpc = s
                        .attributes
                        .iter()
                        .find(|kv| kv.key == "rpc")
                        .and_then(|kv| kv.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    spans.push((s.name, rpc));
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Received {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let mut metrics = self.metrics.lock().unwrap();
        for rm in request.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                metrics.extend(sm.metrics.into_iter().map(|m| m.name));
            }
        }
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tokio::test]
async fn spans_and_metrics_reach_an_otlp_receiver() {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(received.clone()))
            .add_service(MetricsServiceServer::new(received.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    // The variables go to the child only.
    let server = {
        let mut cmd = std::process::Command::new(common::BIN);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::piped());
        Server::from_command(cmd)
    };
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "r1")).await.unwrap();

    eventually("a span of the Submit", Duration::from_secs(10), || {
        let spans = received.spans.lock().unwrap().clone();
        async move {
            spans
                .iter()
                .any(|(name, rpc)| name == "rpc" && rpc.contains("/admission.v1.Admission/Submit"))
                .then_some(())
        }
    })
    .await;
    eventually("the decision counter", Duration::from_secs(10), || {
        let metrics = received.metrics.lock().unwrap().clone();
        async move {
            metrics
                .iter()
                .any(|m| m == "admission.decisions")
                .then_some(())
        }
    })
    .await;
    drop(server);
    receiver.abort();
}
