//! Envoy's external processing filter (`--only envoy`): requests/s and latency through a real
//! Envoy with the filter (docs/envoy.md's bootstrap, a ticket per request) against the same
//! Envoy bootstrap without it, 64 keep-alive connections in flight, a short upstream that
//! answers at once; the rounds alternate the arms, and the authority's CPU per request is
//! beside them. Envoy is `ENVOY`, else the test command's (`target/test-venv/bin/envoy`).

use std::net::TcpListener as StdListener;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex as AsyncMutex;

use super::*;

/// The documented bootstrap on `listen`, to `upstream` and `authority`; without the filter
/// when `filter` is false.
fn bootstrap(listen: u16, upstream: u16, authority: u16, filter: bool) -> String {
    let page =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/envoy.md"))
            .expect("docs/envoy.md");
    let fence = "```yaml envoy-ext-proc\n";
    let start = page.find(fence).expect("the filter's bootstrap") + fence.len();
    let mut yaml = page[start..start + page[start..].find("```").unwrap()].to_string();
    if !filter {
        let from = yaml
            .find("                  - name: envoy.filters.http.ext_proc")
            .unwrap();
        let to = yaml
            .find("                  - name: envoy.filters.http.router")
            .unwrap();
        yaml.replace_range(from..to, "");
    }
    yaml.replace("port_value: 10000", &format!("port_value: {listen}"))
        .replace("port_value: 8080", &format!("port_value: {upstream}"))
        .replace("port_value: 50051", &format!("port_value: {authority}"))
}

pub(crate) fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Envoy {
    child: Child,
    port: u16,
}

