//! Envoy's rate limit service (`--only ratelimit`, and in the full run): ShouldRateLimit
//! against Check on the embedded store and on Redis, with what each request costs the authority
//! and redis-server, then a flood of distinct tenant values; the scenario itself (its
//! configuration, requests and flood) is `shared/ratelimit_scenario.rs`.

use super::on_redis::{command_calls, redis_cpu_secs};
use super::*;

/// ShouldRateLimit at 64 in flight with `descriptors` descriptors per request.
async fn should_rate_limit(chans: &[Channel], descriptors: usize, seconds: f64) -> Figures {
    use admission_authority::api::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let chans = chans.to_vec();
    drive(64, seconds, move |w, i| {
        let mut client = RateLimitServiceClient::new(chans[w % chans.len()].clone());
        let req = ratelimit_scenario::request(descriptors, w, i);
        async move {
            let t = Instant::now();
            let code = ratelimit_scenario::ask(&mut client, req).await;
            assert_eq!(code as i32, 1, "every answer is OK");
            let d = t.elapsed();
            (d, d)
        }
    })
    .await
    .1
}

/// What Redis spent on one ShouldRateLimit phase, per request: redis-server CPU µs and script
/// calls.
#[derive(Clone, Copy, Default)]
struct RedisCost {
    cpu_us: f64,
    scripts: f64,
}

/// `phase` with, when `redis` is given, what redis-server spent on it per request.
async fn redis_costed(
    redis: Option<&mut redis::aio::MultiplexedConnection>,
    secs: f64,
    phase: impl std::future::Future<Output = Figures>,
) -> (Figures, RedisCost) {
    let Some(conn) = redis else {
        return (phase.await, RedisCost::default());
    };
    let (calls, cpu) = (command_calls(conn).await.1, redis_cpu_secs(conn).await);
    let f = phase.await;
    let n = (f.rate * secs).max(1.0);
    let cost = RedisCost {
        cpu_us: (redis_cpu_secs(conn).await - cpu) * 1e6 / n,
        scripts: (command_calls(conn).await.1 - calls) as f64 / n,
    };
    (f, cost)
}

/// The rounds of one server, at their median ratios.
struct RateLimitRounds {
    /// ShouldRateLimit/s ÷ Check/s with one descriptor, with five.
    one_ratio: f64,
    five_ratio: f64,
    check: Figures,
    one: Figures,
    five: Figures,
    /// On Redis: what one request cost it, with one descriptor and with five.
    one_redis: RedisCost,
    five_redis: RedisCost,
}

/// Check and ShouldRateLimit (one descriptor, five) alternating on `server`, `rounds` times,
/// with what each request cost `redis` where given.
async fn rate_limit_rounds(
    server: &Server,
    chans: &[Channel],
    rounds: usize,
    secs: f64,
    mut redis: Option<redis::aio::MultiplexedConnection>,
) -> RateLimitRounds {
    let mut ones = Vec::new();
    let mut fives = Vec::new();
    for _ in 0..rounds {
        let check = metered(
            server,
            health_check(chans, 64, secs),
            |f| f.rate * secs,
            |f, u| f.cpu_us = Some(u),
        )
        .await;
        let one = metered(
            server,
            redis_costed(redis.as_mut(), secs, should_rate_limit(chans, 1, secs)),
            |(f, _)| f.rate * secs,
            |(f, _), u| f.cpu_us = Some(u),
        )
        .await;
        let five = metered(
            server,
            redis_costed(redis.as_mut(), secs, should_rate_limit(chans, 5, secs)),
            |(f, _)| f.rate * secs,
            |(f, _), u| f.cpu_us = Some(u),
        )
        .await;
        fives.push((five.0.rate / check.rate, five));
        ones.push((one.0.rate / check.rate, (check, one)));
    }
    let (one_ratio, (check, (one, one_redis))) = median(ones);
    let (five_ratio, (five, five_redis)) = median(fives);
    RateLimitRounds {
        one_ratio,
        five_ratio,
        check,
        one,
        five,
        one_redis,
        five_redis,
    }
}

