//! The Redis store against the in-memory one (`--redis-url`, and `--only redis`): Submit+Release
//! cycles, Authorize+Settle pairs, cycles under an operator's limits, CheckAuthAttempt against
//! Check, and the rule variants, each with the CPU a decision costs the authority and
//! redis-server and the Redis commands per RPC.

use super::*;

/// What the Redis comparison found, for its summary lines.
pub(crate) struct RedisSummary {
    /// Submit+Release cycles/s on Redis ÷ in memory.
    ratio: f64,
    /// (Redis commands, EVALSHA calls) per RPC.
    per_rpc: (f64, f64),
    /// CPU µs per cycle: (the in-memory authority, the Redis-backed authority, redis-server).
    cycle_cpu: (f64, f64, f64),
    /// Authorize+Settle: (pairs/s on Redis ÷ in memory, then CPU µs per pair as above).
    pairs: (f64, f64, f64, f64),
    auth_ratio: f64,
    auth_p99: f64,
    /// CheckAuthAttempt: CPU µs per attempt (the authority, redis-server), script calls per
    /// attempt.
    auth_cpu: (f64, f64, f64),
    w_ratio: f64,
    ad_ratio: f64,
}

/// redis-server's CPU time so far (user + system), from INFO cpu: works for a server on
/// another machine too.
pub(crate) async fn redis_cpu_secs(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "used_cpu_sys" || *k == "used_cpu_user")
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
}

/// Total commands and EVALSHA calls the Redis server has run, from INFO commandstats.
pub(crate) async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let mut all = 0;
    let mut evalsha = 0;
    for line in info.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let calls: u64 = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if name.starts_with("cmdstat_") && name != "cmdstat_info" {
            all += calls;
        }
        if name == "cmdstat_evalsha" {
            evalsha = calls;
        }
    }
    (all, evalsha)
}

