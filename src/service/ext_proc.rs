//! Envoy's external processing service, `envoy.service.ext_proc.v3.ExternalProcessor/Process`,
//! on the gRPC port beside the rate limit service: one stream per HTTP request, admitted as
//! one ticket of the scheduler under the policy the filter names (`x-admission-policy` in its
//! `initial_metadata`, see [`crate::http_admission`]).
//!
//! The request's headers submit the ticket; the answer to them waits while it is queued (at
//! most the policy's `max_wait`), then lets the request go on, or answers the client at once:
//! 429 with `retry-after` (refused, or waited past `max_wait`), 400 naming a missing subject,
//! 503 when the store cannot decide (never admitted uncounted). The ticket is renewed while
//! the stream is open and released exactly once: at the response's end (its last body chunk,
//! headers or trailers that end it), or when the stream ends first (the client left, Envoy
//! reset the request, the upstream failed, Envoy died: its connection closes).
//!
//! Who may call: with credentials configured, a gateway credential whose `http_policies` name
//! the policy, as a bearer token in the filter's `initial_metadata` or by mTLS.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::status::ApiError;
use crate::api::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use crate::api::envoy::service::ext_proc::v3::{
    self as ext, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpHeaders,
    ImmediateResponse, ProcessingRequest, ProcessingResponse, TrailersResponse,
    processing_request::Request as Part, processing_response::Response as Answer,
};
use crate::api::envoy::r#type::v3::HttpStatus;
use crate::gates::Gates;
use crate::http_admission::{self, Ask, HttpPolicy, LivePolicies};
use crate::metrics::Metrics;
use crate::scheduler::{
    DEFAULT_PRIORITY, Outcome, Refusal, Report, SubmitArgs, SubmitError, SubmitMode, TicketState,
    TicketView,
};
use crate::security;
use crate::store::{Store, TicketId, TicketWatch};

/// The metadata key of the filter's `initial_metadata` that names the policy.
pub const POLICY_METADATA: &str = "x-admission-policy";

/// The service over a store.
pub struct ExtProcService<S> {
    store: Arc<S>,
    policies: Arc<LivePolicies>,
    gates: Arc<Gates>,
    metrics: Arc<Metrics>,
    /// The instance id the tickets carry: this authority's, as Envoy is no gateway replica
    /// that renews by itself.
    instance_id: String,
}

impl<S> ExtProcService<S> {
    pub fn new(
        store: Arc<S>,
        policies: Arc<LivePolicies>,
        gates: Arc<Gates>,
        metrics: Arc<Metrics>,
    ) -> Self {
        ExtProcService {
            store,
            policies,
            gates,
            metrics,
            instance_id: format!("envoy-ext-proc@{}", std::process::id()),
        }
    }
}

