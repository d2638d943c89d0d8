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
    self as ext, BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse,
    HttpHeaders, ImmediateResponse, ProcessingRequest, ProcessingResponse, TrailersResponse,
    body_mutation, processing_request::Request as Part, processing_response::Response as Answer,
};
use crate::api::envoy::r#type::v3::HttpStatus;
use crate::gates::Gates;
use crate::http_admission::{self, Ask, HttpPolicy, LivePolicies, Tokens, openai};
use crate::ledger::{AuthorizeArgs, Coverage, Decision, Usage};
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
        let policies = self.policies.get();
        // Without the metadata (a gateway that cannot send any, as Envoy Gateway's
        // EnvoyExtensionPolicy): the policy named `default`, or the only one.
        let name = match request
            .metadata()
            .get(POLICY_METADATA)
            .and_then(|v| v.to_str().ok())
        {
            Some(name) => name.to_string(),
            None if policies.policies.contains_key("default") => "default".to_string(),
            None if policies.policies.len() == 1 => {
                policies.policies.keys().next().expect("one").clone()
            }
            None => {
                return Err(ApiError::invalid(
                    POLICY_METADATA,
                    "is required: the filter's grpc_service.initial_metadata names the \
                     http_admission policy (or configure one policy, or one named default)",
                )
                .into());
            }
        };
        security::caller(request.extensions())?
            .http_policy(&name)
            .map_err(ApiError::from)?;
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
            // The holders' table of the console and ListTickets say which policy holds it.
            // (An id of at most 128 bytes: names are printable ASCII.)
            instance_id: format!("envoy:{}", &policy.name[..policy.name.len().min(122)]),
            policy,
            tx,
            held: None,
            pending: None,
            reserved: None,
            status: None,
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
    /// A policy that reads the body: the request's headers until its body comes, and the
    /// body so far.
    pending: Option<(Headers, Vec<u8>)>,
    /// The request's tokens reserved (`tokens: openai`), until settled (exactly once).
    reserved: Option<Reserved>,
    /// The response's status, once its headers came.
    status: Option<u16>,
}

/// A request's headers: (lower-cased key, value).
type Headers = Vec<(String, String)>;