/// Every Redis figure beside its in-memory counterpart: `server` (and `chans` to it) is the
/// in-memory server, the Redis-backed one is started here on `url`.
pub(crate) async fn compare(
    a: &Args,
    dir: &std::path::Path,
    server: &Server,
    chans: &[Channel],
    url: &str,
) -> RedisSummary {
    let prefix = format!("loadgen-{}:", std::process::id());
    let redis_config = dir.join("bench-redis.yaml");
    std::fs::write(
        &redis_config,
        format!(
            "{CONFIG}store:\n  redis: {{ url: \"{url}\", prefix: \"{prefix}\"{} }}\n",
            a.redis_pool
                .map(|n| format!(", pool_size: {n}"))
                .unwrap_or_default()
        ),
    )
    .unwrap();
    let on_redis = Server::start_with(&redis_config, &[]);
    let redis_chans = channels(&on_redis.addr, 2).await;
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut rounds = Vec::new();
    for _ in 0..a.rounds {
        let (_, mem) = metered(
            server,
            submit_release(chans, "free", api::SubmitMode::Queue, 64, a.seconds, "m"),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        let before = command_calls(&mut conn).await;
        let redis_before = redis_cpu_secs(&mut conn).await;
        let (_, red) = metered(
            &on_redis,
            submit_release(
                &redis_chans,
                "free",
                api::SubmitMode::Queue,
                64,
                a.seconds,
                "r",
            ),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        let redis_used = redis_cpu_secs(&mut conn).await - redis_before;
        let after = command_calls(&mut conn).await;
        let rpcs = 2.0 * red.rate * a.seconds;
        let per_rpc = (
            (after.0 - before.0) as f64 / rpcs,
            (after.1 - before.1) as f64 / rpcs,
        );
        let redis_us = redis_used * 1e6 / (red.rate * a.seconds).max(1.0);
        rounds.push((red.rate / mem.rate, (mem, red, per_rpc, redis_us)));
    }
    let (ratio, (mem, red, per_rpc, redis_us)) = median(rounds);
    row("Submit+Release cycle, in-memory store", 64, &mem);
    row("Submit+Release cycle, Redis store", 64, &red);
    let cycle_cpu = (
        mem.cpu_us.unwrap_or(0.0),
        red.cpu_us.unwrap_or(0.0),
        redis_us,
    );

    // Authorize+Settle pairs, each Redis round right after an in-memory one.
    let mut pair_rounds = Vec::new();
    for round in 0..a.rounds {
        let (_, mem) = metered(
            server,
            authorize_settle(
                chans,
                64,
                a.seconds,
                ["ma0", "ma1", "ma2", "ma3", "ma4"][round % 5],
            ),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        let redis_before = redis_cpu_secs(&mut conn).await;
        let (_, red) = metered(
            &on_redis,
            authorize_settle(
                &redis_chans,
                64,
                a.seconds,
                ["ra0", "ra1", "ra2", "ra3", "ra4"][round % 5],
            ),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        let redis_us = (redis_cpu_secs(&mut conn).await - redis_before) * 1e6
            / (red.rate * a.seconds).max(1.0);
        pair_rounds.push((red.rate / mem.rate, (mem, red, redis_us)));
    }
    let (pair_ratio, (mem_pair, red_pair, pair_redis_us)) = median(pair_rounds);
    row("Authorize+Settle pair, in-memory store", 64, &mem_pair);
    row("Authorize+Settle pair, Redis store", 64, &red_pair);
    let pairs = (
        pair_ratio,
        mem_pair.cpu_us.unwrap_or(0.0),
        red_pair.cpu_us.unwrap_or(0.0),
        pair_redis_us,
    );

    // The same cycles with the same limits put in force by an operator (SetLimits), which
    // the scripts read as the limits of record instead of the caller's own.
    let mut op = api::operator_client::OperatorClient::new(redis_chans[0].clone());
    let host = |h: &str| api::GetLimitsRequest {
        host_id: h.into(),
        ..Default::default()
    };
    let current = op.get_limits(host("free")).await.unwrap().into_inner();
    op.set_limits(api::SetLimitsRequest {
        host_id: "free".into(),
        limits: current.limits,
        expected_revision: 0,
    })
    .await
    .unwrap();
    let mut op_rounds = Vec::new();
    for _ in 0..a.rounds {
        let (_, plain) = submit_release(
            &redis_chans,
            "free",
            api::SubmitMode::Queue,
            64,
            a.seconds,
            "o",
        )
        .await;
        op_rounds.push((plain.rate / red.rate, plain));
    }
    let (op_ratio, under_op) = median(op_rounds);
    op.reset_limits(api::ResetLimitsRequest {
        host_id: "free".into(),
        expected_revision: 0,
    })
    .await
    .unwrap();
    row(
        "Submit+Release cycle, Redis store, operator's limits",
        64,
        &under_op,
    );
    println!(
        "|   under an operator's SetLimits (the same values): {op_ratio:.2} × the rate under the file's {:>38} |",
        ""
    );

    // CheckAuthAttempt on the Redis-backed server against Check on the same server.
    let secs = a.seconds;
    let mut auth_rounds = Vec::new();
    for _ in 0..a.rounds {
        let check = metered(
            &on_redis,
            health_check(&redis_chans, 64, secs),
            |f| f.rate * secs,
            |f, u| f.cpu_us = Some(u),
        )
        .await;
        let before = command_calls(&mut conn).await;
        let redis_before = redis_cpu_secs(&mut conn).await;
        let auth = metered(
            &on_redis,
            auth_attempts(&redis_chans, 64, secs),
            |f| f.rate * secs,
            |f, u| f.cpu_us = Some(u),
        )
        .await;
        let attempts = (auth.rate * secs).max(1.0);
        let redis_us = (redis_cpu_secs(&mut conn).await - redis_before) * 1e6 / attempts;
        let scripts = (command_calls(&mut conn).await.1 - before.1) as f64 / attempts;
        auth_rounds.push((auth.rate / check.rate, (check, auth, redis_us, scripts)));
    }
    let (auth_ratio, (check, auth, auth_redis_us, auth_scripts)) = median(auth_rounds);
    let auth_cpu = (auth.cpu_us.unwrap_or(0.0), auth_redis_us, auth_scripts);
    row("health.Check on the Redis-backed server", 64, &check);
    row("CheckAuthAttempt, Redis store", 64, &auth);
    let auth_p99 = auth.p99_ms / check.p99_ms.max(0.001);
    let (w_ratio, (plain, weighted)) =
        rule_cycles(&on_redis, &redis_chans, a.rounds, a.seconds, WEIGHTS, "rw").await;
    row(
        "Submit+Release cycle, Redis, no priorities or weights",
        64,
        &plain,
    );
    row(
        "Submit+Release cycle, Redis, priorities, weights, aging",
        64,
        &weighted,
    );
    let (ad_ratio, (plain, adaptive)) = rule_cycles(
        &on_redis,
        &redis_chans,
        a.rounds,
        a.seconds,
        ADAPTIVE,
        "rad",
    )
    .await;
    row("Submit+Release(OK) cycle, Redis, 50 accounts", 64, &plain);
    row("Submit+Release(OK) cycle, Redis, adaptive", 64, &adaptive);
    RedisSummary {
        ratio,
        per_rpc,
        cycle_cpu,
        pairs,
        auth_ratio,
        auth_p99,
        auth_cpu,
        w_ratio,
        ad_ratio,
    }
}

/// The summary lines of the Redis figures, each with its target.
pub(crate) fn summary(
    RedisSummary {
        ratio,
        per_rpc: (all, scripts),
        cycle_cpu: (mem_us, red_us, redis_us),
        pairs: (pair_ratio, mem_pair_us, red_pair_us, pair_redis_us),
        auth_ratio,
        auth_p99,
        auth_cpu: (auth_us, auth_redis_us, auth_scripts),
        w_ratio,
        ad_ratio,
    }: RedisSummary,
) {
    println!(
        "Redis store: cycles reporting outcomes with adaptive account caps = {ad_ratio:.2} × without ({})",
        at_least(ad_ratio, 0.95)
    );
    println!(
        "Redis store: cycles with priorities 1..5, weights and aging = {w_ratio:.2} × the cycles without ({})",
        at_least(w_ratio, 0.95)
    );
    println!(
        "Redis store: Submit+Release cycles/s at 64 = {ratio:.2} × the in-memory store's ({}); {scripts:.2} script calls per RPC (a host's concurrent Submits and Releases share one; {all:.1} Redis commands per RPC in all, the script calls included); CPU per cycle: the authority {red_us:.0} µs (in memory {mem_us:.0}), redis-server {redis_us:.0} µs",
        at_least(ratio, 0.5)
    );
    println!(
        "Redis store: Authorize+Settle pairs/s at 64 = {pair_ratio:.2} × the in-memory store's; CPU per pair: the authority {red_pair_us:.0} µs (in memory {mem_pair_us:.0}), redis-server {pair_redis_us:.0} µs"
    );
    println!(
        "Redis store: CheckAuthAttempt/s ÷ Check/s at 64 = {auth_ratio:.2} ({}), p99 {auth_p99:.2} × Check's ({}); {auth_scripts:.2} script calls per attempt; CPU per attempt: the authority {auth_us:.1} µs, redis-server {auth_redis_us:.1} µs",
        at_least(auth_ratio, 0.6),
        at_most(auth_p99, 1.5, "")
    );
}
