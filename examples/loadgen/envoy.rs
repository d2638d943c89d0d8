//! Envoy's external processing filter (`--only envoy`): requests/s and latency through a real
//! Envoy with the filter (docs/envoy.md's bootstrap, a ticket per request) against two
//! baselines: the same filter configuration in front of a processor that answers every message
//! at once and does nothing (the floor any external processor pays: Envoy's own work for the
//! stream), and the same Envoy without the filter. 64 keep-alive connections in flight, a
//! short upstream that answers at once; the rounds alternate the arms. Beside them, the
//! authority's CPU per HTTP request against its CPU per Submit+Release cycle over gRPC, both at
//! 64 in flight (the cycles saturate it) and paced to the rate the HTTP arm reached (it then
//! idles between messages as it does behind one Envoy), and against the no-op processor's own
//! CPU per HTTP request (it runs in a process of its own: this program started again with
//! `--serve-noop-processor`). Envoy is `ENVOY`, else the test command's
//! (`target/test-venv/bin/envoy`).

use std::net::TcpListener as StdListener;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex as AsyncMutex;

use super::*;
use admission_authority::api::envoy::service::ext_proc::v3 as ext;

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

/// A processor that answers every message at once and does nothing: the floor. Lean as a
/// processor can be: its answers are mapped from the messages where tonic polls them, with no
/// task or channel per stream.
struct NoOp;

#[tonic::async_trait]
impl ext::external_processor_server::ExternalProcessor for NoOp {
    type ProcessStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<ext::ProcessingResponse, tonic::Status>> + Send>,
    >;

    async fn process(
        &self,
        request: tonic::Request<tonic::Streaming<ext::ProcessingRequest>>,
    ) -> Result<tonic::Response<Self::ProcessStream>, tonic::Status> {
        use ext::processing_request::Request as Part;
        use ext::processing_response::Response as Answer;
        let answers = request.into_inner().map_while(Result::ok).filter_map(|m| {
            let answer = match m.request? {
                Part::RequestHeaders(_) => Answer::RequestHeaders(Default::default()),
                Part::ResponseHeaders(_) => Answer::ResponseHeaders(Default::default()),
                Part::RequestBody(_) => Answer::RequestBody(Default::default()),
                Part::ResponseBody(_) => Answer::ResponseBody(Default::default()),
                Part::RequestTrailers(_) => Answer::RequestTrailers(Default::default()),
                Part::ResponseTrailers(_) => Answer::ResponseTrailers(Default::default()),
            };
            Some(Ok(ext::ProcessingResponse {
                response: Some(answer),
                override_message_timeout: None,
            }))
        });
        Ok(tonic::Response::new(Box::pin(answers)))
    }
}

/// The flag that makes the load generator the no-op processor (`serve_floor`): a process of
/// its own, so that its CPU per HTTP request is measured as the authority's is.
pub const SERVE_FLOOR: &str = "--serve-noop-processor";

/// The no-op processor on a loopback port (printed as the authority prints its own), on a
/// runtime like the authority's (a worker per core), until it is killed.
pub async fn serve_floor() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    tonic::transport::Server::builder()
        .add_service(ext::external_processor_server::ExternalProcessorServer::new(NoOp))
        // Nagle's algorithm off, as the authority has it: a small answer must not wait for
        // the one before it to be acknowledged.
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .unwrap();
}

/// The no-op processor's process.
fn noop_processor() -> Server {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.arg(SERVE_FLOOR);
    Server::spawn(command)
}

