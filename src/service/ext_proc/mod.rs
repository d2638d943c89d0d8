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
use std::time::Duration;

use tonic::{Request, Response, Status, Streaming};

use crate::api::envoy::service::ext_proc::v3::{
    self as ext, ProcessingRequest, ProcessingResponse, processing_request::Request as Part,
    processing_response::Response as Answer,
};
use crate::gates::Gates;
use crate::http_admission::{HttpPolicy, LivePolicies, usage};
use crate::ledger::{Coverage, Usage};
use crate::metrics::Metrics;
use crate::scheduler::{Outcome, Report, TicketState, TicketView};
use crate::security;
use crate::service::status::ApiError;
use crate::store::{Store, TicketId};

mod admit;
mod answers;
mod replies;

pub use answers::Answers;
use answers::Outbox;

use replies::{body_answer, go, go_body, header_pairs, outcome_of, trailers, value};

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
    type ProcessStream = Answers;

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
        let outbox = Outbox::default();
        let exchange = Exchange {
            store: self.store.clone(),
            gates: self.gates.clone(),
            metrics: self.metrics.clone(),
            // The holders' table of the console and ListTickets say which policy holds it.
            // (An id of at most 128 bytes: names are printable ASCII.)
            instance_id: format!("envoy:{}", &policy.name[..policy.name.len().min(122)]),
            policy,
            outbox: outbox.clone(),
            held: None,
            submitting: None,
            started: false,
            pending: None,
            reserved: None,
            status: None,
        };
        Ok(Response::new(Answers::new(
            exchange.run(request.into_inner()),
            outbox,
        )))
    }
}

/// A ticket this request holds, renewed every `every` while the stream is open.
struct Held {
    id: TicketId,
    every: Duration,
    outcome: Outcome,
    /// Its release was begun (and counted): one the stream's drop interrupted is sent again
    /// (a second release of a ticket changes nothing), not counted again.
    releasing: bool,
}