#[tonic::async_trait]
impl<S: Store> ext::external_processor_server::ExternalProcessor for ExtProcService<S> {
    type ProcessStream = ReceiverStream<Result<ProcessingResponse, Status>>;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let name = request
            .metadata()
            .get(POLICY_METADATA)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| {
                ApiError::invalid(
                    POLICY_METADATA,
                    "is required: the filter's grpc_service.initial_metadata names the \
                     http_admission policy",
                )
            })?;
        security::caller(request.extensions())?
            .http_policy(&name)
            .map_err(ApiError::from)?;
        let policies = self.policies.get();
        let policy = policies.policies.get(&name).cloned().ok_or_else(|| {
            let known: Vec<&str> = policies.policies.keys().map(String::as_str).collect();
            ApiError::invalid(
                POLICY_METADATA,
                format!(
                    "no http_admission policy is named {name:?} (configured: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?;
        let (tx, rx) = mpsc::channel(4);
        let exchange = Exchange {
            store: self.store.clone(),
            gates: self.gates.clone(),
            metrics: self.metrics.clone(),
            instance_id: self.instance_id.clone(),
            policy,
            tx,
            held: None,
        };
        tokio::spawn(exchange.run(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A ticket this request holds, renewed every `every` while the stream is open.
struct Held {
    id: TicketId,
    every: Duration,
    outcome: Outcome,
}

/// One HTTP request's stream with Envoy.
struct Exchange<S> {
    store: Arc<S>,
    gates: Arc<Gates>,
    metrics: Arc<Metrics>,
    instance_id: String,
    policy: HttpPolicy,
    tx: mpsc::Sender<Result<ProcessingResponse, Status>>,
    /// Set while the request holds its ticket; taken when it is released (exactly once).
    held: Option<Held>,
}

/// What a message from Envoy leads to.
enum Step {
    Go,
    /// The response ended: release now.
    Ended,
    /// The stream is done (an immediate response was sent, or Envoy is gone).
    Stop,
}

impl<S: Store> Exchange<S> {
    async fn run(mut self, mut inbound: Streaming<ProcessingRequest>) {
        let mut renew = tokio::time::interval(Duration::from_secs(3600));
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let message = tokio::select! {
                m = inbound.message() => m,
                _ = self.tx.closed() => break,
                _ = renew.tick(), if self.held.is_some() => {
                    self.renew().await;
                    continue;
                }
            };
            let part = match message {
                Ok(Some(ProcessingRequest {
                    request: Some(part),
                    async_mode,
                })) => (part, async_mode),
                Ok(Some(_)) => continue,
                // Envoy ended the stream (the HTTP stream is over, or was reset), or it broke.
                Ok(None) | Err(_) => break,
            };
            let had = self.held.is_some();
            match self.step(part.0, part.1, &mut inbound).await {
                Step::Go => {}
                Step::Ended => self.release().await,
                Step::Stop => break,
            }
            if let (false, Some(h)) = (had, &self.held) {
                renew = tokio::time::interval_at(tokio::time::Instant::now() + h.every, h.every);
                renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
        }
        self.release().await;
    }

    async fn step(
        &mut self,
        part: Part,
        async_mode: bool,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Step {
        let (answer, step) = match part {
            Part::RequestHeaders(h) => match self.admit(&h, inbound).await {
                Ok(()) => (Answer::RequestHeaders(go()), Step::Go),
                Err(refused) => (Answer::ImmediateResponse(refused), Step::Stop),
            },
            Part::RequestBody(_) => (Answer::RequestBody(go_body()), Step::Go),
            Part::RequestTrailers(_) => (Answer::RequestTrailers(trailers()), Step::Go),
            Part::ResponseHeaders(h) => {
                if let (Some(held), Some(status)) = (&mut self.held, header(&h, ":status")) {
                    held.outcome = outcome_of(status);
                }
                let step = if h.end_of_stream {
                    Step::Ended
                } else {
                    Step::Go
                };
                (Answer::ResponseHeaders(go()), step)
            }
            Part::ResponseBody(b) => (
                Answer::ResponseBody(go_body()),
                if b.end_of_stream {
                    Step::Ended
                } else {
                    Step::Go
                },
            ),
            Part::ResponseTrailers(_) => (Answer::ResponseTrailers(trailers()), Step::Ended),
        };
        if !async_mode
            && self
                .tx
                .send(Ok(ProcessingResponse {
                    response: Some(answer),
                    override_message_timeout: None,
                }))
                .await
                .is_err()
        {
            return Step::Stop;
        }
        step
    }

    /// Submit the request's ticket and wait while it is queued (at most `max_wait`, while
    /// Envoy keeps the stream open); the answer that refuses it otherwise.
    async fn admit(
        &mut self,
        headers: &HttpHeaders,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<(), ImmediateResponse> {
        let pairs = header_pairs(headers);
        let ask = http_admission::ask(&self.policy, &pairs, || {
            format!("ext-proc-{:032x}", TicketId::random_key())
        })
        .map_err(|e| self.refuse(400, "BAD_REQUEST", &e.to_string(), None))?;
        if self.gates.draining.load(Ordering::Relaxed) {
            return Err(self.refused(Refusal::Draining));
        }
        if self.gates.authority_memory_full.load(Ordering::Relaxed) {
            return Err(self.refused(Refusal::MemoryPressure));
        }
        let (id, view) = self.submit(&ask).await?;
        let view = match view.state {
            TicketState::Admitted => view,
            TicketState::Queued => self.wait(&id, inbound).await?,
            other => {
                return Err(self.refuse(
                    429,
                    "ENDED",
                    &format!("the request's ticket is {}", super::state_name(other)),
                    Some(1),
                ));
            }
        };
        self.metrics.decision("HttpAdmission", "admitted", "");
        let lease = view.lease_remaining_ms.max(300);
        self.held = Some(Held {
            id,
            every: Duration::from_millis(lease / 3),
            outcome: Outcome::Unspecified,
        });
        Ok(())
    }

    async fn submit(&self, ask: &Ask) -> Result<(TicketId, TicketView), ImmediateResponse> {
        let mut run_id = ask.run_id.clone();
        for _ in 0..2 {
            let args = SubmitArgs {
                instance_id: self.instance_id.clone(),
                subject: ask.subject.clone(),
                account_id: ask.account_id.clone(),
                run_id: run_id.clone(),
                mode: SubmitMode::Queue,
                rss_mb: None,
                priority: if ask.priority == 0 {
                    DEFAULT_PRIORITY
                } else {
                    ask.priority
                },
                resubmit_expired: false,
            };
            match self.store.submit(&ask.host_id, args).await {
                Ok(Ok((id, view))) if view.state.is_live() => return Ok((id, view)),
                // The request id named an ended ticket (a client that reuses x-request-id):
                // this request is another one.
                Ok(Ok(_)) | Ok(Err(SubmitError::RunIdConflict { .. })) => {
                    run_id = format!("{}.{:08x}", ask.run_id, TicketId::random_key() as u32);
                }
                Ok(Err(SubmitError::Refused(r) | SubmitError::Learning { refusal: r, .. })) => {
                    return Err(self.refused(r));
                }
                Err(e) => return Err(self.unavailable(&e.to_string())),
            }
        }
        Err(self.unavailable("no ticket could be made for the request"))
    }

    /// Follow a queued ticket until it is admitted (renewing its lease meanwhile), for at most
    /// `max_wait`; withdrawn when it waited too long or the stream ended.
    async fn wait(
        &mut self,
        id: &TicketId,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<TicketView, ImmediateResponse> {
        let mut watch = self.store.watch(id);
        let deadline = tokio::time::sleep(Duration::from_millis(self.policy.max_wait_ms));
        tokio::pin!(deadline);
        let mut keepalive = tokio::time::interval(Duration::from_millis(300));
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refresh = tokio::time::interval(super::wait::POSITION_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            match self.store.ticket(id).await {
                Ok(Some(v)) if v.state == TicketState::Admitted => return Ok(v),
                Ok(Some(v)) if v.state == TicketState::Queued => {}
                Ok(Some(v)) => {
                    return Err(self.refuse(
                        429,
                        "ENDED",
                        &format!(
                            "the request's ticket ended {} while queued",
                            super::state_name(v.state)
                        ),
                        Some(1),
                    ));
                }
                Ok(None) => {
                    return Err(self.unavailable("the store lost the request's queued ticket"));
                }
                Err(e) => {
                    self.withdraw(id).await;
                    return Err(self.unavailable(&e.to_string()));
                }
            }
            tokio::select! {
                _ = watch.changed() => {}
                _ = refresh.tick() => {}
                _ = keepalive.tick() => {
                    let _ = self.store.renew(std::slice::from_ref(id), None).await;
                }
                _ = &mut deadline => {
                    self.withdraw(id).await;
                    // Admitted in the meantime: it goes on after all.
                    if let Ok(Some(v)) = self.store.ticket(id).await
                        && v.state == TicketState::Admitted
                    {
                        return Ok(v);
                    }
                    self.metrics.decision("HttpAdmission", "refused", "MAX_WAIT");
                    return Err(self.refuse(
                        429,
                        "MAX_WAIT",
                        &format!(
                            "queued for the policy's max_wait ({} ms) without a free slot",
                            self.policy.max_wait_ms
                        ),
                        Some(1),
                    ));
                }
                // Envoy gave up on the request (the client left, the request was reset).
                m = inbound.message() => {
                    if !matches!(m, Ok(Some(_))) {
                        self.withdraw(id).await;
                        return Err(self.refuse(499, "GONE", "the client went away", None));
                    }
                }
            }
        }
    }

    /// Withdraw a queued ticket (or free it, if it was admitted meanwhile).
    async fn withdraw(&self, id: &TicketId) {
        if let Err(e) = self.store.release(id, Report::default()).await {
            tracing::warn!(ticket = %id, "withdrawing a request's ticket failed; its lease frees it: {e}");
        }
    }

    async fn renew(&mut self) {
        let Some(h) = &self.held else { return };
        if let Ok(views) = self.store.renew(std::slice::from_ref(&h.id), None).await
            && let Some(None)
            | Some(Some(TicketView {
                state: TicketState::Expired,
                ..
            })) = views.first().map(|v| v.as_ref())
        {
            tracing::warn!(ticket = %h.id, "a request's ticket lapsed while it ran");
        }
    }

    /// Release the held ticket, once.
    async fn release(&mut self) {
        let Some(h) = self.held.take() else { return };
        let report = Report {
            outcome: h.outcome,
            latency_ms: None,
        };
        if let Err(e) = self.store.release(&h.id, report).await {
            tracing::warn!(ticket = %h.id, "releasing a request's ticket failed; its lease frees it: {e}");
        }
    }

    fn refused(&self, r: Refusal) -> ImmediateResponse {
        self.metrics.decision("HttpAdmission", "refused", r.code());
        let status = match r {
            Refusal::Draining => 503,
            _ => 429,
        };
        let retry = super::status::retry_after(r).as_secs().max(1);
        self.refuse(
            status,
            r.code(),
            super::status::refusal_message(r),
            Some(retry),
        )
    }

    fn unavailable(&self, why: &str) -> ImmediateResponse {
        self.metrics
            .decision("HttpAdmission", "refused", "STORE_UNAVAILABLE");
        self.refuse(
            503,
            "STORE_UNAVAILABLE",
            &format!("the admission authority cannot decide now: {why}"),
            Some(1),
        )
    }

    /// An immediate answer to the client: `status`, `x-admission-refused: reason`,
    /// `retry-after` when given, and `text` as the body.
    fn refuse(
        &self,
        status: u16,
        reason: &str,
        text: &str,
        retry_s: Option<u64>,
    ) -> ImmediateResponse {
        let mut set_headers = vec![option("x-admission-refused", reason)];
        if let Some(s) = retry_s {
            set_headers.push(option("retry-after", &s.to_string()));
        }
        ImmediateResponse {
            // Envoy's StatusCode numbers are the HTTP codes themselves.
            status: Some(HttpStatus {
                code: i32::from(status),
            }),
            headers: Some(HeaderMutation {
                set_headers,
                remove_headers: Vec::new(),
            }),
            body: format!("{text}\n"),
            details: format!("admission_{}", reason.to_ascii_lowercase()),
        }
    }
}

/// A header to set. Envoy 1.40 reads header values from `raw_value` (as it sends them).
fn option(key: &str, value: &str) -> HeaderValueOption {
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

fn go() -> HeadersResponse {
    HeadersResponse {
        response: Some(CommonResponse::default()),
    }
}

fn go_body() -> BodyResponse {
    BodyResponse {
        response: Some(CommonResponse::default()),
    }
}

fn trailers() -> TrailersResponse {
    TrailersResponse::default()
}

/// The headers as (lower-cased key, value): `value`, or `raw_value` as text.
fn header_pairs(h: &HttpHeaders) -> Vec<(String, String)> {
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

fn header(h: &HttpHeaders, name: &str) -> Option<u16> {
    header_pairs(h)
        .into_iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// What the upstream's status says of the provider behind it (the adaptive caps' signal).
fn outcome_of(status: u16) -> Outcome {
    match status {
        200..=399 => Outcome::Ok,
        429 => Outcome::RateLimited,
        500..=599 => Outcome::Overloaded,
        _ => Outcome::Failed,
    }
}
