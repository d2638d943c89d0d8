//! What the process tells about itself: its log lines (text or JSON on stderr, filtered by
//! `RUST_LOG`), and OpenTelemetry traces and metrics over OTLP/gRPC when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or a
//! signal's own `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`) is set; the
//! standard `OTEL_*` variables (service name, export interval, batch delay, headers) apply.
//! Without them nothing is built, so telemetry costs nothing.
//!
//! The SDK exports from its own threads, while the tonic exporter needs a Tokio reactor; the
//! [`OnTokio`] wrapper drives each export on the server's runtime.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tokio::runtime::Handle;

use crate::metrics::Metrics;

/// The providers to flush and stop when the process ends.
pub struct Telemetry {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
}

/// Start the logging (text, or JSON with `json_logs`, on stderr; `RUST_LOG` filters it,
/// `info` by default) and, when the environment asks for it ([`requested`]), OTLP export on
/// `runtime`. The providers come back to be flushed when the process ends.
///
/// Fails when an exporter cannot be built (a malformed endpoint).
pub fn start(runtime: &Handle, json_logs: bool) -> Result<Option<Telemetry>, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let telemetry = if requested() {
        Some(init(runtime)?)
    } else {
        None
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // With RUST_LOG=debug, every RPC's span (rpc, host_id, subject, decision) is logged when it
    // closes, with its duration. Colours only for a person at a terminal, never in a file or a
    // log collector.
    let fmt = tracing_subscriber::fmt::layer()
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let fmt = if json_logs {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    // Traces get every RPC span whatever RUST_LOG says.
    let otel = telemetry.as_ref().map(|(_, tracer)| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer.clone())
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("admission_authority", tracing::Level::DEBUG),
            )
    });
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(telemetry.map(|(t, _)| t))
}

/// Whether the environment asks for OTLP export.
pub fn requested() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Build the OTLP exporters on `runtime` and return the providers with the tracer to hand to
/// `tracing-opentelemetry`.
///
/// Fails when an exporter cannot be built (a malformed endpoint).
fn init(runtime: &Handle) -> Result<(Telemetry, opentelemetry_sdk::trace::SdkTracer), String> {
    let _guard = runtime.enter();
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over our default name.
    let resource = if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        Resource::builder().build()
    } else {
        Resource::builder()
            .with_service_name("admission-authority")
            .build()
    };
    let spans = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| format!("OTLP span exporter: {e}"))?;
    let traces = SdkTracerProvider::builder()
        .with_batch_exporter(OnTokio {
            inner: spans,
            runtime: runtime.clone(),
        })
        .with_resource(resource.clone())
        .build();
    let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| format!("OTLP metric exporter: {e}"))?;
    let reader = PeriodicReader::builder(OnTokio {
        inner: metric_exporter,
        runtime: runtime.clone(),
    })
    .build();
    let metrics = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_meter_provider(metrics.clone());
    let tracer = traces.tracer("admission-authority");
    Ok((Telemetry { traces, metrics }, tracer))
}

impl Telemetry {
    /// Export what is buffered and stop.
    pub fn shutdown(self) {
        let _ = self.traces.shutdown_with_timeout(Duration::from_secs(5));
        let _ = self.metrics.shutdown_with_timeout(Duration::from_secs(5));
    }
}

/// Report the service's counters as OTel instruments (through the global meter provider:
/// a no-op unless [`init`] set one).
pub fn register(metrics: Arc<Metrics>) {
    let meter = opentelemetry::global::meter_provider().meter("admission-authority");
    let m = metrics.clone();
    let _decisions = meter
        .u64_observable_counter("admission.decisions")
        .with_description("Decisions by RPC, decision and reason.")
        .with_callback(move |obs| {
            for ((rpc, decision, reason), n) in m.decision_counts() {
                obs.observe(
                    n,
                    &[
                        KeyValue::new("rpc", rpc),
                        KeyValue::new("decision", decision),
                        KeyValue::new("reason", reason),
                    ],
                );
            }
        })
        .build();
    let _auth = meter
        .u64_observable_counter("admission.auth.attempts")
        .with_description("Auth attempts by endpoint and outcome.")
        .with_callback(move |obs| {
            for ((endpoint, outcome), n) in metrics.auth_counts() {
                obs.observe(
                    n,
                    &[
                        KeyValue::new("endpoint", endpoint),
                        KeyValue::new("outcome", outcome),
                    ],
                );
            }
        })
        .build();
}

/// An exporter whose exports run on a Tokio runtime, whatever thread the SDK calls it from.
#[derive(Debug)]
struct OnTokio<E> {
    inner: E,
    runtime: Handle,
}

impl<E> OnTokio<E> {
    fn drive<F: std::future::Future>(&self, fut: F) -> F::Output {
        match Handle::try_current() {
            // Already on a runtime thread: block_in_place would be needed; the SDK never calls
            // exports from one, but stay correct if it does.
            Ok(_) => tokio::task::block_in_place(|| self.runtime.block_on(fut)),
            Err(_) => self.runtime.block_on(fut),
        }
    }
}

impl<E: SpanExporter> SpanExporter for OnTokio<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.drive(self.inner.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for OnTokio<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.drive(self.inner.export(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
