//! The composition root: builds the store and services from a [`Config`], starts the
//! background tasks (lease sweep, the authority's own memory watch), and serves gRPC on a bound
//! listener until `shutdown` resolves. `main` and the integration tests both start the server
//! here, so tests run exactly what ships.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::api::envoy::service::ext_proc::v3::external_processor_server::ExternalProcessorServer;
use crate::api::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use crate::api::{admission_server::AdmissionServer, operator_server::OperatorServer};
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, TlsFiles};
use crate::gates::Gates;
use crate::http_admission::LivePolicies;
use crate::metrics::Metrics;
use crate::net::{ConnectionGate, Incoming};
use crate::ratelimit::LiveRateLimits;
use crate::security::Authenticator;
use crate::service::{AdmissionService, ExtProcService, OperatorService, RateLimitService};
use crate::store::journal::JournalOptions;
use crate::store::memory::{MemoryStore, OpenOptions};
use crate::store::redis::RedisStore;
use crate::store::{Policy, Store, StoreError, TicketStore, Timed};

mod background;

use background::{Live, drain_then_stop, start_background};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Config(String),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// What SIGHUP needs: the signal, listened to from before the process says it is listening (so
/// an early SIGHUP cannot end it), and how to read the configuration again (the file, with the
/// command line's flags on top).
pub struct Reload {
    #[cfg(unix)]
    pub hangup: tokio::signal::unix::Signal,
    pub load: Box<dyn Fn() -> Result<Config, crate::config::ConfigErrors> + Send + Sync>,
}

/// Serve `config` on `listener` until `shutdown` resolves, then stop accepting, let calls in
/// progress finish, and return. With `reload`, SIGHUP reads the file again: a valid one's
/// scheduling limits are applied (the changed keys logged; keys that only a restart applies are
/// named as such), an invalid one is logged with every problem and the running configuration
/// stays. [`prepare`] then [`serve_prepared`], for callers with nothing to say in between.
///
/// Fails as those do.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Reload>,
) -> Result<(), ServeError> {
    let prepared = prepare(config)?;
    prepared.check_store().await?;
    serve_prepared(prepared, listener, shutdown, reload).await
}

/// A configuration with its store open: an embedded store's data dir is restored, a Redis
/// store's connections are set up (they connect on first use).
pub struct Prepared {
    config: Config,
    clock: Arc<dyn Clock>,
    store: OpenStore,
    /// The admin endpoint's socket, bound here so that it answers once `listening on` is said.
    admin: Option<std::net::TcpListener>,
}

enum OpenStore {
    Embedded(Arc<MemoryStore>),
    Redis(Arc<RedisStore>),
}

/// The first phase of serving: check the configuration and open its store, so that the state
/// is back before the process says it is listening.
///
/// Fails when the configuration may not be served (see [`Config::check_exposure`]), the data
/// dir cannot be used (locked by another process, damaged, of a newer format: the message
/// names the file), or the Redis settings cannot work.
pub fn prepare(config: Config) -> Result<Prepared, ServeError> {
    config.check_exposure().map_err(ServeError::Config)?;
    let policy = Policy {
        limits: config.limits.clone(),
        auth: config.auth.clone(),
        resources: config.resources.clone(),
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let store = match (&config.redis, &config.embedded.data_dir) {
        (None, None) => {
            tracing::warn!(
                "embedded store in memory only: its state ends with this process (serve with \
                 --data-dir DIR to keep it across restarts)"
            );
            OpenStore::Embedded(Arc::new(MemoryStore::new(policy, clock.clone())))
        }
        (None, Some(dir)) => {
            let options = OpenOptions {
                dir: dir.clone(),
                journal: JournalOptions {
                    sync: config.embedded.sync,
                    sync_interval: Duration::from_millis(config.embedded.sync_interval_ms),
                    snapshot_after_bytes: config.embedded.snapshot_after_bytes,
                },
            };
            let (store, restored) = MemoryStore::open(&options, policy, clock.clone())
                .map_err(|e| ServeError::Config(e.to_string()))?;
            if restored.fresh {
                tracing::info!(dir = %dir.display(), sync = config.embedded.sync.name(), "embedded store on a new data dir");
            } else {
                tracing::info!(
                    dir = %dir.display(),
                    sync = config.embedded.sync.name(),
                    hosts = restored.hosts,
                    live_tickets = restored.live_tickets,
                    records = restored.records,
                    took_ms = restored.took.as_millis() as u64,
                    "embedded store restored from its data dir"
                );
            }
            OpenStore::Embedded(Arc::new(store))
        }
        (Some(r), _) => {
            let store = if r.cluster {
                RedisStore::new_cluster(&[r.url.as_str()], &r.prefix, policy, clock.clone())
            } else if let Some(s) = &r.sentinel {
                let settings = crate::store::redis::source::SentinelSettings {
                    master: s.master.clone(),
                    nodes: s.nodes.clone(),
                    password: s.password.clone(),
                };
                RedisStore::new_sentinel(
                    &r.url,
                    &settings,
                    &r.prefix,
                    r.pool_size,
                    policy,
                    clock.clone(),
                )
            } else {
                RedisStore::new(&r.url, &r.prefix, r.pool_size, policy, clock.clone())
            }
            .map_err(|e| ServeError::Config(e.to_string()))?;
            store
                .confirm_replication(
                    r.replicas_acked,
                    Duration::from_millis(r.replication_timeout_ms),
                )
                .map_err(|e| ServeError::Config(e.to_string()))?;
            OpenStore::Redis(Arc::new(store))
        }
    };
    let admin = match config.admin_listen {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| {
                    ServeError::Config(format!("admin_listen: cannot bind {addr}: {e}"))
                })?,
        ),
        None => None,
    };
    Ok(Prepared {
        config,
        clock,
        store,
        admin,
    })
}

