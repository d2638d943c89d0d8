//! Resource reservations through the real server over gRPC: Authorize and Settle, replays and
//! conflicts, a race for one account's allowance, uncertain reservations and their operator
//! resolution, and bad input.

mod common;

use std::time::Duration;

use admission_authority::api::{self, admission_client::AdmissionClient};
use common::{Server, eventually, stats};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const CONFIG: &str = "
resources:
  default: { max_tokens: 1000, max_cost_usd: 0.5, unknown_usage: reject }
  reservation_ttl: 200ms
allowances:
  shared: { tokens: 10000, window: 1h }
";

fn authorize_req(run: &str, step: u32, requested: i64, input: i64) -> api::AuthorizeRequest {
    api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: run.into(),
        step,
        subject: "alice".into(),
        account_id: String::new(),
        model: "model-a".into(),
        requested_output_tokens: requested,
        estimated_input_tokens: input,
        estimated_cost_usd: 0.0,
    }
}

fn settle_req(run: &str, step: u32, input: i64, output: i64, cost: f64) -> api::SettleRequest {
    api::SettleRequest {
        host_id: "h".into(),
        run_id: run.into(),
        step,
        usage: Some(api::Usage {
            input_tokens: input,
            output_tokens: output,
            cost_usd: cost,
            coverage: api::Coverage::Complete as i32,
        }),
    }
}

async fn authorize(
    c: &mut AdmissionClient<Channel>,
    req: api::AuthorizeRequest,
) -> api::AuthorizeResponse {
    c.authorize(req).await.expect("a decision").into_inner()
}

#[tokio::test]
async fn authorize_and_settle_round_trip_with_replays() {
    let server = Server::start_with_config("res-round-trip", CONFIG, &[]);
    let mut c = server.client().await;
    let a = authorize(&mut c, authorize_req("r1", 1, 600, 100)).await;
    assert_eq!(a.decision, api::Decision::Allow as i32);
    assert_eq!((a.granted_output_tokens, a.replay), (600, false));
    assert_eq!(a.remaining_tokens, Some(300));
    assert_eq!(a.remaining_cost_usd, Some(0.5));
    let again = authorize(&mut c, authorize_req("r1", 1, 600, 100)).await;
    assert!(again.replay);
    assert_eq!(again.granted_output_tokens, 600);

    let settled = c
        .settle(settle_req("r1", 1, 100, 500, 0.25))
        .await
        .unwrap()
        .into_inner();
    assert!(!settled.replay);
    let replay = c
        .settle(settle_req("r1", 1, 100, 500, 0.25))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replay);
    let conflict = c
        .settle(settle_req("r1", 1, 100, 501, 0.25))
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Code::FailedPrecondition);
    assert_eq!(
        conflict.message(),
        "usage: this step was already settled with other numbers"
    );
    let never = c.settle(settle_req("r1", 7, 1, 1, 0.0)).await.unwrap_err();
    assert_eq!(never.code(), Code::FailedPrecondition);

    // 600 of 1,000 tokens used: step 2 is lowered to what is left.
    let b = authorize(&mut c, authorize_req("r1", 2, 1_000, 0)).await;
    assert_eq!(b.granted_output_tokens, 400);
    c.settle(settle_req("r1", 2, 0, 400, 0.25)).await.unwrap();
    let denied = authorize(&mut c, authorize_req("r1", 3, 10, 0)).await;
    assert_eq!(denied.decision, api::Decision::Deny as i32);
    assert_eq!(denied.reason, "RESOURCE_LIMIT");
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (
            s.authorize_allowed,
            s.authorize_denied,
            s.settled,
            s.reservations_open
        ),
        (2, 1, 2, 0)
    );
}

#[tokio::test]
async fn racing_runs_never_get_more_than_the_allowance_together() {
    let server = Server::start_with_config("res-race", CONFIG, &[]);
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(server.channel().await);
    }
    // 200 runs ask for 300 tokens each at once from one 10,000-token allowance.
    let mut tasks = Vec::new();
    for i in 0..200 {
        let mut c = AdmissionClient::new(channels[i % channels.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut req = authorize_req(&format!("run-{i}"), 1, 300, 0);
            req.account_id = "shared".into();
            req.subject = format!("user-{i}");
            c.authorize(req).await.unwrap().into_inner()
        }));
    }
    let mut granted = 0;
    let mut quota_denials = 0;
    for t in tasks {
        let r = t.await.unwrap();
        granted += r.granted_output_tokens;
        if r.reason == "QUOTA_EXHAUSTED" {
            quota_denials += 1;
        }
    }
    assert_eq!(granted, 10_000, "the whole allowance and not a token more");
    assert!(quota_denials >= 166, "{quota_denials} denials");
}