/// Envoy's rate limit service: ShouldRateLimit against Check on the embedded store (and on
/// Redis with `--redis-url`), then a flood of distinct tenant values; see
/// `shared/ratelimit_scenario.rs`.
pub(crate) async fn rate_limits(a: &Args, dir: &std::path::Path) {
    let config = dir.join("ratelimit.yaml");
    std::fs::write(&config, ratelimit_scenario::CONFIG).unwrap();
    let server = Server::start(&config);
    let chans = channels(&server.addr, 2).await;
    table_header();
    let RateLimitRounds {
        one_ratio,
        five_ratio,
        check,
        one,
        five,
        ..
    } = rate_limit_rounds(&server, &chans, a.rounds, a.seconds, None).await;
    row("health.Check (baseline)", 64, &check);
    row("ShouldRateLimit, 1 descriptor, embedded store", 64, &one);
    row("ShouldRateLimit, 5 descriptors, embedded store", 64, &five);
    let mut redis_line = None;
    if let Some(url) = &a.redis_url {
        let redis_config = dir.join("ratelimit-redis.yaml");
        std::fs::write(
            &redis_config,
            format!(
                "{}store:\n  redis: {{ url: \"{url}\", prefix: \"loadgen-rl-{}:\" }}\n",
                ratelimit_scenario::CONFIG,
                std::process::id()
            ),
        )
        .unwrap();
        let on_redis = Server::start(&redis_config);
        let redis_chans = channels(&on_redis.addr, 2).await;
        let conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let r = rate_limit_rounds(&on_redis, &redis_chans, a.rounds, a.seconds, Some(conn)).await;
        row("health.Check on the Redis-backed server", 64, &r.check);
        row("ShouldRateLimit, 1 descriptor, Redis store", 64, &r.one);
        row("ShouldRateLimit, 5 descriptors, Redis store", 64, &r.five);
        redis_line = Some(r);
    }
    drop(chans);
    drop(server);

    // A flood of distinct tenant values on a fresh server: the domain's counters fill to
    // max_counters, then every new value is refused a counter and memory stays put.
    let server = Server::start(&config);
    let chans = channels(&server.addr, 2).await;
    let n = ratelimit_scenario::FLOOD_MAX_COUNTERS;
    let rss_start = server.rss_mib();
    let refused_first = ratelimit_scenario::flood(&chans, 0, n).await;
    let rss_full = server.rss_mib();
    let refused_more = ratelimit_scenario::flood(&chans, n, n).await;
    let rss_after = server.rss_mib();
    println!();
    println!(
        "embedded store: ShouldRateLimit/s ÷ Check/s at 64 = {one_ratio:.2} with 1 descriptor ({}), {five_ratio:.2} with 5 ({})",
        at_least(one_ratio, 0.8),
        at_least(five_ratio, 0.6)
    );
    if let Some(r) = redis_line {
        let cost = |f: &Figures, c: RedisCost| {
            format!(
                "{:.1} µs of the authority's CPU and {:.1} µs of redis-server's per request, {:.2} script calls",
                f.cpu_us.unwrap_or(0.0),
                c.cpu_us,
                c.scripts
            )
        };
        println!(
            "Redis store: ShouldRateLimit/s ÷ Check/s at 64 = {:.2} with 1 descriptor ({}; {}), {:.2} with 5 ({})",
            r.one_ratio,
            at_least(r.one_ratio, 0.5),
            cost(&r.one, r.one_redis),
            r.five_ratio,
            cost(&r.five, r.five_redis)
        );
    }
    println!(
        "flood of distinct tenant values (max_counters {n}): RSS {rss_start:.0} MiB before, {rss_full:.0} MiB after {n} values ({refused_first} refused), {rss_after:.0} MiB after {n} more ({refused_more} refused; {})",
        at_most(rss_after - rss_full, 5.0, " MiB of growth past the bound")
    );
}