impl Prepared {
    /// Before the process says it listens: a Redis store registers this replica on its prefix
    /// and checks that it may share it (see [`crate::store::redis::layout`]). A Redis that
    /// cannot be reached is no reason not to start (calls fail closed until it answers, and
    /// the sweep registers the replica then).
    ///
    /// Fails when a live replica of a layout this version may not run beside shares the
    /// prefix, or the prefix holds state of a layout this version no longer reads.
    pub async fn check_store(&self) -> Result<(), ServeError> {
        let OpenStore::Redis(store) = &self.store else {
            return Ok(());
        };
        match store.join().await {
            Ok(()) => Ok(()),
            Err(StoreError::Incompatible { what }) => Err(ServeError::Config(format!(
                "store.redis: this replica may not use the prefix: {what}"
            ))),
            Err(e) => {
                tracing::warn!(
                    "store.redis: cannot register this replica yet ({e}); the sweep will"
                );
                Ok(())
            }
        }
    }
}

/// The second phase: serve a prepared configuration on `listener` (see [`run`]).
///
/// Fails when the transport fails.
pub async fn serve_prepared(
    prepared: Prepared,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Reload>,
) -> Result<(), ServeError> {
    let Prepared {
        config,
        clock,
        store,
        admin,
    } = prepared;
    let admin = admin
        .map(TcpListener::from_std)
        .transpose()
        .map_err(|e| ServeError::Config(format!("admin_listen: {e}")))?;
    let listeners = (listener, admin);
    // From here a pause of this process is seen, and leases count from its end.
    let pauses = match &store {
        OpenStore::Embedded(s) => s.pauses(),
        OpenStore::Redis(s) => s.pauses(),
    };
    pauses.start_heartbeat(crate::pause::threshold_for(
        config.limits.shortest_lease_ms(),
    ));
    match store {
        OpenStore::Embedded(s) => serve(s, clock, config, listeners, shutdown, reload).await,
        OpenStore::Redis(s) => {
            let served = serve(s.clone(), clock, config, listeners, shutdown, reload).await;
            s.leave().await;
            served
        }
    }
}

/// Serve on one store: the part of [`run`] that does not care which store it is, in steps:
/// the background tasks, health, the services, the admin endpoint, then gRPC until shutdown.
async fn serve<S: Store>(
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    config: Config,
    (listener, admin_listener): (TcpListener, Option<TcpListener>),
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Reload>,
) -> Result<(), ServeError> {
    let metrics = Arc::new(Metrics::default());
    // Every store call from here on is timed (admission_store_call_duration_seconds).
    let store = Arc::new(Timed::new(store, metrics.store.clone()));
    let rate_limits = Arc::new(LiveRateLimits::new(config.rate_limits.policy.clone()));
    let policies = Arc::new(LivePolicies::new(config.http_admission.clone()));
    let gates = Arc::new(Gates::default());
    crate::telemetry::register(metrics.clone());
    let live = Live {
        rate_limits: rate_limits.clone(),
        policies: policies.clone(),
    };
    let background = start_background(&store, &config, reload, &live, &gates);
    let (health_service, health_on_drain) = health::<S>(gates.clone()).await;
    let shutdown = drain_then_stop(
        shutdown,
        store.clone(),
        gates.clone(),
        Duration::from_millis(config.drain_grace_ms),
    );
    let auth = Authenticator::new(config.credentials.clone());
    if !auth.is_open() && config.tls.is_none() && !config.listen.ip().is_loopback() {
        tracing::warn!(
            "credentials are configured without tls: bearer tokens cross the network in clear \
             text; configure tls.cert and tls.key"
        );
    }
    let services = Services::new(&store, &gates, &metrics, &clock, &live, &config);
    // From here every byte either port sends passes a gate that writes the journal's records
    // first (with a data dir under `interval` or `os`; see `net::Outbound`).
    let sends = store.send_gates();
    let admin = match admin_listener {
        Some(l) => {
            let parts = AdminParts {
                store: store.clone(),
                gates: gates.clone(),
                metrics: metrics.clone(),
                sends: sends.clone(),
            };
            Some(start_admin(l, &services, &auth, parts, &config)?)
        }
        None => None,
    };
    let grpc = Grpc {
        services,
        auth,
        health: health_service,
        config: &config,
        metrics: &metrics,
    };
    let result = grpc.serve(listener, sends, shutdown).await;
    for task in background {
        task.abort();
    }
    store.flush();
    health_on_drain.abort();
    if let Some(a) = admin {
        a.abort();
    }
    result
}