impl Envoy {
    fn start(dir: &std::path::Path, name: &str, yaml: &str, port: u16) -> Envoy {
        let bin = std::env::var_os("ENVOY").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/envoy"),
            PathBuf::from,
        );
        let config = dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1", "-l", "error"])
            .args(["--base-id", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} (./scripts/test installs it): {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "envoy {name} did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Envoy { child, port }
    }
}

impl Envoy {
    /// CPU seconds this Envoy has used so far (user + system), from /proc.
    fn cpu_secs(&self) -> f64 {
        cpu_secs_of(self.child.id())
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that answers every GET at once (keep-alive, a short body).
fn upstream() -> u16 {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 8192];
                let mut pending = Vec::new();
                loop {
                    let Ok(n) = stream.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
                        if stream.write_all(answer).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// One GET on a kept-alive connection (opened on first use): its latency.
async fn get(conn: &AsyncMutex<Option<TcpStream>>, port: u16, tenant: &str) -> Duration {
    let mut guard = conn.lock().await;
    if guard.is_none() {
        *guard = Some(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    let stream = guard.as_mut().unwrap();
    let t = Instant::now();
    let req = format!("GET / HTTP/1.1\r\nHost: bench\r\nx-tenant: {tenant}\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1024];
    let end = loop {
        let n = stream.read(&mut byte).await.unwrap();
        assert!(n > 0, "envoy closed the connection");
        head.extend_from_slice(&byte[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    if text.contains("transfer-encoding: chunked") {
        // Envoy re-frames a body it streamed through the filter: read to the last chunk.
        let mut body = head[end..].to_vec();
        while !(body.starts_with(b"0\r\n\r\n") || body.windows(7).any(|w| w == b"\r\n0\r\n\r\n")) {
            let n = stream.read(&mut byte).await.unwrap();
            assert!(n > 0, "envoy closed the connection");
            body.extend_from_slice(&byte[..n]);
        }
    } else {
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut have = head.len() - end;
        while have < length {
            have += stream.read(&mut byte).await.unwrap();
        }
    }
    t.elapsed()
}

/// GETs through the Envoy on `port` from `c` connections for `seconds`.
async fn through(port: u16, c: usize, seconds: f64) -> Figures {
    let conns: Arc<Vec<AsyncMutex<Option<TcpStream>>>> =
        Arc::new((0..c).map(|_| AsyncMutex::new(None)).collect());
    drive(c, seconds, move |w, _| {
        let conns = conns.clone();
        async move {
            let tenant = format!("tenant-{}", w % 8);
            let d = get(&conns[w], port, &tenant).await;
            (d, d)
        }
    })
    .await
    .1
}

/// `--only envoy`.
pub async fn envoy(a: &Args, dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("envoy-authority.yaml");
    std::fs::write(
        &config,
        "scheduling: { total: 10000, per_subject: 10000, queue: { total: 100000 } }\n\
         http_admission:\n  policies:\n    - { name: chat, host_id: bench, subject: { header: x-tenant } }\n",
    )
    .unwrap();
    let server = Server::start(&config);
    let authority: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();
    let upstream = upstream();
    let (with_port, without_port) = (free_port(), free_port());
    let with = Envoy::start(
        dir,
        "with",
        &bootstrap(with_port, upstream, authority, true),
        with_port,
    );
    let without = Envoy::start(
        dir,
        "without",
        &bootstrap(without_port, upstream, authority, false),
        without_port,
    );
    // Warm both (connections, Envoy's first requests).
    through(with.port, 64, 0.5).await;
    through(without.port, 64, 0.5).await;
    // Unloaded: what one request's trip through the filter adds.
    println!("\n## One request at a time through Envoy, with the filter and without\n");
    table_header();
    let mut alone = Vec::new();
    for round in 0..a.rounds {
        let f_with = through(with.port, 1, a.seconds).await;
        let f_without = through(without.port, 1, a.seconds).await;
        row(&format!("round {round}: with the filter"), 1, &f_with);
        row(&format!("round {round}: without it"), 1, &f_without);
        alone.push(f_with.p50_ms - f_without.p50_ms);
    }
    alone.sort_by(f64::total_cmp);
    println!("\n## Envoy with the external processing filter against without it, 64 in flight\n");
    table_header();
    let mut ratios = Vec::new();
    let mut added = Vec::new();
    let mut envoy_cpu = Vec::new();
    for round in 0..a.rounds {
        let (before, envoy_before) = (server.cpu_secs(), with.cpu_secs());
        let mut f_with = through(with.port, 64, a.seconds).await;
        let n = (f_with.rate * a.seconds).max(1.0);
        f_with.cpu_us = Some((server.cpu_secs() - before) * 1e6 / n);
        let with_envoy_us = (with.cpu_secs() - envoy_before) * 1e6 / n;
        let envoy_before = without.cpu_secs();
        let f_without = through(without.port, 64, a.seconds).await;
        let without_envoy_us =
            (without.cpu_secs() - envoy_before) * 1e6 / (f_without.rate * a.seconds).max(1.0);
        row(
            &format!("round {round}: through Envoy with the filter"),
            64,
            &f_with,
        );
        row(
            &format!("round {round}: through Envoy without it"),
            64,
            &f_without,
        );
        ratios.push(f_with.rate / f_without.rate);
        added.push(f_with.p50_ms - f_without.p50_ms);
        envoy_cpu.push((with_envoy_us, without_envoy_us));
    }
    for (i, (w, wo)) in envoy_cpu.iter().enumerate() {
        println!(
            "round {i}: Envoy's own CPU per request: {w:.0} µs with the filter, {wo:.0} µs without"
        );
    }
    ratios.sort_by(f64::total_cmp);
    added.sort_by(f64::total_cmp);
    println!(
        "\nrequests/s with the filter ÷ without it at 64 in flight: {:.2} (median of {} rounds; target ≥ 0.7); p50 added: {:.3} ms at 64 in flight, {:.3} ms one at a time (medians; target ≤ 1 ms)",
        ratios[ratios.len() / 2],
        ratios.len(),
        added[added.len() / 2],
        alone[alone.len() / 2]
    );
    drop((with, without));
}
