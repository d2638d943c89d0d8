//! The external processor spoken to directly over gRPC, as a hostile or broken Envoy would
//! speak to it: a message too large or undecodable, messages out of order, request ids reused
//! by concurrent streams, and a usage no count can hold. Each ends in an answer Envoy
//! enforces (an immediate response), never a clean close of the stream (which Envoy takes as
//! "go on"), and leaves nothing held. (tests/ext_proc.rs runs the same through a real Envoy.)
#![allow(
    clippy::disallowed_types,
    reason = "it polls a real process with deadlines"
)]

mod common;

use std::time::Duration;

use admission_authority::api::envoy::config::core::v3::{HeaderMap, HeaderValue};
use admission_authority::api::envoy::service::ext_proc::v3::{
    HttpBody, HttpHeaders, ImmediateResponse, ProcessingRequest, ProcessingResponse,
    external_processor_client::ExternalProcessorClient, processing_request::Request as Part,
    processing_response::Response as Answer,
};
use common::{Raw, Server, eventually};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// Host `llm` (total 10, 3 per subject) with two policies: `plain` (the subject from
/// `x-tenant`) and `tokens` (OpenAI-shaped, the model's allowance 1,000 tokens a day).
fn authority(name: &str) -> Server {
    Server::start_with_config(
        &format!("ext-proc-streams-{name}"),
        "hosts:\n  llm:\n    scheduling: { total: 10, per_subject: 3, queue: { total: 50, per_subject: 50 } }\n\
         allowances:\n  gpt-x: { tokens: 1000, window: 24h }\n\
         http_admission:\n  policies:\n\
         \x20   - { name: plain, host_id: llm, subject: { header: x-tenant }, max_wait: 20s }\n\
         \x20   - { name: tokens, host_id: llm, subject: { header: x-tenant }, account: { body: model }, tokens: openai }\n",
        &[],
    )
}

fn headers(pairs: &[(&str, &str)], end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        async_mode: false,
        request: Some(Part::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: pairs
                    .iter()
                    .map(|(k, v)| HeaderValue {
                        key: (*k).into(),
                        value: String::new(),
                        raw_value: v.as_bytes().to_vec(),
                    })
                    .collect(),
            }),
            end_of_stream,
        })),
    }
}

fn body(bytes: &[u8]) -> ProcessingRequest {
    ProcessingRequest {
        async_mode: false,
        request: Some(Part::RequestBody(HttpBody {
            body: bytes.to_vec(),
            end_of_stream: true,
        })),
    }
}

fn response_headers(content_type: &str) -> ProcessingRequest {
    let Some(Part::RequestHeaders(h)) =
        headers(&[(":status", "200"), ("content-type", content_type)], false).request
    else {
        unreachable!()
    };
    ProcessingRequest {
        async_mode: false,
        request: Some(Part::ResponseHeaders(h)),
    }
}

fn response_body(bytes: &[u8]) -> ProcessingRequest {
    ProcessingRequest {
        async_mode: false,
        request: Some(Part::ResponseBody(HttpBody {
            body: bytes.to_vec(),
            end_of_stream: true,
        })),
    }
}

/// A stream under `policy`: what to send on, and the answers.
async fn open(
    server: &Server,
    policy: &str,
) -> (
    mpsc::Sender<ProcessingRequest>,
    Streaming<ProcessingResponse>,
) {
    let (tx, rx) = mpsc::channel(8);
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("x-admission-policy", policy.parse().unwrap());
    let answers = ExternalProcessorClient::new(server.channel().await)
        .process(req)
        .await
        .expect("the stream opens")
        .into_inner();
    (tx, answers)
}

/// The next answer, within 10 s.
async fn next(answers: &mut Streaming<ProcessingResponse>) -> Answer {
    tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("answered")
        .expect("an answer, not an error status")
        .expect("an answer, not a clean close")
        .response
        .expect("a response")
}

/// Send alice's request headers (`end`: without a body) and see them answered, admitted.
async fn headers_answered(
    tx: &mpsc::Sender<ProcessingRequest>,
    answers: &mut Streaming<ProcessingResponse>,
    end: bool,
) {
    tx.send(headers(&[("x-tenant", "alice")], end))
        .await
        .unwrap();
    let a = next(answers).await;
    assert!(matches!(a, Answer::RequestHeaders(_)), "{a:?}");
}

