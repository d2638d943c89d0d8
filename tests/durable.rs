//! The embedded store on a data dir, against the real binary: the authority is SIGKILLed (as an
//! OOM kill or a lost node would) in the middle of a write load and started again on the same
//! dir; every answer it gave before must still hold. Then the dir's bad days: a torn last
//! record, damage in the middle, a second process, a newer format, a full disk (a small tmpfs,
//! mounted as root).

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use admission_authority::api::{self, admission_client::AdmissionClient};
use common::{Server, eventually, http_get, state_of, stats, submit_req};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// A fresh dir under cargo's test temp dir.
fn data_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("durable-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn on(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--data-dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// `serve` on `dir` that is expected not to start: its exit code and stderr.
fn refused(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run the binary");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening on"),
        "it started"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn renew_states(c: &mut AdmissionClient<Channel>, ids: &[String]) -> Vec<api::TicketState> {
    let mut out = Vec::new();
    for chunk in ids.chunks(500) {
        let r = c
            .renew(api::RenewRequest {
                ticket_ids: chunk.to_vec(),
                rss_mb: None,
            })
            .await
            .expect("renew")
            .into_inner();
        out.extend(r.tickets.iter().map(|t| state_of(t.state)));
    }
    out
}

/// What the workers were told before the kill.
#[derive(Default)]
struct Acked {
    /// Submits answered OK: ticket id → grant (0 while queued).
    submitted: HashMap<String, u64>,
    /// Releases answered OK.
    released: HashSet<String>,
}

fn random_below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    u64::from_le_bytes(b) % n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_authority_keeps_every_answer_it_gave() {
    for sync in ["always", "interval", "os"] {
        let dir = data_dir(&format!("kill-{sync}"));
        let flags = [
            "--total",
            "8",
            "--per-subject",
            "8",
            "--queue-total",
            "64",
            "--lease-ttl",
            "10s",
        ];
        let config = common::config_file(
            &format!("durable-kill-{sync}"),
            &format!("store: {{embedded: {{sync: {sync}}}}}\n"),
        );
        let mut args = vec!["--config", config.to_str().unwrap()];
        args.extend_from_slice(&flags);
        let server = on(&dir, &args);
        let mut c = server.client().await;
        // Four holders take half the slots and keep them through the restart.
        let mut holders = Vec::new();
        for i in 0..4 {
            let r = c
                .submit(submit_req(
                    "h",
                    &format!("holder-{i}"),
                    &format!("hold-{i}"),
                ))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(state_of(r.state), api::TicketState::Admitted);
            holders.push((r.ticket_id, r.grant));
        }

        // 16 workers: two Submits of one key (each worker its own key policy, half of them
        // debounced keep-newest), then both Released (free, withdraw when queued, nothing
        // when superseded), as fast as they can.
        let acked = Arc::new(Mutex::new(Acked::default()));
        let mut workers = Vec::new();
        for w in 0..16 {
            let (mut c, acked) = (server.client().await, acked.clone());
            workers.push(tokio::spawn(async move {
                for n in 0..100_000 {
                    let mut made = Vec::new();
                    for second in [false, true] {
                        let mut req = submit_req(
                            "h",
                            &format!("worker-{}", w % 4),
                            &format!("w{w}-{n}-{second}"),
                        );
                        req.key = format!("w{w}-conv-{}", n % 3);
                        req.key_policy = w % 5;
                        if req.key_policy == api::KeyPolicy::KeepNewest as i32 && w >= 8 {
                            req.debounce = Some(prost_types::Duration {
                                seconds: 0,
                                nanos: 20_000_000,
                            });
                        }
                        match c.submit(req).await {
                            Ok(r) => {
                                let r = r.into_inner();
                                acked
                                    .lock()
                                    .unwrap()
                                    .submitted
                                    .insert(r.ticket_id.clone(), r.grant);
                                made.push(r.ticket_id);
                            }
                            // The reject-new key's second Submit.
                            Err(e) if e.code() == tonic::Code::ResourceExhausted => {}
                            Err(_) => return,
                        }
                    }
                    for id in made {
                        let release = api::ReleaseRequest {
                            ticket_id: id.clone(),
                            ..Default::default()
                        };
                        if c.release(release).await.is_err() {
                            return;
                        }
                        acked.lock().unwrap().released.insert(id);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(300 + random_below(700))).await;
        let pid = server.pid();
        drop(server); // SIGKILL, then reaped
        for w in workers {
            w.await.unwrap();
        }
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(
            acked.released.len() > 50,
            "{sync}: the load ran ({} releases)",
            acked.released.len()
        );

        let server = on(&dir, &flags);
        assert_ne!(server.pid(), pid);
        let mut c = server.client().await;
        // Every acknowledged Submit is there, every acknowledged Release stands.
        let ids: Vec<String> = acked.submitted.keys().cloned().collect();
        let states = renew_states(&mut c, &ids).await;
        for (id, state) in ids.iter().zip(states) {
            if acked.released.contains(id) {
                assert!(
                    matches!(
                        state,
                        api::TicketState::Released
                            | api::TicketState::Cancelled
                            | api::TicketState::Superseded
                    ),
                    "{sync}: {id} was released, and is {state:?}"
                );
            } else {
                // Its Release may have been applied with its answer lost to the kill; the
                // ticket must be known all the same (an unknown one renews as EXPIRED).
                assert_ne!(
                    state,
                    api::TicketState::Expired,
                    "{sync}: {id} was submitted and is unknown"
                );
            }
        }
        // The holders renew through the restart and keep their slots; no cap is exceeded.
        let hold_ids: Vec<String> = holders.iter().map(|h| h.0.clone()).collect();
        let states = renew_states(&mut c, &hold_ids).await;
        assert_eq!(states, vec![api::TicketState::Admitted; 4], "{sync}");
        let s = stats(&mut c, "h").await;
        assert!(s.in_flight <= 8 && s.in_flight >= 4, "{sync}: {s:?}");

        // No grant was handed out twice, and grants go on increasing.
        let mut grants: Vec<u64> = acked
            .submitted
            .values()
            .chain(holders.iter().map(|h| &h.1))
            .copied()
            .filter(|g| *g > 0)
            .collect();
        let n = grants.len();
        grants.sort_unstable();
        grants.dedup();
        assert_eq!(grants.len(), n, "{sync}: a grant was handed out twice");
        let mut op = server.operator().await;
        let live = op
            .list_tickets(api::ListTicketsRequest {
                host_id: "h".into(),
                limit: 1000,
            })
            .await
            .unwrap()
            .into_inner()
            .tickets;
        let mut live_grants: Vec<u64> = live.iter().map(|t| t.grant).filter(|g| *g > 0).collect();
        let n = live_grants.len();
        live_grants.sort_unstable();
        live_grants.dedup();
        assert_eq!(
            live_grants.len(),
            n,
            "{sync}: two live tickets share a grant"
        );
        // Free every slot, then a newcomer's grant is above every grant before the kill.
        for t in &live {
            common::release(&mut c, &t.ticket_id).await;
        }
        let fresh = c
            .submit(submit_req("h", "late", "after-restart"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(state_of(fresh.state), api::TicketState::Admitted, "{sync}");
        assert!(
            fresh.grant > *grants.last().unwrap(),
            "{sync}: grants went back"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

const LEDGER_AND_AUTH: &str = "
resources:
  reservation_ttl: 1h
allowances:
  acct: { tokens: 1000, window: 24h }
auth:
  buckets:
    login: { max_attempts: 2, window: 60s, lockout: 300s }
";

#[tokio::test]
async fn allowances_lockouts_reservations_and_operator_limits_survive_a_restart() {
    let dir = data_dir("state");
    let config = common::config_file("durable-state", LEDGER_AND_AUTH);
    let args = ["--config", config.to_str().unwrap()];
    let server = on(&dir, &args);
    let mut c = server.client().await;
    let step = |run: &str, tokens: i64| api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: run.into(),
        step: 1,
        subject: "alice".into(),
        account_id: "acct".into(),
        model: "m".into(),
        requested_output_tokens: tokens,
        estimated_input_tokens: 0,
        estimated_cost_usd: 0.0,
    };
    // The allowance is spent by one run (settled) and one open reservation.
    let a = c.authorize(step("spent", 600)).await.unwrap().into_inner();
    assert_eq!(a.granted_output_tokens, 600);
    c.settle(api::SettleRequest {
        host_id: "h".into(),
        run_id: "spent".into(),
        step: 1,
        usage: Some(api::Usage {
            input_tokens: 0,
            output_tokens: 600,
            cost_usd: 0.0,
            coverage: api::Coverage::Complete as i32,
        }),
    })
    .await
    .unwrap();
    let open = c.authorize(step("open", 400)).await.unwrap().into_inner();
    assert_eq!(open.granted_output_tokens, 400);
    // A brute-forcer is locked out.
    let attempt = || api::AuthAttemptRequest {
        endpoint: "login".into(),
        identity: "ip:203.0.113.9".into(),
        ..Default::default()
    };
    for _ in 0..3 {
        c.check_auth_attempt(attempt()).await.unwrap();
    }
    // An operator's limits.
    let mut op = server.operator().await;
    let get = || api::GetLimitsRequest {
        host_id: "h".into(),
        ..Default::default()
    };
    let before = op.get_limits(get()).await.unwrap().into_inner();
    let mut limits = before.limits.clone().unwrap();
    limits.total = 5;
    let set = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits),
            expected_revision: before.revision,
        })
        .await
        .unwrap()
        .into_inner();
    drop(server); // SIGKILL

    let server = on(&dir, &args);
    let mut c = server.client().await;
    let denied = c.authorize(step("third", 10)).await.unwrap().into_inner();
    assert_eq!(
        (denied.decision(), denied.reason.as_str()),
        (api::Decision::Deny, "QUOTA_EXHAUSTED"),
        "the spent allowance stays spent"
    );
    let locked = c.check_auth_attempt(attempt()).await.unwrap().into_inner();
    assert!(
        !locked.allowed && locked.locked,
        "the lockout holds: {locked:?}"
    );
    let mut op = server.operator().await;
    let reservations = op
        .list_reservations(api::ListReservationsRequest {
            host_id: "h".into(),
            limit: 10,
        })
        .await
        .unwrap()
        .into_inner()
        .reservations;
    assert_eq!(
        reservations
            .iter()
            .map(|r| r.run_id.as_str())
            .collect::<Vec<_>>(),
        ["open"],
        "the open reservation is still open"
    );
    let after = op.get_limits(get()).await.unwrap().into_inner();
    assert_eq!(
        (after.source(), after.revision, after.limits.unwrap().total),
        (api::LimitsSource::Operator, set.revision, 5)
    );
    assert_eq!(stats(&mut c, "h").await.total, 5);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The dir's newest log segment.
fn last_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "aal"))
        .collect();
    logs.sort();
    logs.pop().expect("a log segment")
}

/// A dir holding three admitted tickets of host "h", written by a process that was killed.
async fn dir_with_tickets(name: &str) -> (PathBuf, Vec<String>) {
    let dir = data_dir(name);
    let server = on(&dir, &[]);
    let mut c = server.client().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = c
            .submit(submit_req("h", "alice", &format!("r{i}")))
            .await
            .unwrap();
        ids.push(r.into_inner().ticket_id);
    }
    drop(server);
    (dir, ids)
}

#[tokio::test]
async fn a_torn_last_record_is_dropped_and_logged() {
    let (dir, ids) = dir_with_tickets("torn").await;
    let log = last_segment(&dir);
    let good = std::fs::metadata(&log).unwrap().len();
    // Half a record: a header announcing 200 bytes, and 20 of them.
    let mut torn = 200u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[7; 24]);
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
        &torn,
    )
    .unwrap();
    let mut server = Server::spawn(
        &["--data-dir", dir.to_str().unwrap()],
        "warn",
        Stdio::piped(),
    );
    let mut c = server.client().await;
    assert_eq!(
        renew_states(&mut c, &ids).await,
        vec![api::TicketState::Admitted; 3]
    );
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        good,
        "the torn record is cut off"
    );
    let stderr = server.take_stderr();
    drop(server);
    let text = stderr_text(stderr);
    assert!(text.contains("dropping a torn last record"), "{text}");
    assert!(
        text.contains(log.file_name().unwrap().to_str().unwrap()),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_damaged_record_before_the_end_refuses_to_start_naming_the_file() {
    let (dir, _) = dir_with_tickets("damaged").await;
    let log = last_segment(&dir);
    let mut bytes = std::fs::read(&log).unwrap();
    // The first record's payload (past the 8-byte magic and its 8-byte header).
    bytes[20] ^= 0x55;
    std::fs::write(&log, &bytes).unwrap();
    let (code, stderr) = refused(&dir);
    assert_ne!(code, Some(0));
    assert!(stderr.contains(log.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("damaged at byte 8"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_missing_log_segment_refuses_to_start_naming_it() {
    let (dir, _) = dir_with_tickets("gap").await;
    // Two more processes, each with a segment of its own holding a Submit.
    for run in ["second", "third"] {
        let server = on(&dir, &[]);
        let mut c = server.client().await;
        c.submit(submit_req("h", run, run)).await.unwrap();
    }
    let first = last_segment(&dir).with_file_name("log-0000000000000001.aal");
    assert!(first.exists(), "{}", first.display());
    let second = first.with_file_name("log-0000000000000002.aal");
    std::fs::remove_file(&second).unwrap();
    let (code, stderr) = refused(&dir);
    assert_ne!(code, Some(0));
    assert!(stderr.contains(second.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_second_process_on_the_same_dir_refuses_to_start() {
    let dir = data_dir("locked");
    let first = on(&dir, &[]);
    let (code, stderr) = refused(&dir);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("in use by another live process"),
        "{stderr}"
    );
    assert!(stderr.contains("LOCK"), "{stderr}");
    // The first goes on serving.
    let mut c = first.client().await;
    c.submit(submit_req("h", "alice", "r1")).await.unwrap();
    drop(first);
    // Its lock went with it.
    let again = on(&dir, &[]);
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_dir_of_a_newer_format_refuses_to_start() {
    let (dir, _) = dir_with_tickets("newer").await;
    std::fs::write(
        dir.join("FORMAT"),
        "admission-authority data dir\nformat 99\nepoch_us 1\n",
    )
    .unwrap();
    let (code, stderr) = refused(&dir);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("FORMAT"), "{stderr}");
    assert!(stderr.contains("newer admission-authority"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn reason(e: &tonic::Status) -> String {
    e.get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

/// A tmpfs of `size` mounted on a fresh dir; unmounted when dropped. Needs root (the test
/// command runs as root here and in CI): without it the test fails, it does not skip.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Tmpfs {
        let dir = data_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(
            ok.success(),
            "mount a tmpfs (the full-disk test runs as root)"
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_full_disk_refuses_changes_loudly_and_recovers_by_itself() {
    full_disk("always").await;
}

/// Under `interval` the record of a change is written where its answer leaves: a connection
/// whose answer could leave unwritten is closed instead (UNAVAILABLE, the outcome unknown).
#[tokio::test]
async fn a_full_disk_under_interval_acknowledges_nothing_unwritten() {
    full_disk("interval").await;
}

async fn full_disk(sync: &str) {
    let fs = Tmpfs::mount(&format!("full-{sync}"), "2m");
    let data = fs.0.join("data");
    let admin = common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let config = common::config_file(
        &format!("durable-full-{sync}"),
        &format!("store: {{embedded: {{sync: {sync}}}}}\n"),
    );
    let server = on(
        &data,
        &[
            "--config",
            config.to_str().unwrap(),
            "--admin-listen",
            &admin_addr,
            "--total",
            "1000",
        ],
    );
    let mut c = server.client().await;
    let first = c
        .submit(submit_req("h", "alice", "before"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(http_get(admin, "/readyz").0, 200);

    // Fill the disk to the last byte.
    let filler = fs.0.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let small = [0u8; 512];
        while f.write_all(&small).is_ok() {}
        while f.write_all(&[0u8]).is_ok() {}
        let _ = f.sync_all();
    }
    // The first change that meets the full disk may have been applied (it stays in memory and
    // is written once there is room): OUTCOME_UNKNOWN, or under `interval`, where its record
    // is written as its answer leaves, its connection is closed instead ("closed": a transport
    // error, as when the authority restarts). Every one after is refused before it is
    // applied: STORE_UNAVAILABLE. None is acknowledged.
    let mut refused_runs = Vec::new();
    let mut reasons = Vec::new();
    for i in 0..200 {
        let run = format!("full-{i}");
        match c.submit(submit_req("h", &run, &run)).await {
            Ok(_) => continue,
            Err(e) if sync == "interval" && e.message() == "transport error" => {
                reasons.push("closed".to_string());
                refused_runs.push(run);
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                reasons.push(reason(&e));
                refused_runs.push(run);
                if reasons.iter().filter(|r| *r == "STORE_UNAVAILABLE").count() >= 3 {
                    break;
                }
            }
        }
    }
    assert!(
        reasons
            .iter()
            .all(|r| ["STORE_UNAVAILABLE", "OUTCOME_UNKNOWN", "closed"].contains(&r.as_str())),
        "{sync}: {reasons:?}"
    );
    assert_eq!(
        reasons.last().map(String::as_str),
        Some("STORE_UNAVAILABLE"),
        "{reasons:?}"
    );
    let (status, body) = http_get(admin, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    // Reads still answer.
    assert!(stats(&mut c, "h").await.in_flight >= 1);

    // Room again: the authority notices by itself.
    std::fs::remove_file(&filler).unwrap();
    eventually("readyz is 200 again", Duration::from_secs(10), || async {
        (http_get(admin, "/readyz").0 == 200).then_some(())
    })
    .await;
    let after = c
        .submit(submit_req("h", "alice", "after"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(after.state), api::TicketState::Admitted);

    // After a restart: what was acknowledged is there, what was refused up front is not.
    drop(server);
    let server = on(&data, &["--total", "1000"]);
    let mut c = server.client().await;
    assert_eq!(
        renew_states(&mut c, &[first.ticket_id, after.ticket_id]).await,
        vec![api::TicketState::Admitted; 2]
    );
    let mut op = server.operator().await;
    let runs: HashSet<String> = op
        .list_tickets(api::ListTicketsRequest {
            host_id: "h".into(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets
        .into_iter()
        .map(|t| t.run_id)
        .collect();
    for (run, why) in refused_runs.iter().zip(&reasons) {
        if why == "STORE_UNAVAILABLE" {
            assert!(
                !runs.contains(run),
                "{run} was refused up front and is there"
            );
        }
    }
    drop(server);
}

fn stderr_text(stderr: Option<std::process::ChildStderr>) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Some(mut s) = stderr {
        let _ = s.read_to_string(&mut text);
    }
    text
}
