//! The admin endpoint (HTTP/1.1, `admin_listen`): `/metrics` (Prometheus), `/healthz` (the
//! process is up), `/readyz` (it admits work: not draining, store reachable), and the operator
//! console: its page and assets at `/console` (inside the binary) and gRPC-Web calls to the
//! same Admission and Operator services the gRPC port serves, each taking the operator
//! credential (a gateway credential or none is refused).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tonic::body::Body;
use tower_service::Service as _;

use crate::gates::Gates;
use crate::metrics::{Metrics, render};
use crate::net::Outbound;
use crate::store::Store;
use crate::store::journal::SendGates;

/// A request whose headers have not arrived within this is dropped.
pub const ADMIN_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// An admin connection is asked to close (after the request it is serving) once it is this
/// old: scrapes take milliseconds, and a console opens a new one.
pub const ADMIN_CONNECTION_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
/// A connection asked to close gets this long to finish its request before it is dropped.
const ADMIN_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// Admin connections open at once at most; more are closed as they are accepted.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// The console's gRPC-Web calls: the Admission and Operator services behind the operator
/// credential check, translated by `tonic-web`.
pub type ConsoleApi = tonic_web::GrpcWebService<tonic::service::Routes>;

/// What the admin endpoint serves from.
pub struct Admin<S> {
    pub store: Arc<S>,
    pub gates: Arc<Gates>,
    pub metrics: Arc<Metrics>,
    /// Per-host series for at most this many hosts.
    pub max_hosts: usize,
    pub console: ConsoleApi,
    /// The store's send gate, when it has one: the console's changes are answered through it.
    pub sends: Option<SendGates>,
    /// With `tls` configured: the same certificate. Connections that begin a TLS handshake
    /// get TLS; plain HTTP still gets `/metrics` and the probes (scrapers and kubelets
    /// configured before), but the console and its calls only over TLS.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

/// Serve the admin endpoint on `listener` until the task is aborted. A caller that sends its
/// headers slowly (or never) is dropped after [`ADMIN_HEADER_TIMEOUT`], and at most
/// [`ADMIN_MAX_CONNECTIONS`] are served at once, so the admin port cannot be used to hold the
/// process's memory or files.
pub async fn serve_admin<S: Store>(listener: TcpListener, admin: Admin<S>) {
    let acceptor = admin.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let admin = Arc::new(admin);
    let open = Arc::new(tokio::sync::Semaphore::new(ADMIN_MAX_CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => {
                // Out of file descriptors, say: do not spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue; // dropped: closed at once
        };
        let (admin, acceptor) = (admin.clone(), acceptor.clone());
        let gate = admin.sends.as_ref().map(SendGates::connection);
        tokio::spawn(async move {
            let _permit = permit;
            let Some(acceptor) = acceptor else {
                return serve_connection(admin, Outbound::new(stream, gate), false).await;
            };
            // A TLS connection begins with a handshake record (0x16).
            let mut first = [0u8; 1];
            let Ok(Ok(1)) =
                tokio::time::timeout(ADMIN_HEADER_TIMEOUT, stream.peek(&mut first)).await
            else {
                return;
            };
            let stream = Outbound::new(stream, gate);
            if first[0] != 0x16 {
                return serve_connection(admin, stream, false).await;
            }
            if let Ok(Ok(tls)) =
                tokio::time::timeout(ADMIN_HEADER_TIMEOUT, acceptor.accept(stream)).await
            {
                serve_connection(admin, tls, true).await;
            }
        });
    }
}

/// One admin connection (`secure`: over TLS, or no TLS is configured).
async fn serve_connection<S: Store, IO>(admin: Arc<Admin<S>>, io: IO, tls: bool)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let secure = tls || admin.tls.is_none();
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let admin = admin.clone();
        async move { Ok::<_, std::convert::Infallible>(admin.handle(req, secure).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(ADMIN_HEADER_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    if tokio::time::timeout(ADMIN_CONNECTION_LIMIT, conn.as_mut())
        .await
        .is_err()
    {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(ADMIN_CLOSE_GRACE, conn).await;
    }
}

/// The rustls configuration of the admin endpoint under `tls`: the gRPC port's certificate
/// and key (client certificates are not asked for: scrapers and browsers have none; the
/// console's calls carry the operator token).
pub fn tls_config(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls.cert: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("tls.key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("tls: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("tls: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl<S: Store> Admin<S> {
    async fn handle(&self, req: Request<hyper::body::Incoming>, secure: bool) -> Response<Body> {
        let grpc_web = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc-web"));
        let path = req.uri().path();
        if !secure && (grpc_web || path.starts_with("/console")) {
            return crate::console::response(
                StatusCode::FORBIDDEN,
                "text/plain",
                "the console is served over TLS on this port (tls is configured): open it with \
                 https://\n",
            );
        }
        if grpc_web {
            let mut api = self.console.clone();
            let Ok(mut response) = api.call(req).await;
            crate::console::secure(response.headers_mut());
            return response;
        }
        if let Some(asset) = crate::console::asset(path) {
            return asset;
        }
        let (status, content_type, body) = match path {
            "/metrics" => (
                StatusCode::OK,
                "text/plain; version=0.0.4",
                render(&*self.store, &self.gates, &self.metrics, self.max_hosts).await,
            ),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            "/readyz" => self.readiness().await,
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found: /metrics, /healthz, /readyz, /console\n".into(),
            ),
        };
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Body::new(Full::new(Bytes::from(body))))
            .expect("a valid response")
    }

    async fn readiness(&self) -> (StatusCode, &'static str, String) {
        let unavailable = |why: String| (StatusCode::SERVICE_UNAVAILABLE, "text/plain", why);
        if self.gates.draining.load(Ordering::Relaxed) {
            unavailable("draining\n".into())
        } else if let Err(e) = crate::store::hosts_or_problem(&*self.store).await {
            unavailable(format!("{e}\n"))
        } else {
            let note = self
                .store
                .readiness_note()
                .map_or_else(String::new, |n| format!("{n}\n"));
            (StatusCode::OK, "text/plain", format!("ready\n{note}"))
        }
    }
}