/// The immediate response an answer is, with its status and `x-admission-refused`.
fn refusal(answer: Answer) -> (i32, String, ImmediateResponse) {
    let Answer::ImmediateResponse(r) = answer else {
        panic!("an immediate response, got {answer:?}");
    };
    let reason = r
        .headers
        .as_ref()
        .and_then(|h| {
            h.set_headers
                .iter()
                .filter_map(|o| o.header.as_ref())
                .find(|h| h.key == "x-admission-refused")
        })
        .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
        .unwrap_or_default();
    (r.status.as_ref().map_or(0, |s| s.code), reason, r)
}

async fn stats(server: &Server) -> admission_authority::api::Stats {
    common::stats(&mut server.client().await, "llm").await
}

async fn open_reservations(server: &Server) -> usize {
    server
        .operator()
        .await
        .list_reservations(admission_authority::api::ListReservationsRequest {
            host_id: "llm".into(),
            ..Default::default()
        })
        .await
        .expect("reservations")
        .into_inner()
        .reservations
        .len()
}

const CHAT: &str =
    r#"{"model":"gpt-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;

/// A request body larger than the server's message limit (256 KiB by default) after headers
/// that were answered: 413, nothing admitted or reserved. Before, the stream ended OK with no
/// answer, and Envoy sent the 300 KB request on, unadmitted.
#[tokio::test]
async fn a_body_past_the_message_limit_is_refused_413_and_admits_nothing() {
    let server = authority("too-large");
    let (tx, mut answers) = open(&server, "tokens").await;
    headers_answered(&tx, &mut answers, false).await;
    let prompt = "a".repeat(300 * 1024);
    let big = format!(
        r#"{{"model":"gpt-x","max_tokens":10,"messages":[{{"role":"user","content":"{prompt}"}}]}}"#
    );
    tx.send(body(big.as_bytes())).await.unwrap();
    let (status, reason, r) = refusal(next(&mut answers).await);
    assert_eq!((status, reason.as_str()), (413, "BODY_TOO_LARGE"), "{r:?}");
    assert!(r.body.contains("grpc.max_message_bytes"), "{}", r.body);
    let s = stats(&server).await;
    assert_eq!((s.in_flight, s.queued, s.admitted), (0, 0, 0));
    assert_eq!(open_reservations(&server).await, 0);
}

/// Bytes that are not a processing request, as the first message: 400, and the stream does
/// not end OK; a message with no part: 400 too.
#[tokio::test]
async fn an_undecodable_or_empty_message_is_refused_400() {
    let server = authority("garbage");
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.unwrap();
    let mut req = tonic::Request::new(tokio_stream::iter(vec![vec![0xff, 0xff, 0xff, 0xff]]));
    req.metadata_mut()
        .insert("x-admission-policy", "plain".parse().unwrap());
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
    );
    let mut answers = grpc
        .streaming(req, path, Raw)
        .await
        .expect("the stream opens")
        .into_inner();
    let first = answers
        .message()
        .await
        .expect("an answer before any status")
        .expect("an answer, not a clean close");
    let answer = ProcessingResponse::decode(first.as_slice())
        .unwrap()
        .response
        .unwrap();
    let (status, reason, _) = refusal(answer);
    assert_eq!((status, reason.as_str()), (400, "BAD_MESSAGE"));
    assert!(
        answers.message().await.is_err(),
        "the stream ends with an error status, not OK"
    );

    let (tx, mut answers) = open(&server, "plain").await;
    tx.send(ProcessingRequest::default()).await.unwrap();
    let (status, reason, _) = refusal(next(&mut answers).await);
    assert_eq!((status, reason.as_str()), (400, "BAD_MESSAGE"));
    assert_eq!(stats(&server).await.admitted, 0);
}

