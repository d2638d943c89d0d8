//! Envoy's rate limit service under load (`loadgen --only ratelimit`, and in the full run):
//! ShouldRateLimit with one descriptor and with five, against `grpc.health.v1/Check` on the
//! same server, on the embedded store and (with `--redis-url`) on Redis; and a flood of
//! 100,000 distinct tenant values, then 100,000 more past `max_counters`, with the server's
//! resident memory before and after each.

use admission_authority::api::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use admission_authority::api::envoy::service::ratelimit::v3::{
    RateLimitRequest, rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient,
};
use tonic::transport::Channel;

/// The domain measured: five descriptor keys with limits far above what a run reaches, so
/// every answer is OK and counted (a day's window: a run never crosses one in practice).
pub const CONFIG: &str = r#"
rate_limits:
  domains:
    - domain: bench
      descriptors:
        - key: tenant
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
        - key: user
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
        - key: model
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
        - key: route
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
        - key: region
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
"#;

/// Live counters the flood's domain may hold (the default).
pub const FLOOD_MAX_COUNTERS: u64 = 100_000;

const KEYS: [&str; 5] = ["tenant", "user", "model", "route", "region"];

fn descriptor(key: &str, value: String) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value,
        }],
        ..RateLimitDescriptor::default()
    }
}

/// A request with `n` descriptors (1..=5) for call `i` of worker `w`: values spread over 1,000
/// tenants (and as many users, models, routes, regions), so calls meet in counters as a
/// fleet's do.
pub fn request(n: usize, w: usize, i: u64) -> RateLimitRequest {
    let spread = ((w as u64) << 32 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15) % 1_000;
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: KEYS[..n]
            .iter()
            .map(|k| descriptor(k, format!("{k}-{spread}")))
            .collect(),
        hits_addend: 0,
        hits_subtrahend: 0,
    }
}

/// One request, answered OK (a failure stops the run: a figure of errors is no figure).
pub async fn ask(client: &mut RateLimitServiceClient<Channel>, req: RateLimitRequest) -> Code {
    client
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit answered")
        .into_inner()
        .overall_code()
}

/// One hit for each of the tenant values `from..from + n`, from 64 tasks; how many were
/// answered OVER_LIMIT (refused a counter).
pub async fn flood(chans: &[Channel], from: u64, n: u64) -> u64 {
    let mut tasks = Vec::new();
    for w in 0..64u64 {
        let mut client = RateLimitServiceClient::new(chans[w as usize % chans.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut over = 0;
            let mut i = w;
            while i < n {
                let req = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![descriptor("tenant", format!("flood-{}", from + i))],
                    hits_addend: 0,
                    hits_subtrahend: 0,
                };
                if ask(&mut client, req).await == Code::OverLimit {
                    over += 1;
                }
                i += 64;
            }
            over
        }));
    }
    let mut over = 0;
    for t in tasks {
        over += t.await.unwrap();
    }
    over
}
