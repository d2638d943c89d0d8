//! Keys (`--only keys`): Submit+Release cycles whose tickets name a key with
//! `KEY_POLICY_SERIAL_KEEP_NEWEST` against the same cycles without a key, alternating rounds on
//! one embedded-store server; then a flood of distinct keys held at once and released, with the
//! authority's memory before, during and after (and the same on Redis with `--redis-url`).

use super::*;

/// The cycles' ratio (keyed / plain, the median of `a.rounds` alternating rounds) and the
/// flood of `FLOOD` keys on each store.
pub(crate) async fn keys(a: &Args, dir: &std::path::Path) {
    let (server, chans) = embedded(dir, 2).await;
    let (ratio, (plain, keyed)) =
        rule_cycles(&server, &chans, a.rounds, a.seconds, KEYED, "k").await;
    println!(
        "embedded store: Submit+Release cycles at 64 with a key (serial, keep newest) {ratio:.2} × without ({}): {:.0} against {:.0} cycles/s, {:.1} against {:.1} µs of authority CPU per cycle",
        at_least(ratio, 0.9),
        keyed.rate,
        plain.rate,
        keyed.cpu_us.unwrap_or(0.0),
        plain.cpu_us.unwrap_or(0.0),
    );
    // Twice: what the first flood's tickets left behind (retained ended tickets, the
    // allocator's free lists) is reused by the second, which grows nothing past it.
    flood(&server, &chans, "embedded store", 1).await;
    flood(&server, &chans, "embedded store", 2).await;
    drop(server);
    if let Some(url) = a.redis_url.as_deref() {
        let config = dir.join("keys-redis.yaml");
        std::fs::write(
            &config,
            format!(
                "{CONFIG}store:\n  redis: {{ url: \"{url}\", prefix: \"loadgen-keys-{}:\" }}\n",
                std::process::id()
            ),
        )
        .unwrap();
        let server = Server::start(&config);
        let chans = channels(&server.addr, 2).await;
        flood(&server, &chans, "redis store", 1).await;
        flood(&server, &chans, "redis store", 2).await;
    }
}

/// Distinct keys in the flood.
const FLOOD: usize = 100_000;

/// `FLOOD` tickets, each with a key of its own, submitted (64 at once) and held, then
/// released: the authority's RSS before, with them held, and after.
async fn flood(server: &Server, chans: &[Channel], store: &str, round: usize) {
    let before = server.rss_mib();
    let ids = Arc::new(Mutex::new(Vec::with_capacity(FLOOD)));
    let per = FLOOD / 64;
    let mut tasks = Vec::new();
    for w in 0..64usize {
        let (mut client, ids) = (
            AdmissionClient::new(chans[w % chans.len()].clone()),
            ids.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let mut req = submit(
                    "keys-flood",
                    format!("s{}", w % 50),
                    format!("f{round}-{w}-{i}"),
                    api::SubmitMode::Queue,
                );
                req.key = format!("conversation-{round}-{w}-{i}");
                req.key_policy = api::KeyPolicy::SerialKeepNewest as i32;
                let r = client
                    .submit(req)
                    .await
                    .expect("submit a keyed ticket")
                    .into_inner();
                ids.lock().await.push(r.ticket_id);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let held = server.rss_mib();
    let ids = std::mem::take(&mut *ids.lock().await);
    let n = ids.len();
    let chunks: Vec<Vec<String>> = ids.chunks(n.div_ceil(64)).map(<[String]>::to_vec).collect();
    let mut tasks = Vec::new();
    for (w, chunk) in chunks.into_iter().enumerate() {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        tasks.push(tokio::spawn(async move {
            for ticket_id in chunk {
                client
                    .release(api::ReleaseRequest {
                        ticket_id,
                        ..Default::default()
                    })
                    .await
                    .expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let after = server.rss_mib();
    let stats = AdmissionClient::new(chans[0].clone())
        .get_stats(api::GetStatsRequest {
            host_id: "keys-flood".into(),
        })
        .await
        .unwrap()
        .into_inner();
    println!(
        "{store}, flood {round}: {n} distinct keys held at once: authority RSS {before:.0} MiB before, {held:.0} MiB with them held, {after:.0} MiB after they ended ({} in flight, {} queued left)",
        stats.in_flight, stats.queued
    );
}

/// The hosts the keyed cycles compare: `free` without a key, `keyed` (the same limits) with
/// one key per worker, `KEY_POLICY_SERIAL_KEEP_NEWEST`.
const KEYED: (&str, &str) = ("free", "keyed");