/// A second request's headers on a stream that holds a ticket: refused 400, and the first
/// ticket (and its reservation) released, not leaked. A body before any headers: 400.
#[tokio::test]
async fn messages_out_of_order_are_refused_and_what_the_stream_held_is_released() {
    let server = authority("order");
    let (tx, mut answers) = open(&server, "plain").await;
    headers_answered(&tx, &mut answers, true).await;
    assert_eq!(stats(&server).await.in_flight, 1);
    tx.send(headers(&[("x-tenant", "bob")], true))
        .await
        .unwrap();
    let (status, reason, _) = refusal(next(&mut answers).await);
    assert_eq!((status, reason.as_str()), (400, "OUT_OF_ORDER"));
    eventually(
        "the first ticket released",
        Duration::from_secs(5),
        || async {
            let s = stats(&server).await;
            (s.in_flight == 0 && s.admitted == 1).then_some(())
        },
    )
    .await;

    // With a reservation: released and settled.
    let (tx, mut answers) = open(&server, "tokens").await;
    headers_answered(&tx, &mut answers, false).await;
    tx.send(body(CHAT.as_bytes())).await.unwrap();
    assert!(matches!(next(&mut answers).await, Answer::RequestBody(_)));
    tx.send(headers(&[("x-tenant", "alice")], false))
        .await
        .unwrap();
    let (status, _, _) = refusal(next(&mut answers).await);
    assert_eq!(status, 400);
    eventually(
        "the ticket and the reservation released",
        Duration::from_secs(5),
        || async {
            (stats(&server).await.in_flight == 0 && open_reservations(&server).await == 0)
                .then_some(())
        },
    )
    .await;

    let (tx, mut answers) = open(&server, "plain").await;
    tx.send(body(b"{}")).await.unwrap();
    let (status, reason, _) = refusal(next(&mut answers).await);
    assert_eq!((status, reason.as_str()), (400, "OUT_OF_ORDER"));
}