/// A reservation to settle: the ledger key, and the response's usage as it is read.
struct Reserved {
    host_id: String,
    run_id: String,
    usage: Option<openai::UsageReader>,
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
                Step::Ended => self.finish(true).await,
                Step::Stop => break,
            }
            if let (false, Some(h)) = (had, &self.held) {
                renew = tokio::time::interval_at(tokio::time::Instant::now() + h.every, h.every);
                renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
        }
        self.finish(false).await;
    }

    /// The request is over (`complete`: its response ended, else the stream did): settle what
    /// it reserved, then release its ticket, each once.
    async fn finish(&mut self, complete: bool) {
        if let Some(r) = self.reserved.take() {
            let used = r
                .usage
                .and_then(|u| if complete { u.finish() } else { u.so_far() });
            let usage = match (used, self.status) {
                (Some(u), _) => Usage {
                    input_tokens: u.input,
                    output_tokens: u.output,
                    cost: 0,
                    coverage: if complete {
                        Coverage::Complete
                    } else {
                        Coverage::Partial
                    },
                },
                // The provider refused or failed: it billed nothing.
                (None, Some(status)) if status >= 400 => Usage {
                    input_tokens: 0,
                    output_tokens: 0,
                    cost: 0,
                    coverage: Coverage::Complete,
                },
                (None, _) => Usage {
                    input_tokens: 0,
                    output_tokens: 0,
                    cost: 0,
                    coverage: Coverage::Unknown,
                },
            };
            match self.store.settle(&r.host_id, &r.run_id, 1, usage).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(run = %r.run_id, "settling a request failed: {e}"),
                Err(e) => tracing::warn!(
                    run = %r.run_id,
                    "settling a request failed (its reservation turns uncertain): {e}"
                ),
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
            Part::RequestHeaders(h) => {
                let pairs = header_pairs(&h);
                if self.policy.needs_body() && !h.end_of_stream {
                    // Admitted once the body is read (Envoy sends it, BUFFERED, before the
                    // request goes anywhere).
                    self.pending = Some((pairs, Vec::new()));
                    (Answer::RequestHeaders(go()), Step::Go)
                } else {
                    match self.admit_with_body(pairs, Vec::new(), inbound).await {
                        Ok(_) => (Answer::RequestHeaders(go()), Step::Go),
                        Err(refused) => (Answer::ImmediateResponse(refused), Step::Stop),
                    }
                }
            }
            Part::RequestBody(b) => match self.pending.as_mut() {
                Some((_, body)) if !b.end_of_stream => {
                    // Not BUFFERED: the chunks are kept until the last one.
                    if body.len() + b.body.len() > openai::MAX_JSON_BODY {
                        self.pending = None;
                        let refused = self.refuse(
                            413,
                            "BODY_TOO_LARGE",
                            "the request body is too large to admit",
                            None,
                        );
                        (Answer::ImmediateResponse(refused), Step::Stop)
                    } else {
                        body.extend_from_slice(&b.body);
                        (Answer::RequestBody(go_body()), Step::Go)
                    }
                }
                Some(_) => {
                    let (pairs, mut body) = self.pending.take().expect("pending");
                    body.extend_from_slice(&b.body);
                    match self.admit_with_body(pairs, body, inbound).await {
                        Ok(rewritten) => (Answer::RequestBody(body_answer(rewritten)), Step::Go),
                        Err(refused) => (Answer::ImmediateResponse(refused), Step::Stop),
                    }
                }
                None => (Answer::RequestBody(go_body()), Step::Go),
            },
            Part::RequestTrailers(_) => (Answer::RequestTrailers(trailers()), Step::Go),
            Part::ResponseHeaders(h) => {
                if self.pending.take().is_some() {
                    tracing::error!(
                        policy = %self.policy.name,
                        "a request of a policy that reads the body reached its response \
                         without its body: the filter must send the request body \
                         (processing_mode.request_body_mode: BUFFERED); it was not admitted"
                    );
                }
                let status = header(&h, ":status");
                self.status = status;
                if let (Some(held), Some(status)) = (&mut self.held, status) {
                    held.outcome = outcome_of(status);
                }
                if let Some(r) = &mut self.reserved {
                    let content_type = header_text(&h, "content-type").unwrap_or_default();
                    r.usage = Some(openai::UsageReader::new(&content_type));
                }
                let step = if h.end_of_stream {
                    Step::Ended
                } else {
                    Step::Go
                };
                (Answer::ResponseHeaders(go()), step)
            }
            Part::ResponseBody(b) => {
                if let Some(u) = self.reserved.as_mut().and_then(|r| r.usage.as_mut()) {
                    u.push(&b.body);
                }
                (
                    Answer::ResponseBody(go_body()),
                    if b.end_of_stream {
                        Step::Ended
                    } else {
                        Step::Go
                    },
                )
            }
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

    /// Admit the request with `pairs` (its headers) and `body` (empty when not read): its
    /// ticket, then with `tokens: openai` its reservation (a ticket whose reservation is
    /// refused is released at once). Returns the body rewritten to a lower grant, if any;
    /// the answer that refuses the request otherwise.
    async fn admit_with_body(
        &mut self,
        pairs: Vec<(String, String)>,
        body: Vec<u8>,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<Option<Vec<u8>>, ImmediateResponse> {
        let ask = http_admission::ask(&self.policy, &pairs, &body, || {
            format!("ext-proc-{:032x}", TicketId::random_key())
        })
        .map_err(|e| self.refuse(400, "BAD_REQUEST", &e.to_string(), None))?;
        let Some(Tokens::OpenAi { default_max_tokens }) = self.policy.tokens.clone() else {
            self.admit(&ask, inbound).await?;
            return Ok(None);
        };
        // A body that cannot be reserved for is refused before it takes a slot.
        let asked = openai::asked(&body, default_max_tokens)
            .map_err(|e| self.refuse(400, "BAD_REQUEST", &e, None))?;
        let run_id = self.admit(&ask, inbound).await?;
        let args = AuthorizeArgs {
            run_id: run_id.clone(),
            step: 1,
            subject: ask.subject.clone(),
            account_id: ask.account_id.clone(),
            model: asked.model.clone(),
            requested_output_tokens: asked.output_tokens.max(1),
            estimated_input_tokens: asked.input_estimate,
            estimated_cost: 0,
        };
        let auth = match self.store.authorize(&ask.host_id, args).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                self.release().await;
                return Err(self.refuse(400, "BAD_REQUEST", &e.to_string(), None));
            }
            Err(e) => {
                self.release().await;
                return Err(self.unavailable(&e.to_string()));
            }
        };
        match auth.decision {
            Decision::Allow => {
                self.reserved = Some(Reserved {
                    host_id: ask.host_id.clone(),
                    run_id,
                    usage: None,
                });
                Ok((auth.granted_output_tokens < asked.output_tokens)
                    .then(|| openai::with_output_bound(&body, auth.granted_output_tokens))
                    .flatten())
            }
            // The budget leaves the call to the gateway (`unknown_usage: defer`): the filter
            // has no policy of its own, so the request goes on, unreserved.
            Decision::Unknown => Ok(None),
            Decision::Deny => {
                self.release().await;
                let reason = auth.reason.map_or("DENIED", |r| r.code());
                Err(self.refuse(
                    429,
                    reason,
                    &format!("the token budget refuses the request ({reason})"),
                    Some(60),
                ))
            }
        }
    }

    /// Submit the request's ticket and wait while it is queued (at most `max_wait`, while
    /// Envoy keeps the stream open); its run id once admitted, the answer that refuses it
    /// otherwise.
    async fn admit(
        &mut self,
        ask: &Ask,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<String, ImmediateResponse> {
        if self.gates.draining.load(Ordering::Relaxed) {
            return Err(self.refused(Refusal::Draining));
        }
        if self.gates.authority_memory_full.load(Ordering::Relaxed) {
            return Err(self.refused(Refusal::MemoryPressure));
        }
        let asked_at = crate::clock::Stopwatch::start();
        let (id, view, run_id) = self.submit(ask).await?;
        let view = match view.state {
            TicketState::Admitted => view,
            TicketState::Queued => {
                let every = Duration::from_millis((view.lease_remaining_ms / 3).max(100));
                self.wait(&id, every, inbound).await?
            }
            other => {
                return Err(self.refuse(
                    429,
                    "ENDED",
                    &format!("the request's ticket is {}", super::state_name(other)),
                    Some(1),
                ));
            }
        };
        self.metrics
            .http
            .admitted(&self.policy.name, asked_at.elapsed());
        let lease = view.lease_remaining_ms.max(300);
        self.held = Some(Held {
            id,
            every: Duration::from_millis(lease / 3),
            outcome: Outcome::Unspecified,
        });
        Ok(run_id)
    }

    async fn submit(&self, ask: &Ask) -> Result<(TicketId, TicketView, String), ImmediateResponse> {
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
                Ok(Ok((id, view))) if view.state.is_live() => return Ok((id, view, run_id)),
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
        renew_every: Duration,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<TicketView, ImmediateResponse> {
        let mut watch = self.store.watch(id);
        let deadline = tokio::time::sleep(Duration::from_millis(self.policy.max_wait_ms));
        tokio::pin!(deadline);
        // Its lease renewed every third of it while it waits, as a Wait stream renews.
        let mut keepalive =
            tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
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
        self.metrics.http.released(&self.policy.name);
        let report = Report {
            outcome: h.outcome,
            latency_ms: None,
        };
        if let Err(e) = self.store.release(&h.id, report).await {
            tracing::warn!(ticket = %h.id, "releasing a request's ticket failed; its lease frees it: {e}");
        }
    }

    fn refused(&self, r: Refusal) -> ImmediateResponse {
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
        reason: &'static str,
        text: &str,
        retry_s: Option<u64>,
    ) -> ImmediateResponse {
        self.metrics.http.refused(&self.policy.name, reason);
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

/// Go on, with the body replaced by `rewritten` (and its length with it) when given.
fn body_answer(rewritten: Option<Vec<u8>>) -> BodyResponse {
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

fn header_text(h: &HttpHeaders, name: &str) -> Option<String> {
    header_pairs(h)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

fn header(h: &HttpHeaders, name: &str) -> Option<u16> {
    header_text(h, name).and_then(|v| v.parse().ok())
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