#[tokio::test]
async fn an_unsettled_reservation_turns_uncertain_until_an_operator_resolves_it() {
    let server = Server::start_with_config("res-uncertain", CONFIG, &[]);
    let mut c = server.client().await;
    let mut op = server.operator().await;
    authorize(&mut c, authorize_req("stuck", 1, 400, 100)).await;
    let list_req = api::ListReservationsRequest {
        host_id: "h".into(),
        limit: 0,
    };
    let listed = eventually(
        "the reservation to turn uncertain",
        Duration::from_secs(5),
        || {
            let mut op = op.clone();
            let req = list_req.clone();
            async move {
                let r = op.list_reservations(req).await.unwrap().into_inner();
                (r.reservations.first()?.state == api::ReservationState::Uncertain as i32)
                    .then_some(r)
            }
        },
    )
    .await;
    let r = &listed.reservations[0];
    assert_eq!(
        (
            r.run_id.as_str(),
            r.step,
            r.reserved_tokens,
            r.model.as_str()
        ),
        ("stuck", 1, 500, "model-a")
    );
    assert_eq!(stats(&mut c, "h").await.reservations_uncertain, 1);
    // Still counted as spent: 500 of the run's 1,000 tokens are left.
    let next = authorize(&mut c, authorize_req("stuck", 2, 1_000, 0)).await;
    assert_eq!(next.decision, api::Decision::Deny as i32);
    assert_eq!(
        next.reason, "RESOURCE_USAGE_UNKNOWN",
        "step 1 was never settled"
    );
    let resolve = |resolution: api::Resolution| api::ResolveReservationRequest {
        host_id: "h".into(),
        run_id: "stuck".into(),
        step: 1,
        resolution: resolution as i32,
    };
    op.resolve_reservation(resolve(api::Resolution::Released))
        .await
        .unwrap();
    let again = op
        .resolve_reservation(resolve(api::Resolution::Consumed))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition);
    let s = stats(&mut c, "h").await;
    assert_eq!((s.reservations_open, s.reservations_uncertain), (0, 0));
    let step3 = authorize(&mut c, authorize_req("stuck", 3, 5_000, 0)).await;
    assert_eq!(
        step3.granted_output_tokens, 1_000,
        "the released reservation was refunded"
    );
}

#[tokio::test]
async fn bad_reservation_input_is_refused_with_the_field_named_and_changes_nothing() {
    let server = Server::start_with_config("res-bad", CONFIG, &[]);
    let mut c = server.client().await;
    let cases: Vec<(api::AuthorizeRequest, &str)> = vec![
        (
            authorize_req("r", 0, 10, 0),
            "step: must be 1..1000000 (steps are 1-based)",
        ),
        (authorize_req("", 1, 10, 0), "run_id: must not be empty"),
        (
            authorize_req("r", 1, 0, 0),
            "requested_output_tokens: must be 1..1000000000000 tokens, got 0",
        ),
        (
            authorize_req("r", 1, 10, -1),
            "estimated_input_tokens: must be 0..1000000000000 tokens, got -1",
        ),
        (
            api::AuthorizeRequest {
                estimated_cost_usd: f64::NAN,
                ..authorize_req("r", 1, 10, 0)
            },
            "estimated_cost_usd: must be a finite number of dollars, 0..1000000000, got NaN",
        ),
        (
            api::AuthorizeRequest {
                subject: String::new(),
                ..authorize_req("r", 1, 10, 0)
            },
            "subject: must not be empty",
        ),
    ];
    for (req, expected) in cases {
        let err = c.authorize(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{expected}");
        assert_eq!(err.message(), expected);
        let field = &err
            .get_details_bad_request()
            .expect("BadRequest")
            .field_violations[0]
            .field;
        assert!(
            expected.starts_with(field.as_str()),
            "{field} in {expected}"
        );
    }

    authorize(&mut c, authorize_req("r", 1, 10, 0)).await;
    let usage = |u: api::Usage| api::SettleRequest {
        usage: Some(u),
        ..settle_req("r", 1, 0, 0, 0.0)
    };
    let complete = api::Usage {
        input_tokens: 1,
        output_tokens: 1,
        cost_usd: 0.0,
        coverage: api::Coverage::Complete as i32,
    };
    let cases: Vec<(api::SettleRequest, &str)> = vec![
        (
            usage(api::Usage {
                output_tokens: -5,
                ..complete
            }),
            "usage.output_tokens: must be 0..1000000000000 tokens, got -5",
        ),
        (
            usage(api::Usage {
                cost_usd: f64::INFINITY,
                ..complete
            }),
            "usage.cost_usd: must be a finite number of dollars, 0..1000000000, got inf",
        ),
        (
            usage(api::Usage {
                cost_usd: -0.5,
                ..complete
            }),
            "usage.cost_usd: must be a finite number of dollars, 0..1000000000, got -0.5",
        ),
        (
            usage(api::Usage {
                coverage: 9,
                ..complete
            }),
            "usage.coverage: must be COVERAGE_COMPLETE (1), COVERAGE_PARTIAL (2) or \
             COVERAGE_UNKNOWN (3), got 9",
        ),
        (
            usage(api::Usage {
                coverage: 0,
                ..complete
            }),
            "usage.coverage: must be COVERAGE_COMPLETE (1), COVERAGE_PARTIAL (2) or \
             COVERAGE_UNKNOWN (3), got 0",
        ),
        (
            api::SettleRequest {
                usage: None,
                ..settle_req("r", 1, 0, 0, 0.0)
            },
            "usage: is required",
        ),
        (
            settle_req("r", 0, 1, 1, 0.0),
            "step: must be 1..1000000 (steps are 1-based)",
        ),
    ];
    for (req, expected) in cases {
        let err = c.settle(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{expected}");
        assert_eq!(err.message(), expected);
    }
    // Only the one valid Authorize counted; nothing was settled.
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.authorize_allowed, s.settled, s.reservations_open),
        (1, 0, 1)
    );
}