/// Eight concurrent streams with one subject and one `x-request-id` (3 per subject): three are
/// admitted and five wait. Before, all eight were admitted on one ticket.
#[tokio::test]
async fn streams_that_reuse_a_request_id_are_each_their_own_ticket() {
    let server = authority("request-id");
    let mut streams = Vec::new();
    for _ in 0..8 {
        let (tx, answers) = open(&server, "plain").await;
        tx.send(headers(
            &[("x-tenant", "alice"), ("x-request-id", "same-id")],
            true,
        ))
        .await
        .unwrap();
        streams.push((tx, answers));
    }
    let mut admitted = 0;
    for (_, answers) in &mut streams {
        if let Ok(a) = tokio::time::timeout(Duration::from_millis(500), next(answers)).await {
            assert!(matches!(a, Answer::RequestHeaders(_)), "{a:?}");
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "the subject's cap holds");
    let s = stats(&server).await;
    assert_eq!((s.in_flight, s.queued), (3, 5));
    // Operators find each by the request id.
    let tickets = server
        .operator()
        .await
        .list_tickets(admission_authority::api::ListTicketsRequest {
            host_id: "llm".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets;
    assert_eq!(tickets.len(), 8);
    assert!(
        tickets.iter().all(|t| t.run_id.starts_with("same-id.")),
        "{tickets:?}"
    );
}

/// A response whose usage claims 2^64 − 1 prompt tokens: the allowance's count saturates
/// instead of wrapping, so the next request is refused (before, it wrapped and was admitted).
#[tokio::test]
async fn a_usage_past_any_count_saturates_the_allowance() {
    let server = authority("usage");
    let reserve = || async {
        let (tx, mut answers) = open(&server, "tokens").await;
        headers_answered(&tx, &mut answers, false).await;
        tx.send(body(CHAT.as_bytes())).await.unwrap();
        let a = next(&mut answers).await;
        (tx, answers, a)
    };
    let (tx1, mut a1, first) = reserve().await;
    assert!(matches!(first, Answer::RequestBody(_)), "{first:?}");
    let (tx2, mut a2, second) = reserve().await;
    assert!(matches!(second, Answer::RequestBody(_)), "{second:?}");
    tx1.send(response_headers("application/json"))
        .await
        .unwrap();
    assert!(matches!(next(&mut a1).await, Answer::ResponseHeaders(_)));
    tx1.send(response_body(
        br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#,
    ))
    .await
    .unwrap();
    assert!(matches!(next(&mut a1).await, Answer::ResponseBody(_)));
    tx2.send(response_headers("application/json"))
        .await
        .unwrap();
    assert!(matches!(next(&mut a2).await, Answer::ResponseHeaders(_)));
    tx2.send(response_body(
        br#"{"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
    ))
    .await
    .unwrap();
    assert!(matches!(next(&mut a2).await, Answer::ResponseBody(_)));
    eventually("both settled", Duration::from_secs(5), || async {
        (open_reservations(&server).await == 0).then_some(())
    })
    .await;
    let (_tx3, _a3, third) = reserve().await;
    let (status, reason, _) = refusal(third);
    assert_eq!((status, reason.as_str()), (429, "QUOTA_EXHAUSTED"));
}

/// A seeded walk over what a broken Envoy could send: each stream a random sequence of parts
/// (request headers with and without a subject, JSON and garbage bodies, trailers, response
/// parts with and without usage, empty messages), in any order, cut at a random point. Every
/// message is answered, or the stream ends with an immediate response: never a clean close
/// while a message waits for its answer. Afterwards nothing is held and nothing reserved.
#[tokio::test]
async fn random_streams_are_answered_or_refused_and_leave_nothing_held() {
    let server = authority("fuzz");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next_u = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut refused = 0;
    for round in 0..300 {
        let policy = if next_u(2) == 0 { "plain" } else { "tokens" };
        let (tx, mut answers) = open(&server, policy).await;
        let len = 1 + next_u(6);
        for _ in 0..len {
            let part = match next_u(9) {
                0 | 1 => headers(
                    &[("x-tenant", "alice"), ("x-request-id", "r")],
                    next_u(2) == 0,
                ),
                2 => headers(&[("x-other", "1")], true),
                3 => body(CHAT.as_bytes()),
                4 => body(b"\xff{not json"),
                5 => response_headers(if next_u(2) == 0 {
                    "application/json"
                } else {
                    "text/event-stream"
                }),
                6 => response_body(br#"{"usage":{"prompt_tokens":3,"completion_tokens":4}}"#),
                7 => ProcessingRequest::default(),
                _ => ProcessingRequest {
                    async_mode: false,
                    request: Some(Part::RequestTrailers(Default::default())),
                },
            };
            tx.send(part).await.unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(10), answers.message())
                .await
                .expect("answered");
            match answer {
                Ok(Some(ProcessingResponse {
                    response: Some(Answer::ImmediateResponse(_)),
                    ..
                })) => {
                    refused += 1;
                    break;
                }
                Ok(Some(ProcessingResponse {
                    response: Some(_), ..
                })) => {}
                other => panic!("round {round}: a message left unanswered: {other:?}"),
            }
        }
        // Cut here: the stream ends as Envoy's would.
    }
    assert!(refused > 50, "the walk reaches the refusals ({refused})");
    eventually(
        "nothing held or reserved",
        Duration::from_secs(10),
        || async {
            let s = stats(&server).await;
            (s.in_flight == 0 && s.queued == 0 && open_reservations(&server).await == 0)
                .then_some(())
        },
    )
    .await;
}

/// Streams Envoy drops (the client left, its connection closed) while their request waits in
/// the queue, runs, or holds a reservation: each is withdrawn, released or settled at once,
/// not a lease later. The exchange runs inside the response stream, so a dropped stream stops
/// it in the middle of whatever it awaited; what it held is ended behind it.
#[tokio::test]
async fn streams_dropped_while_queued_running_or_reserved_free_what_they_held() {
    let server = authority("dropped");
    let mut running = Vec::new();
    for _ in 0..3 {
        let (tx, mut answers) = open(&server, "plain").await;
        headers_answered(&tx, &mut answers, true).await;
        running.push((tx, answers));
    }
    // alice's fourth waits (3 per subject), then its stream is dropped.
    let (tx, answers) = open(&server, "plain").await;
    tx.send(headers(&[("x-tenant", "alice")], true))
        .await
        .unwrap();
    eventually("the fourth queued", Duration::from_secs(5), || async {
        (stats(&server).await.queued == 1).then_some(())
    })
    .await;
    drop((tx, answers));
    eventually(
        "the queued one withdrawn",
        Duration::from_secs(5),
        || async {
            let s = stats(&server).await;
            (s.queued == 0 && s.in_flight == 3).then_some(())
        },
    )
    .await;

    // A running one dropped: its slot frees.
    drop(running.pop());
    eventually(
        "the running one released",
        Duration::from_secs(5),
        || async { (stats(&server).await.in_flight == 2).then_some(()) },
    )
    .await;

    // A reserved one dropped: released, and its reservation settled.
    let (tx, mut answers) = open(&server, "tokens").await;
    tx.send(headers(&[("x-tenant", "bob")], false))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut answers).await,
        Answer::RequestHeaders(_)
    ));
    tx.send(body(CHAT.as_bytes())).await.unwrap();
    assert!(matches!(next(&mut answers).await, Answer::RequestBody(_)));
    assert_eq!(open_reservations(&server).await, 1);
    drop((tx, answers));
    eventually(
        "the reserved one released and settled",
        Duration::from_secs(5),
        || async {
            (stats(&server).await.in_flight == 2 && open_reservations(&server).await == 0)
                .then_some(())
        },
    )
    .await;
}
