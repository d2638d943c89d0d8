//! The durable data dir and the soak (`--only durable`, `--only durable-cpu`, `--soak`):
//! what syncing costs, a restart's replay, and memory and disk flat under minutes of load.

use super::*;

/// The soak's configuration: the defaults (retention 10 min, max_retained 100,000, lease 30 s)
/// but caps wide enough for 64 concurrent cycles.
const SOAK_CONFIG: &str = "scheduling: { total: 1000, per_subject: 1000 }\n";

/// The soak: Submit+Release cycles with fresh run ids from 64 tasks for `seconds`, as fast as
/// the server answers, on the embedded store in memory, on a data dir (and on Redis with
/// `--redis-url`). Prints the server's RSS (and Redis' `used_memory`) after the first minute
/// (or the first sixth of a shorter run) and at the end, and the data dir's size: its peak
/// over the first minute and over the last (sampled twice a second; the log grows between
/// snapshots and shrinks at each, so its peaks are what can grow). Memory and disk must level
/// off, not grow with uptime × rate.
pub(crate) async fn soak(a: &Args, dir: &std::path::Path, seconds: f64) {
    let first = if seconds >= 120.0 {
        60.0
    } else {
        seconds / 6.0
    };
    println!(
        "soak: {seconds} s of Submit+Release cycles at 64, fresh run ids, default retention; \
         memory after {first} s and at the end, the data dir's peak over the first and the \
         last {first} s\n"
    );
    println!(
        "| {:<10} | {:>10} | {:>12} | {:>12} | {:>9} | {:>14} | {:>14} |",
        "store", "cycles/s", "RSS first", "RSS end", "end/first", "first", "end"
    );
    println!(
        "|{:-<12}|{:->12}|{:->14}|{:->14}|{:->11}|{:->16}|{:->16}|",
        "", "", "", "", "", "", ""
    );
    let data = dir.join("soak-data");
    let _ = std::fs::remove_dir_all(&data);
    let mut stores: Vec<(&str, String, Option<String>, Option<PathBuf>)> = vec![
        ("memory", String::new(), None, None),
        ("data dir", String::new(), None, Some(data)),
    ];
    if let Some(url) = &a.redis_url {
        let prefix = format!("soak-{}:", std::process::id());
        stores.push((
            "redis",
            format!("store:\n  redis: {{ url: \"{url}\", prefix: \"{prefix}\" }}\n"),
            Some(url.clone()),
            None,
        ));
    }
    for (name, extra, url, data) in stores {
        let config = dir.join(format!("soak-{}.yaml", name.replace(' ', "-")));
        std::fs::write(&config, format!("{SOAK_CONFIG}{extra}")).unwrap();
        let server = match &data {
            Some(d) => Server::start_with(&config, &["--data-dir", d.to_str().unwrap()]),
            None => Server::start(&config),
        };
        let chans = channels(&server.addr, 2).await;
        let mut conn = match &url {
            Some(u) => Some(
                redis::Client::open(u.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
            ),
            None => None,
        };
        // The data dir's size, sampled until the soak ends.
        let samples = Arc::new(std::sync::Mutex::new(Vec::<(f64, u64)>::new()));
        let sampler = data.clone().map(|d| {
            let samples = samples.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                while t.elapsed().as_secs_f64() < seconds + 1.0 {
                    let size = dir_bytes(&d);
                    samples
                        .lock()
                        .unwrap()
                        .push((t.elapsed().as_secs_f64(), size));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        });
        let (_, f1) =
            submit_release(&chans, "soak", api::SubmitMode::Queue, 64, first, "soak-a").await;
        let (rss1, redis1) = (server.rss_mib(), used_memory_mib(conn.as_mut()).await);
        let rest = seconds - first;
        let (_, f2) =
            submit_release(&chans, "soak", api::SubmitMode::Queue, 64, rest, "soak-b").await;
        let (rss2, redis2) = (server.rss_mib(), used_memory_mib(conn.as_mut()).await);
        if let Some(s) = sampler {
            s.abort();
        }
        let rate = (f1.rate * first + f2.rate * rest) / seconds;
        let mib = |m: Option<f64>| m.map_or_else(|| "-".to_string(), |m| format!("{m:.1} MiB"));
        let peak = |from: f64, to: f64| {
            let s = samples.lock().unwrap();
            s.iter()
                .filter(|(t, _)| *t >= from && *t <= to)
                .map(|(_, b)| *b as f64 / 1048576.0)
                .reduce(f64::max)
        };
        let (disk1, disk2) = if data.is_some() {
            (peak(0.0, first), peak(seconds - first, seconds))
        } else {
            (redis1, redis2)
        };
        println!(
            "| {name:<10} | {rate:>10.0} | {:>8.1} MiB | {:>8.1} MiB | {:>9.2} | {:>14} | {:>14} |",
            rss1,
            rss2,
            rss2 / rss1,
            mib(disk1),
            mib(disk2)
        );
    }
    println!(
        "\n(first/end: Redis' used_memory for redis; the data dir's peak size over the first \
         and the last {first:.1} s for data dir)"
    );
}

/// Bytes in the files of `dir` (not below it).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The restart scenario's configuration: room for 100,000 live tickets and as many retained
/// ended ones (the default `max_retained`), leases and retention long enough to outlive it.
const RESTART_CONFIG: &str = r#"
scheduling: { total: 200000, per_subject: 200000, lease_ttl: 10m, retention: 10m }
auth:
  local_max_keys: 200000
  buckets:
    bench: { max_attempts: 1000000, window: 1h, lockout: 0s }
"#;

/// `--only durable-cpu`: what a data dir costs in server CPU, with the machine's drift taken
/// out. Each round loads the in-memory server and one data-dir server (`interval`, `os`,
/// `always` in turn) with Submit+Release cycles at 64 at the same moment, and divides the
/// in-memory server's CPU per cycle by the other's: whatever else the machine runs then slows
/// both alike. (Their rates are not compared: two servers loaded together do not saturate.)
pub(crate) async fn durable_cpu(a: &Args, dir: &std::path::Path) {
    let config = dir.join("bench.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let policies = ["interval", "os", "always"];
    let memory = Server::start(&config);
    let mc = channels(&memory.addr, 2).await;
    let mut servers = Vec::new();
    for policy in policies {
        let d = dir.join(format!("data-{policy}"));
        let server = Server::start_with(
            &sync_config(dir, policy),
            &["--data-dir", d.to_str().unwrap()],
        );
        let chans = channels(&server.addr, 2).await;
        servers.push((server, chans));
    }
    let secs = a.seconds;
    let cycles = move |(_, f): &(Figures, Figures)| f.rate * secs;
    let cpu = |(_, f): &mut (Figures, Figures), u| f.cpu_us = Some(u);
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    for r in 0..a.rounds {
        for (k, (server, chans)) in servers.iter().enumerate() {
            let tag =
                |who: &str| -> &'static str { Box::leak(format!("{who}{k}-{r}").into_boxed_str()) };
            let load =
                |chans, tag| submit_release(chans, "free", api::SubmitMode::Queue, 64, secs, tag);
            let (m, d) = tokio::join!(
                metered(&memory, load(&mc, tag("m")), cycles, cpu),
                metered(server, load(chans, tag("d")), cycles, cpu),
            );
            ratios[k].push(m.1.cpu_us.unwrap() / d.1.cpu_us.unwrap());
        }
    }
    let line: Vec<String> = policies
        .iter()
        .zip(ratios)
        .map(|(policy, v)| {
            let [mid, low, high] = spread(v);
            format!("sync: {policy} {mid:.3} (rounds {low:.3}–{high:.3})")
        })
        .collect();
    println!(
        "data dir: CPU per Submit+Release cycle at 64 in memory ÷ on a data dir, the two loaded together, the median of {} rounds: {}",
        a.rounds,
        line.join("; ")
    );
}

/// `--only durable`: the embedded store on a data dir. Submit+Release cycles at 64 on three
/// servers in alternating rounds, in memory, `sync: interval` (the default) and `sync: always`,
/// each data-dir server's rate divided by the in-memory one's of the same round (the summary
/// gives each policy's median over the rounds, and its lowest and highest round); then a server
/// holding 100,000 live tickets, 100,000 retained ended tickets and 100,000 auth keys is killed
/// (SIGKILL) and the time from starting it again to its `listening on` (the state is back
/// before that line) is measured.
pub(crate) async fn durable(a: &Args, dir: &std::path::Path) {
    let config = dir.join("bench.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let always_config = sync_config(dir, "always");
    let os_config = sync_config(dir, "os");
    let fresh = |name: &str| {
        let d = dir.join(name);
        let _ = std::fs::remove_dir_all(&d);
        d
    };
    let (d_interval, d_always, d_os) = (
        fresh("data-interval"),
        fresh("data-always"),
        fresh("data-os"),
    );
    let memory = Server::start(&config);
    let interval = Server::start_with(&config, &["--data-dir", d_interval.to_str().unwrap()]);
    let always = Server::start_with(&always_config, &["--data-dir", d_always.to_str().unwrap()]);
    let os = Server::start_with(&os_config, &["--data-dir", d_os.to_str().unwrap()]);
    let (mc, ic, ac, oc) = (
        channels(&memory.addr, 2).await,
        channels(&interval.addr, 2).await,
        channels(&always.addr, 2).await,
        channels(&os.addr, 2).await,
    );
    table_header();
    let secs = a.seconds;
    // The targets are at 64; `--concurrency N` measures another.
    let conc = a.durable_concurrency;
    let cycles = move |(_, f): &(Figures, Figures)| f.rate * secs;
    // Each round measures the four in another order, so that none always runs right after
    // another's disk traffic (the kernel writes a dir back while the next server runs).
    let servers = [(&memory, &mc), (&interval, &ic), (&always, &ac), (&os, &oc)];
    // Each round's figures: in memory, `interval`, `always`, `os`.
    let mut rounds: Vec<[Figures; 4]> = Vec::new();
    for r in 0..a.rounds {
        let mut f: Vec<Option<Figures>> = (0..4).map(|_| None).collect();
        for k in 0..4 {
            let n = (k + r) % 4;
            let (server, chans) = servers[n];
            let tag: &'static str = Box::leak(format!("d{n}-{r}").into_boxed_str());
            let (_, fig) = metered(
                server,
                submit_release(chans, "free", api::SubmitMode::Queue, conc, secs, tag),
                cycles,
                |(_, f), u| f.cpu_us = Some(u),
            )
            .await;
            f[n] = Some(fig);
        }
        rounds.push(
            <[Option<Figures>; 4]>::try_from(f)
                .ok()
                .unwrap()
                .map(Option::unwrap),
        );
    }
    let ratio = |r: &[Figures; 4], k: usize| r[k].rate / r[0].rate;
    // Each policy's own median over the rounds, and its lowest and highest round: the
    // spread of one run shows how far the machine's noise moves a round.
    let medians = [1, 2, 3].map(|k| spread(rounds.iter().map(|r| ratio(r, k)).collect()));
    let ratios = medians.map(|[mid, low, high]| format!("{mid:.2} × (rounds {low:.2}–{high:.2})"));
    let by_interval = rounds.into_iter().map(|r| (ratio(&r, 1), r)).collect();
    let (_, [m, i, al, o]) = median(by_interval);
    row("Submit+Release cycle, embedded store in memory", conc, &m);
    row(
        "Submit+Release cycle, data dir, sync: interval (10 ms)",
        conc,
        &i,
    );
    row("Submit+Release cycle, data dir, sync: always", conc, &al);
    row("Submit+Release cycle, data dir, sync: os", conc, &o);
    let sizes = (dir_bytes(&d_interval), dir_bytes(&d_always));
    drop((mc, ic, ac, oc));
    drop((memory, interval, always, os));

    // A restart with 100k live, 100k retained and 100k auth keys.
    let restart_config = dir.join("bench-restart.yaml");
    std::fs::write(&restart_config, RESTART_CONFIG).unwrap();
    let d_restart = fresh("data-restart");
    let args = ["--data-dir", d_restart.to_str().unwrap()];
    let server = Server::start_with(&restart_config, &args);
    let chans = channels(&server.addr, 2).await;
    let t = Instant::now();
    fill(&chans, 100_000, |mut c, i| async move {
        c.submit(submit(
            "restart",
            format!("s{}", i % 500),
            format!("live-{i}"),
            api::SubmitMode::Queue,
        ))
        .await
        .unwrap();
    })
    .await;
    fill(&chans, 100_000, |mut c, i| async move {
        let r = c
            .submit(submit(
                "restart",
                format!("s{}", i % 500),
                format!("ended-{i}"),
                api::SubmitMode::Queue,
            ))
            .await
            .unwrap()
            .into_inner();
        c.release(api::ReleaseRequest {
            ticket_id: r.ticket_id,
            ..Default::default()
        })
        .await
        .unwrap();
    })
    .await;
    seed_auth(&chans).await;
    let filled = t.elapsed();
    let before = dir_bytes(&d_restart);
    drop(chans);
    drop(server); // SIGKILL
    let t = Instant::now();
    let server = Server::start_with(&restart_config, &args);
    let ready = t.elapsed();
    let chans = channels(&server.addr, 1).await;
    let stats = AdmissionClient::new(chans[0].clone())
        .get_stats(api::GetStatsRequest {
            host_id: "restart".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.in_flight, 100_000, "every live ticket came back");
    println!();
    println!(
        "data dir: Submit+Release cycles/s at {conc} against in memory, the median of the rounds: sync: interval {} ({} at 64); sync: always {} ({} at 64); sync: os {}; dirs after the runs {:.1} MiB and {:.1} MiB",
        ratios[0],
        at_least(medians[0][0], 0.9),
        ratios[1],
        at_least(medians[1][0], 0.5),
        ratios[2],
        sizes.0 as f64 / 1048576.0,
        sizes.1 as f64 / 1048576.0
    );
    println!(
        "data dir: restart with 100000 live tickets, 100000 retained ended tickets and 100000 auth keys ({:.0} MiB on disk, filled in {:.1} s) ready in {:.2} s ({}), {} in flight after it",
        before as f64 / 1048576.0,
        filled.as_secs_f64(),
        ready.as_secs_f64(),
        at_most(ready.as_secs_f64(), 2.0, " s"),
        stats.in_flight
    );
}

/// Redis' `used_memory` in MiB, when measuring a Redis.
async fn used_memory_mib(conn: Option<&mut redis::aio::MultiplexedConnection>) -> Option<f64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn?)
        .await
        .ok()?;
    let bytes: f64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))?
        .trim()
        .parse()
        .ok()?;
    Some(bytes / (1024.0 * 1024.0))
}