fn port_of(server: &Server) -> u16 {
    server.addr.rsplit(':').next().unwrap().parse().unwrap()
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
    let authority = port_of(&server);
    let upstream = upstream();
    let noop = noop_processor();
    let (with_port, floor_port, without_port) = (free_port(), free_port(), free_port());
    let with = Envoy::start(
        dir,
        "with",
        &bootstrap(with_port, upstream, authority, true),
        with_port,
    );
    let floor = Envoy::start(
        dir,
        "floor",
        &bootstrap(floor_port, upstream, port_of(&noop), true),
        floor_port,
    );
    let without = Envoy::start(
        dir,
        "without",
        &bootstrap(without_port, upstream, authority, false),
        without_port,
    );
    // Warm every arm (connections, Envoy's first requests).
    for port in [with.port, floor.port, without.port] {
        through(port, 64, 0.5).await;
    }
    // Unloaded: what one request's trip through the filter adds.
    println!("\n## One request at a time: the authority, the no-op processor, no filter\n");
    table_header();
    let (mut alone, mut alone_floor) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let f_with = through(with.port, 1, a.seconds).await;
        let f_floor = through(floor.port, 1, a.seconds).await;
        let f_without = through(without.port, 1, a.seconds).await;
        row(&format!("round {round}: the authority"), 1, &f_with);
        row(&format!("round {round}: the no-op processor"), 1, &f_floor);
        row(&format!("round {round}: no filter"), 1, &f_without);
        alone.push(f_with.p50_ms - f_floor.p50_ms);
        alone_floor.push(f_with.p50_ms - f_without.p50_ms);
    }
    println!("\n## 64 in flight: the authority, the no-op processor, no filter\n");
    table_header();
    let (mut ratios, mut ratios_no_filter) = (Vec::new(), Vec::new());
    let (mut cpu, mut cpu_paced, mut cpu_floor) = (Vec::new(), Vec::new(), Vec::new());
    let mut floor_per_cycle = Vec::new();
    let chans = channels(&server.addr, 2).await;
    for round in 0..a.rounds {
        let before = server.cpu_secs();
        let mut f_with = through(with.port, 64, a.seconds).await;
        let n = (f_with.rate * a.seconds).max(1.0);
        f_with.cpu_us = Some((server.cpu_secs() - before) * 1e6 / n);
        let (mut f_floor, floor_cpu) = {
            let before = noop.cpu_secs();
            let f = through(floor.port, 64, a.seconds).await;
            let n = (f.rate * a.seconds).max(1.0);
            (f, (noop.cpu_secs() - before) * 1e6 / n)
        };
        f_floor.cpu_us = Some(floor_cpu);
        let f_without = through(without.port, 64, a.seconds).await;
        // The same authority's CPU per Submit+Release cycle over gRPC, at 64 in flight.
        let (_, cycles) = metered(
            &server,
            submit_release(
                &chans,
                "bench",
                api::SubmitMode::Queue,
                64,
                a.seconds,
                "cycle",
            ),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        row(
            &format!("round {round}: through the authority"),
            64,
            &f_with,
        );
        row(
            &format!("round {round}: through the no-op processor"),
            64,
            &f_floor,
        );
        row(
            &format!("round {round}: without the filter"),
            64,
            &f_without,
        );
        // The same cycles paced to the rate the HTTP arm reached: the authority then idles
        // between messages as it does behind one Envoy, and pays the same wakeups.
        let (_, paced) = metered(
            &server,
            paced_cycles(&chans, 64, a.seconds, f_with.rate),
            |(_, f)| f.rate * a.seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
        .await;
        row(
            &format!("round {round}: Submit+Release over gRPC"),
            64,
            &cycles,
        );
        row(
            &format!("round {round}: the same, at the HTTP arm's rate"),
            64,
            &paced,
        );
        ratios.push(f_with.rate / f_floor.rate);
        ratios_no_filter.push(f_with.rate / f_without.rate);
        let http = f_with.cpu_us.unwrap_or(0.0);
        cpu.push(http / cycles.cpu_us.unwrap_or(1.0).max(0.001));
        cpu_paced.push(http / paced.cpu_us.unwrap_or(1.0).max(0.001));
        cpu_floor.push(http / floor_cpu.max(0.001));
        floor_per_cycle.push(floor_cpu / cycles.cpu_us.unwrap_or(1.0).max(0.001));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "\nrequests/s through the authority ÷ through the no-op processor at 64 in flight: {:.2} ({}; {:.2} against no filter); p50 added one at a time against the no-op processor: {:.3} ms ({}; {:.3} ms against no filter); the authority's CPU per HTTP request ÷ per Submit+Release cycle: {:.2} × ({}; {:.2} × against cycles at the HTTP arm's rate; {:.2} × the no-op processor's CPU per HTTP request, which is itself {:.2} × a cycle) (medians of {} rounds)",
        median(ratios.clone()),
        at_least(median(ratios), 0.95),
        median(ratios_no_filter),
        median(alone.clone()),
        at_most(median(alone), 0.5, "ms"),
        median(alone_floor),
        median(cpu.clone()),
        at_most(median(cpu), 1.25, "×"),
        median(cpu_paced),
        median(cpu_floor),
        median(floor_per_cycle),
        a.rounds
    );
    drop((with, floor, without, noop));
}

/// Submit+Release cycles from `c` workers paced to `rate` cycles/s in all (each worker keeps
/// its own schedule; a late one does not catch up in a burst).
async fn paced_cycles(chans: &[Channel], c: usize, seconds: f64, rate: f64) -> (Figures, Figures) {
    let chans = chans.to_vec();
    let start = tokio::time::Instant::now();
    let every = Duration::from_secs_f64(c as f64 / rate.max(1.0));
    drive(c, seconds, move |w, i| {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        let due = start + every.mul_f64(i as f64 + w as f64 / c as f64);
        async move {
            tokio::time::sleep_until(due.max(tokio::time::Instant::now())).await;
            let t = Instant::now();
            let r = client
                .submit(submit(
                    "bench",
                    format!("s{}", w % 500),
                    format!("paced-{w}-{i}"),
                    api::SubmitMode::Queue,
                ))
                .await
                .expect("submit on a free host")
                .into_inner();
            let s = t.elapsed();
            client
                .release(api::ReleaseRequest {
                    ticket_id: r.ticket_id,
                    ..Default::default()
                })
                .await
                .unwrap();
            (s, t.elapsed())
        }
    })
    .await
}