/// `grpc.health.v1`, every service serving; draining (SIGTERM or the Drain RPC) turns it
/// NOT_SERVING, so load balancers move new work to other replicas while admitted tickets
/// finish here. Envoy's rate limit service keeps answering while this process drains. Returns
/// the service and the task that follows the drain.
async fn health<S: Store>(
    gates: Arc<Gates>,
) -> (
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    tokio::task::JoinHandle<()>,
) {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<AdmissionServer<AdmissionService<S>>>()
        .await;
    health
        .set_serving::<OperatorServer<OperatorService<S>>>()
        .await;
    health
        .set_serving::<RateLimitServiceServer<RateLimitService<S>>>()
        .await;
    health
        .set_serving::<ExternalProcessorServer<ExtProcService<S>>>()
        .await;
    let on_drain = tokio::spawn(async move {
        gates.drain_started().await;
        health
            .set_not_serving::<AdmissionServer<AdmissionService<S>>>()
            .await;
        health
            .set_not_serving::<OperatorServer<OperatorService<S>>>()
            .await;
        health
            .set_not_serving::<ExternalProcessorServer<ExtProcService<S>>>()
            .await;
        health
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
    });
    (health_service, on_drain)
}

/// The services on one store, before their credentials are checked.
struct Services<S: Store> {
    admission: AdmissionServer<AdmissionService<Timed<S>>>,
    operator: OperatorServer<OperatorService<Timed<S>>>,
    rate_limit: RateLimitServiceServer<RateLimitService<Timed<S>>>,
    ext_proc: ExternalProcessorServer<ExtProcService<Timed<S>>>,
}

impl<S: Store> Services<S> {
    fn new(
        store: &Arc<Timed<S>>,
        gates: &Arc<Gates>,
        metrics: &Arc<Metrics>,
        clock: &Arc<dyn Clock>,
        live: &Live,
        config: &Config,
    ) -> Self {
        let max = config.grpc.max_message_bytes;
        let rate_limits = &live.rate_limits;
        Services {
            admission: AdmissionServer::new(AdmissionService::new(
                store.clone(),
                gates.clone(),
                config.grpc.max_wait_streams_per_connection,
                config.grpc.max_wait_streams,
                metrics.clone(),
                clock.clone(),
            ))
            .max_decoding_message_size(max),
            operator: OperatorServer::new(OperatorService::new(
                store.clone(),
                gates.clone(),
                rate_limits.clone(),
                live.policies.clone(),
                config.history,
            ))
            .max_decoding_message_size(max),
            rate_limit: RateLimitServiceServer::new(RateLimitService::new(
                store.clone(),
                rate_limits.clone(),
                metrics.clone(),
                clock.clone(),
            ))
            .max_decoding_message_size(max),
            ext_proc: ExternalProcessorServer::new(ExtProcService::new(
                store.clone(),
                live.policies.clone(),
                gates.clone(),
                metrics.clone(),
            ))
            .max_decoding_message_size(max),
        }
    }
}

/// What the admin endpoint reads and shares with the gRPC port.
struct AdminParts<S> {
    store: Arc<S>,
    gates: Arc<Gates>,
    metrics: Arc<Metrics>,
    sends: Option<crate::store::journal::SendGates>,
}

/// Serve the admin endpoint on `listener` (with `tls` as the gRPC port's), with the console's
/// calls: the same services as the gRPC port, each behind the operator credential.
fn start_admin<S: Store>(
    listener: TcpListener,
    services: &Services<S>,
    auth: &Authenticator,
    parts: AdminParts<Timed<S>>,
    config: &Config,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Config(format!("admin_listen: {e}")))?;
    tracing::info!(%addr, "admin endpoint: /metrics /healthz /readyz /console");
    let (a, o) = (auth.clone(), auth.clone());
    let admission = InterceptedService::new(services.admission.clone(), move |req| {
        a.intercept_operator(req)
    });
    let operator = InterceptedService::new(services.operator.clone(), move |req| {
        o.intercept_operator(req)
    });
    let console = tower_layer::Layer::layer(
        &tonic_web::GrpcWebLayer::new(),
        tonic::service::Routes::new(admission).add_service(operator),
    );
    let tls = match &config.tls {
        None => None,
        Some(files) => Some(
            crate::admin::tls_config(&read_tls_file(&files.cert)?, &read_tls_file(&files.key)?)
                .map_err(ServeError::Config)?,
        ),
    };
    let admin = crate::admin::Admin {
        store: parts.store,
        gates: parts.gates,
        metrics: parts.metrics,
        max_hosts: config.metrics_max_hosts,
        console,
        sends: parts.sends,
        tls,
    };
    Ok(tokio::spawn(crate::admin::serve_admin(listener, admin)))
}

