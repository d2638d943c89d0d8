//! Admitting one HTTP request: its ticket (submitted, waited for in the queue at most the
//! policy's `max_wait`), its reservation under `tokens: openai`, and the immediate answers that
//! refuse it, each counted per policy.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tonic::Streaming;

use super::replies::option;
use super::{Exchange, Held, Reserved};
use crate::api::envoy::service::ext_proc::v3::{
    HeaderMutation, ImmediateResponse, ProcessingRequest,
};
use crate::api::envoy::r#type::v3::HttpStatus;
use crate::http_admission::{self, Ask, Tokens};
use crate::ledger::{AuthorizeArgs, Decision};
use crate::scheduler::{
    DEFAULT_PRIORITY, Outcome, Refusal, Report, SubmitArgs, SubmitError, SubmitMode, TicketState,
    TicketView,
};
use crate::store::{Store, TicketId, TicketWatch};

impl<S: Store> Exchange<S> {
    /// Admit the request with `pairs` (its headers) and `body` (empty when not read): its
    /// ticket, then with `tokens: openai` its reservation (a ticket whose reservation is
    /// refused is released at once). Returns the body rewritten to a lower grant, if any;
    /// the answer that refuses the request otherwise.
    pub(super) async fn admit_with_body(
        &mut self,
        pairs: Vec<(String, String)>,
        body: Vec<u8>,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<Option<Vec<u8>>, ImmediateResponse> {
        let ask = http_admission::ask(&self.policy, &pairs, &body, TicketId::random_key() as u64)
            .map_err(|e| self.refuse(400, "BAD_REQUEST", &e.to_string(), None))?;
        let Some(Tokens {
            api,
            default_max_tokens,
        }) = self.policy.tokens.clone()
        else {
            self.admit(&ask, inbound).await?;
            return Ok(None);
        };
        // A body that cannot be reserved for is refused before it takes a slot.
        let asked = api
            .asked(&body, default_max_tokens)
            .map_err(|e| self.refuse(400, "BAD_REQUEST", &e, None))?;
        let run_id = self.admit(&ask, inbound).await?;
        // Named before it is asked for: a stream dropped while Authorize runs settles it.
        self.reserved = Some(Reserved {
            host_id: ask.host_id.clone(),
            run_id: run_id.clone(),
            usage: None,
        });
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
        let auth = self.store.authorize(&ask.host_id, args).await;
        if !matches!(&auth, Ok(Ok(a)) if a.decision == Decision::Allow) {
            self.reserved = None;
        }
        let auth = match auth {
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
            Decision::Allow => Ok((auth.granted_output_tokens < asked.output_tokens)
                .then(|| api.with_output_bound(&body, auth.granted_output_tokens))
                .flatten()),
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
        let admitted = self.submit_and_wait(ask, inbound).await;
        // Its ticket is held now (`held`), or it has none.
        self.submitting = None;
        admitted
    }

    async fn submit_and_wait(
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
            _ => return Err(self.ended(&view, "")),
        };
        self.metrics
            .http
            .admitted(&self.policy.name, asked_at.elapsed());
        let lease = view.lease_remaining_ms.max(300);
        self.held = Some(Held {
            id,
            every: Duration::from_millis(lease / 3),
            outcome: Outcome::Unspecified,
            releasing: false,
        });
        Ok(run_id)
    }

    async fn submit(
        &mut self,
        ask: &Ask,
    ) -> Result<(TicketId, TicketView, String), ImmediateResponse> {
        let mut run_id = ask.run_id.clone();
        for _ in 0..2 {
            let args = SubmitArgs {
                instance_id: self.instance_id.clone(),
                subject: ask.subject.clone(),
                account_id: ask.account_id.clone(),
                run_id: run_id.clone(),
                mode: SubmitMode::Queue,
                rss_mb: None,
                keyed: ask.keyed.clone(),
                priority: if ask.priority == 0 {
                    DEFAULT_PRIORITY
                } else {
                    ask.priority
                },
                resubmit_expired: false,
            };
            self.submitting = Some((ask.host_id.clone(), run_id.clone()));
            match self.store.submit(&ask.host_id, args).await {
                Ok(Ok((id, view))) if view.state.is_live() => return Ok((id, view, run_id)),
                // The run id (the stream's own) named another ticket (as likely as guessing
                // 64 random bits): this request is another one.
                Ok(Ok(_)) | Ok(Err(SubmitError::RunIdConflict { .. })) => {
                    run_id = format!("ext-proc-{:032x}", TicketId::random_key());
                }
                Ok(Err(SubmitError::Refused(r) | SubmitError::Learning { refusal: r, .. })) => {
                    return Err(self.refused(r));
                }
                // A busy REJECT_NEW key: refused as BUSY is, naming its holder.
                Ok(Err(SubmitError::KeyBusy { holder })) => {
                    let holder = TicketId {
                        host_id: ask.host_id.clone(),
                        key: holder,
                    };
                    return Err(self.refuse(
                        429,
                        "KEY_BUSY",
                        &format!("the request's key is held by ticket {holder}"),
                        Some(1),
                    ));
                }
                // Another policy's requests hold the key under another key policy.
                Ok(Err(SubmitError::KeyPolicyConflict { live, asked })) => {
                    return Err(self.refuse(
                        409,
                        "KEY_POLICY_CONFLICT",
                        &format!(
                            "the request's key is held under {} (this policy asks {})",
                            live.code(),
                            asked.code()
                        ),
                        None,
                    ));
                }
                Ok(Err(e @ SubmitError::Unsupported { .. })) => {
                    return Err(self.unavailable(&format!("{e:?}")));
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
        let mut refresh = tokio::time::interval(crate::service::POSITION_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            match self.store.ticket(id).await {
                Ok(Some(v)) if v.state == TicketState::Admitted => return Ok(v),
                Ok(Some(v)) if v.state == TicketState::Queued => {}
                Ok(Some(v)) => return Err(self.ended(&v, " while queued")),
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
                // Envoy gave up on the request (the client left, the request was reset), or
                // sent what it must not before the headers' answer.
                m = inbound.message() => {
                    self.withdraw(id).await;
                    return Err(match m {
                        Ok(None) => self.refuse(499, "GONE", "the client went away", None),
                        Ok(Some(_)) => self.refuse(
                            400,
                            "OUT_OF_ORDER",
                            "a message before the answer to the request's headers",
                            None,
                        ),
                        Err(status) => self.unreadable(&status),
                    });
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

    /// The answer to a request whose ticket ended before it was admitted: **409**
    /// `SUPERSEDED` when a newer request of its key took its place (`x-admission-superseded-by`
    /// names the newer ticket), else 429 `ENDED`.
    fn ended(&self, v: &TicketView, when: &str) -> ImmediateResponse {
        if v.state == TicketState::Superseded {
            let mut answer = self.refuse(
                409,
                "SUPERSEDED",
                &format!("a newer request of the same key took this one's place{when}"),
                None,
            );
            if let (Some(by), Some(h)) = (v.superseded_by, answer.headers.as_mut()) {
                let by = TicketId {
                    host_id: self.policy.host_id.clone(),
                    key: by,
                };
                h.set_headers
                    .push(option("x-admission-superseded-by", &by.to_string()));
            }
            return answer;
        }
        self.refuse(
            429,
            "ENDED",
            &format!(
                "the request's ticket ended {}{when}",
                crate::service::state_name(v.state)
            ),
            Some(1),
        )
    }

    fn refused(&self, r: Refusal) -> ImmediateResponse {
        let status = match r {
            Refusal::Draining => 503,
            _ => 429,
        };
        let retry = crate::service::status::retry_after(r).as_secs().max(1);
        self.refuse(
            status,
            r.code(),
            crate::service::status::refusal_message(r),
            Some(retry),
        )
    }

    /// The refusal of a message that could not be read: 413 when it was larger than the
    /// server's `grpc.max_message_bytes` (a request body, BUFFERED, is one message), 400 when
    /// it was not a processing request; the same when the stream broke (nobody reads it then).
    pub(super) fn unreadable(&self, status: &tonic::Status) -> ImmediateResponse {
        if status.code() == tonic::Code::OutOfRange {
            self.refuse(
                413,
                "BODY_TOO_LARGE",
                &format!(
                    "the request is larger than the admission authority takes \
                     (grpc.max_message_bytes): {}",
                    status.message()
                ),
                None,
            )
        } else {
            self.refuse(
                400,
                "BAD_MESSAGE",
                &format!(
                    "a message the admission authority cannot read: {}",
                    status.message()
                ),
                None,
            )
        }
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
    pub(super) fn refuse(
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