/// One HTTP request's stream with Envoy.
struct Exchange<S: Store> {
    store: Arc<S>,
    gates: Arc<Gates>,
    metrics: Arc<Metrics>,
    instance_id: String,
    policy: Arc<HttpPolicy>,
    outbox: Outbox,
    /// Set while the request holds its ticket; taken when it is released (exactly once).
    held: Option<Held>,
    /// `(host_id, run_id)` while a ticket may exist that `held` does not name yet (its Submit
    /// or its wait in the queue under way): withdrawn by run id if the stream is dropped then.
    submitting: Option<(String, String)>,
    /// The request's headers came (a stream carries one request).
    started: bool,
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
    usage: Option<usage::UsageReader>,
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
        // Made once the ticket is held: a request refused, or still queued, has no timer.
        let mut renew: Option<tokio::time::Interval> = None;
        loop {
            let message = tokio::select! {
                // Envoy's message first: no random draw per message.
                biased;
                m = inbound.message() => m,
                _ = async { renew.as_mut().expect("made when the ticket was held").tick().await },
                    if self.held.is_some() && renew.is_some() => {
                    self.renew().await;
                    continue;
                }
            };
            let part = match message {
                Ok(Some(ProcessingRequest {
                    request: Some(part),
                    async_mode,
                })) => (part, async_mode),
                // Envoy ended the stream (the HTTP stream is over, or was reset).
                Ok(None) => break,
                // A message the processor cannot take (too large, undecodable, empty) is
                // refused, never a clean close: Envoy takes a stream that ends OK as
                // "processing complete" and would send the request on, unadmitted.
                Ok(Some(_)) => {
                    let refused = self.refuse(
                        400,
                        "BAD_MESSAGE",
                        "a processing request without a part",
                        None,
                    );
                    self.stop(refused, None).await;
                    break;
                }
                Err(status) => {
                    let refused = self.unreadable(&status);
                    self.stop(refused, Some(status)).await;
                    break;
                }
            };
            let had = self.held.is_some();
            match self.step(part.0, part.1, &mut inbound).await {
                Step::Go => {}
                Step::Ended => self.finish(true).await,
                Step::Stop => break,
            }
            if let (false, Some(h)) = (had, &self.held) {
                let mut every =
                    tokio::time::interval_at(tokio::time::Instant::now() + h.every, h.every);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                renew = Some(every);
            }
        }
        self.finish(false).await;
    }

    /// The request is over (`complete`: its response ended, else the stream did): settle what
    /// it reserved, then release its ticket, each once.
    async fn finish(&mut self, complete: bool) {
        if let Some(r) = self.reserved.take() {
            settle(&*self.store, r, self.status, complete).await;
        }
        self.release().await;
    }

    async fn step(
        &mut self,
        part: Part,
        async_mode: bool,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Step {
        if let Some(refused) = self.out_of_order(&part) {
            return self
                .answer(Answer::ImmediateResponse(refused), false, Step::Stop)
                .await;
        }
        let (answer, step) = match part {
            Part::RequestHeaders(h) => {
                self.started = true;
                let pairs = header_pairs(&h, |k| self.policy.reads_header(k));
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
                    if body.len() + b.body.len() > usage::MAX_JSON_BODY {
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
                let pairs = header_pairs(&h, |k| k == ":status" || k == "content-type");
                let status = value(&pairs, ":status").and_then(|v| v.parse().ok());
                self.status = status;
                if let (Some(held), Some(status)) = (&mut self.held, status) {
                    held.outcome = outcome_of(status);
                }
                if let (Some(r), Some(t)) = (&mut self.reserved, &self.policy.tokens) {
                    let content_type = value(&pairs, "content-type").unwrap_or_default();
                    r.usage = Some(usage::UsageReader::new(t.api, content_type));
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
        let quiet = async_mode && !matches!(answer, Answer::ImmediateResponse(_));
        self.answer(answer, quiet, step).await
    }

    /// Send `answer` (unless `quiet`: Envoy's async mode reads none) and go on with `step`;
    /// `Stop` when Envoy is gone.
    async fn answer(&self, answer: Answer, quiet: bool, step: Step) -> Step {
        if !quiet {
            self.outbox.push(Ok(ProcessingResponse {
                response: Some(answer),
                override_message_timeout: None,
            }));
        }
        step
    }

    /// The refusal of a message that comes out of order: a second request's headers (a
    /// stream is one request: it holds at most one ticket), or a part of a request before
    /// its headers.
    fn out_of_order(&self, part: &Part) -> Option<ext::ImmediateResponse> {
        let why = match part {
            Part::RequestHeaders(_) if self.started => {
                "a second request headers message on one stream (a stream is one request)"
            }
            Part::RequestHeaders(_) => return None,
            _ if !self.started => "a message before the request's headers",
            _ => return None,
        };
        Some(self.refuse(400, "OUT_OF_ORDER", why, None))
    }

    /// End the stream with `refused` (an immediate answer Envoy enforces) and, when the
    /// inbound stream failed, an error status after it, so the stream never ends OK.
    async fn stop(&self, refused: ext::ImmediateResponse, failed: Option<Status>) {
        let _ = self
            .answer(Answer::ImmediateResponse(refused), false, Step::Stop)
            .await;
        if let Some(status) = failed {
            self.outbox.push(Err(status));
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
        let Some(h) = self.held.as_mut() else { return };
        release(&*self.store, &self.metrics, &self.policy.name, h).await;
        // Only once it is done: a stream dropped meanwhile releases it again from Drop.
        self.held = None;
    }
}

async fn release<S: Store>(store: &S, metrics: &Metrics, policy: &str, h: &mut Held) {
    if !h.releasing {
        h.releasing = true;
        metrics.http.released(policy);
    }
    let report = Report {
        outcome: h.outcome,
        latency_ms: None,
    };
    if let Err(e) = store.release(&h.id, report).await {
        tracing::warn!(ticket = %h.id, "releasing a request's ticket failed; its lease frees it: {e}");
    }
}

/// The stream dropped before the request ended (Envoy reset it, its connection closed),
/// possibly in the middle of a store call: what the request holds is ended in a task of its
/// own, as the stream's end would have ended it.
impl<S: Store> Drop for Exchange<S> {
    fn drop(&mut self) {
        let (held, reserved, submitting) = (
            self.held.take(),
            self.reserved.take(),
            self.submitting.take(),
        );
        if held.is_none() && reserved.is_none() && submitting.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "a request's stream ended outside the runtime; its lease frees its ticket"
            );
            return;
        };
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        let (policy, status) = (self.policy.name.clone(), self.status);
        runtime.spawn(async move {
            if let Some(r) = reserved {
                settle(&*store, r, status, false).await;
            }
            if let Some(mut h) = held {
                release(&*store, &metrics, &policy, &mut h).await;
            } else if let Some((host_id, run_id)) = submitting
                && let Err(e) = store.release_run(&host_id, &run_id, Report::default()).await
            {
                tracing::warn!(run = %run_id, "withdrawing a request's ticket failed; its lease frees it: {e}");
            }
        });
    }
}

/// Settle what a request reserved: the usage its response reported (`complete`: to its end),
/// none billed for a refused or failed call, else unknown.
async fn settle<S: Store>(store: &S, r: Reserved, status: Option<u16>, complete: bool) {
    let used = r
        .usage
        .and_then(|u| if complete { u.finish() } else { u.so_far() });
    let usage = match (used, status) {
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
    match store.settle(&r.host_id, &r.run_id, 1, usage).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(run = %r.run_id, "settling a request failed: {e}"),
        Err(e) => tracing::warn!(
            run = %r.run_id,
            "settling a request failed (its reservation turns uncertain): {e}"
        ),
    }
}
