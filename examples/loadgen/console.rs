//! The operator console's reads under load (`--only console`); the scenario itself is
//! `shared/console_scenario.rs`.

use super::*;

/// The console's cost: see `shared/console_scenario.rs`.
pub(crate) async fn console(a: &Args, dir: &std::path::Path) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let config = dir.join("console.yaml");
    std::fs::write(
        &config,
        format!(
            "admin_listen: 127.0.0.1:{port}\n{}",
            console_scenario::CONFIG
        ),
    )
    .unwrap();
    let server = Server::start(&config);
    let chans = channels(&server.addr, 2).await;
    // 10,000 live tickets on the console's host: 1,000 admitted, 9,000 queued.
    fill(&chans, 10_000, |mut c, i| async move {
        let req = submit(
            "console-big",
            format!("s{}", i % 40),
            format!("big-{i}"),
            api::SubmitMode::Queue,
        );
        c.submit(req).await.expect("seed the console's host");
    })
    .await;
    let admin = format!("127.0.0.1:{port}");
    let mut rounds = Vec::new();
    for r in 0..a.rounds {
        let (_, closed) =
            submit_release(&chans, "free", api::SubmitMode::Queue, 64, a.seconds, "c0").await;
        let open = tokio::spawn(console_scenario::console_open(
            admin.clone(),
            "console-big",
            Duration::from_secs_f64(a.seconds),
        ));
        let (_, with) = submit_release(
            &chans,
            "free",
            api::SubmitMode::Queue,
            64,
            a.seconds,
            if r % 2 == 0 { "c1" } else { "c2" },
        )
        .await;
        let refreshes = open.await.unwrap();
        rounds.push((with.rate / closed.rate, (closed, with, refreshes)));
    }
    let (ratio, (closed, with, (n, ms, bytes))) = median(rounds);
    row("Submit+Release cycle, no console open", 64, &closed);
    row(
        "Submit+Release cycle, console open on 10,000 tickets",
        64,
        &with,
    );
    println!(
        "console open (a refresh a second: {n} refreshes, each {ms:.0} ms and {:.0} kB): cycles {ratio:.2} × without ({})",
        bytes as f64 / 1024.0,
        at_least(ratio, 0.95)
    );
}