/// The gRPC port's server: its services behind their credentials, with reflection and
/// health, and the network edge's limits.
struct Grpc<'a, S: Store, H> {
    services: Services<S>,
    auth: Authenticator,
    health: H,
    config: &'a Config,
    metrics: &'a Arc<Metrics>,
}

impl<S: Store, H> Grpc<'_, S, H>
where
    H: tonic::server::NamedService
        + tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    H::Future: Send + 'static,
{
    /// Serve on `listener` until `shutdown`; every byte sent passes `sends`.
    async fn serve(
        self,
        listener: TcpListener,
        sends: Option<crate::store::journal::SendGates>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let Grpc {
            services,
            auth,
            health,
            config,
            metrics,
        } = self;
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(crate::api::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let admission = {
            let auth = auth.clone();
            InterceptedService::new(services.admission, move |req| auth.intercept(req))
        };
        let rate_limit = {
            let auth = auth.clone();
            InterceptedService::new(services.rate_limit, move |req| auth.intercept(req))
        };
        let ext_proc = {
            let auth = auth.clone();
            InterceptedService::new(services.ext_proc, move |req| auth.intercept(req))
        };
        let operator =
            InterceptedService::new(services.operator, move |req| auth.intercept_operator(req));
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &config.tls {
            builder = builder.tls_config(tls_config(tls)?)?;
        }
        let connections = Arc::new(ConnectionGate::new(
            config.grpc.max_connections,
            crate::net::fd_limit(),
        ));
        metrics.watch_connections(connections.clone());
        // A client that connects and sends nothing gets as long as an unanswered PING would.
        let incoming = Incoming::new(
            listener,
            connections,
            sends,
            Duration::from_millis(config.grpc.keepalive_timeout_ms),
        );
        let g = &config.grpc;
        builder
            // Thousands of Wait streams on one connection need a wide connection window, or
            // h2 answers a burst of new streams with GOAWAY (ENHANCE_YOUR_CALM).
            .initial_connection_window_size(16 * 1024 * 1024)
            .max_concurrent_streams(g.max_streams_per_connection)
            // A client that stops answering PINGs (a frozen process) loses its connection, and
            // its Wait streams stop keeping its tickets alive.
            .http2_keepalive_interval(Some(Duration::from_millis(g.keepalive_interval_ms)))
            .http2_keepalive_timeout(Some(Duration::from_millis(g.keepalive_timeout_ms)))
            // Outermost, so it times what the caller gets (after framing's INVALID_ARGUMENT).
            .layer(crate::service::timing::RpcTiming(metrics.clone()))
            .layer(crate::service::framing::FramingErrorsAsBadInput)
            // Bounds every call but Wait, whose handler returns once the stream is open (a
            // client's shorter grpc-timeout wins), answering DEADLINE_EXCEEDED.
            .layer(crate::service::deadline::Deadlines {
                bound: Duration::from_millis(g.unary_timeout_ms),
            })
            // One span per RPC; handlers fill in host_id, subject and decision (never a token
            // or an auth identity).
            .trace_fn(|req| {
                tracing::debug_span!(
                    "rpc",
                    rpc = %req.uri().path(),
                    host_id = tracing::field::Empty,
                    subject = tracing::field::Empty,
                    domain = tracing::field::Empty,
                    decision = tracing::field::Empty,
                )
            })
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(admission)
            .add_service(operator)
            .add_service(rate_limit)
            .add_service(ext_proc)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .map_err(ServeError::from)
    }
}

/// The server's TLS settings from the configured files; with a client CA, every client must
/// present a certificate that chains to it (mTLS).
///
/// Fails when a file cannot be read (the configuration checked them when it was loaded, so
/// only a file changed since then fails here).
fn tls_config(files: &TlsFiles) -> Result<ServerTlsConfig, ServeError> {
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(
        read_tls_file(&files.cert)?,
        read_tls_file(&files.key)?,
    ));
    if let Some(ca) = &files.client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read_tls_file(ca)?));
    }
    Ok(tls)
}

fn read_tls_file(path: &std::path::Path) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|e| ServeError::Config(format!("tls: {}: {e}", path.display())))
}
