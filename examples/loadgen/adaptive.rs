//! Adaptive caps against a fake provider (`--only adaptive`); the scenario itself is
//! `shared/adaptive_scenario.rs`.

use super::*;

/// The adaptive-cap scenario at full size: two replicas on one redis-server, 30 runs calling a
/// fake provider that refuses beyond N calls (50 ms each); N is 10 for 40 s, 5 for 30 s, 10
/// for 30 s; then the same fleet for 20 s against a fixed cap of 10 (the baseline).
pub(crate) async fn adaptive(a: &Args, dir: &std::path::Path) {
    use adaptive_scenario::{Phase, Provider};
    let url = a
        .redis_url
        .as_deref()
        .expect("--only adaptive needs --redis-url (two replicas share one redis-server)");
    let config = dir.join("adaptive.yaml");
    std::fs::write(
        &config,
        format!(
            "scheduling:\n  total: 1000\n  per_subject: 1000\n  queue: {{ total: 1000 }}\n\
             hosts:\n  adaptive:\n    scheduling:\n      accounts:\n        provider: {{ adaptive: {{ max: 40 }} }}\n\
             \x20 static:\n    scheduling:\n      accounts: {{ provider: 10 }}\n\
             store:\n  redis: {{ url: \"{url}\", prefix: \"loadgen-adaptive-{}:\" }}\n",
            std::process::id()
        ),
    )
    .unwrap();
    let (one, two) = (Server::start(&config), Server::start(&config));
    let mut fleet = channels(&one.addr, 1).await;
    fleet.extend(channels(&two.addr, 1).await);
    let provider = Provider::start(10, 50).await;
    let phases = [
        Phase {
            limit: 10,
            seconds: 40.0,
        },
        Phase {
            limit: 5,
            seconds: 30.0,
        },
        Phase {
            limit: 10,
            seconds: 30.0,
        },
    ];
    let (samples, figures) = adaptive_scenario::run(
        &provider, &fleet, "adaptive", "provider", 30, &phases, 250, true,
    )
    .await;
    let (_, fixed) = adaptive_scenario::run(
        &provider,
        &fleet,
        "static",
        "provider",
        30,
        &[Phase {
            limit: 10,
            seconds: 20.0,
        }],
        1000,
        false,
    )
    .await;
    if let Some(path) = &a.csv {
        let mut out = String::from("seconds,cap,limit\n");
        for (t, cap, limit) in &samples {
            out.push_str(&format!("{t:.2},{cap},{limit}\n"));
        }
        std::fs::write(path, out).unwrap();
    }
    println!(
        "| {:<8} | {:>5} | {:>14} | {:>10} | {:>8} | {:>8} | {:>10} |",
        "phase", "N", "converged (s)", "cap ± 1", "mean cap", "200/s", "429 share"
    );
    let rate = |f: &adaptive_scenario::PhaseFigures| f.ok as f64 / f.counted_seconds.max(0.1);
    let share = |f: &adaptive_scenario::PhaseFigures| {
        f.limited as f64 / (f.ok + f.limited).max(1) as f64 * 100.0
    };
    for (i, f) in figures.iter().enumerate() {
        println!(
            "| {:<8} | {:>5} | {:>14} | {:>9.0}% | {:>8.2} | {:>8.0} | {:>9.2}% |",
            format!("{} ({:.0} s)", i + 1, f.seconds),
            f.limit,
            f.converged_after
                .map_or_else(|| "never".to_string(), |s| format!("{s:.1}")),
            f.within_share * 100.0,
            f.mean_cap,
            rate(f),
            share(f)
        );
    }
    let base = &fixed[0];
    println!(
        "| {:<8} | {:>5} | {:>14} | {:>10} | {:>8} | {:>8.0} | {:>9.2}% |",
        "fixed",
        10,
        "-",
        "-",
        "10",
        rate(base),
        share(base)
    );
    // Never converging counts as missing the 30 s; the 429 share must stay under 2 %.
    let slowest = figures
        .iter()
        .map(|f| f.converged_after.unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max);
    let worst_share = figures.iter().map(&share).fold(0.0, f64::max);
    let throughput = rate(&figures[0]) / rate(base).max(0.001);
    println!(
        "\nadaptive cap: converged to N ± 1 after {} s (N = 10), {} s (N halved), {} s (N doubled) ({}); 429 share after convergence {:.2} %, {:.2} %, {:.2} % ({}); 200s/s {:.2} × the fixed cap of 10 ({})",
        figures[0]
            .converged_after
            .map_or("never".into(), |s| format!("{s:.1}")),
        figures[1]
            .converged_after
            .map_or("never".into(), |s| format!("{s:.1}")),
        figures[2]
            .converged_after
            .map_or("never".into(), |s| format!("{s:.1}")),
        at_most(slowest, 30.0, " s"),
        share(&figures[0]),
        share(&figures[1]),
        share(&figures[2]),
        at_most(worst_share, 2.0, " %"),
        throughput,
        at_least(throughput, 0.9)
    );
}
