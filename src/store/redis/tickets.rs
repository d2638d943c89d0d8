//! Scheduler tickets on Redis: the [`TicketStore`] half of [`RedisStore`], and the Wait
//! wake-ups that cross replicas (Redis pub/sub, with the Wait stream's own periodic re-check
//! as the safety net for a lost message).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use redis::Value;
use tokio::sync::watch;

use super::{RedisStore, codes};
use crate::scheduler::{
    Adaptive, Blocker, Counters, HeldArgs, HostStats, Limits, LimitsRecord, LimitsSource,
    LimitsTable, Mode, Outcome, OverflowPolicy, ReclaimRefusal, Reclaimed, Report, ShadowDecision,
    SubmitArgs, SubmitError, TicketInfo, TicketKey, TicketState, TicketView, UsageRow,
    WaitHistogram, level_of,
};
use crate::store::{StoreError, TicketId, TicketStore, TicketWatch};

/// Wait streams of this replica waiting for changes, by host and ticket.
pub(super) type Watchers = std::sync::Mutex<HashMap<(String, TicketKey), watch::Sender<()>>>;

/// A Wait stream's subscription to one ticket of the Redis store.
pub struct RedisWatch {
    rx: Option<watch::Receiver<()>>,
}

impl TicketWatch for RedisWatch {
    async fn changed(&mut self) {
        match &mut self.rx {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    self.rx = None;
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// This replica's file limits, and each host's as the scripts read them (computed once per
/// file, not per call).
pub(super) struct FileLimits {
    pub table: LimitsTable,
    default: (String, String),
    hosts: HashMap<String, (String, String)>,
}

impl FileLimits {
    /// The file's limits, versioned by the time now: newer than those of every replica
    /// started (or reloaded) before (see lua/ticket_core.lua, one set of limits).
    pub(super) fn new(table: LimitsTable, clock: &dyn crate::clock::Clock) -> Self {
        let version = clock.origin_epoch_us() + clock.now_ms() * 1_000;
        FileLimits {
            default: limits_args(&table.default, version),
            hosts: table
                .hosts
                .iter()
                .map(|(h, l)| (h.clone(), limits_args(l, version)))
                .collect(),
            table,
        }
    }

    fn args(&self, host: &str) -> &(String, String) {
        self.hosts.get(host).unwrap_or(&self.default)
    }
}

/// The limits of a host as the scripts read them: `version,` then the scalars, and the
/// per-subject and per-account caps as JSON (`""` when there are none; names are printable
/// ASCII). `version` orders the limits of replicas sharing the store (the newest are in force).
pub(super) fn limits_args(l: &Limits, version: u64) -> (String, String) {
    let (scalars, maps) = limits_parts(l);
    (format!("{version},{scalars}"), maps)
}

/// A host's limits as the scripts store them: the scalars, and the caps as JSON.
fn limits_parts(l: &Limits) -> (String, String) {
    // A JSON object of names (printable ASCII, escaped) to values written by `value`.
    fn object<V>(m: &HashMap<String, V>, value: impl Fn(&V) -> String) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let k = k.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = write!(out, "\"{k}\":{}", value(v));
        }
        out.push('}');
        out
    }
    let map = |m: &HashMap<String, u32>| object(m, u32::to_string);
    let scalars = format!(
        "{},{},{},{},{},{},{},{},{},{},{},{}",
        l.total,
        l.per_subject,
        l.per_account.map_or(-1, i64::from),
        l.queue_total,
        l.queue_per_subject,
        l.queue_hard_total,
        l.overflow.name(),
        l.lease_ttl_ms,
        l.retention_ms,
        l.max_retained,
        l.memory.max_rss_mb,
        l.memory.soft_rss_mb,
    );
    let defaults = l.weights.is_empty()
        && l.priority_aging_ms == 0
        && l.mode == Mode::Enforce
        && l.adaptive.is_empty()
        && l.adaptive_default.is_none();
    let maps = if l.subjects.is_empty() && l.accounts.is_empty() && defaults {
        String::new()
    } else {
        let mut m = format!(
            "{{\"subjects\":{},\"accounts\":{}",
            map(&l.subjects),
            map(&l.accounts)
        );
        if !l.weights.is_empty() {
            let _ = write!(m, ",\"weights\":{}", map(&l.weights));
        }
        if l.priority_aging_ms > 0 {
            let _ = write!(m, ",\"aging\":{}", l.priority_aging_ms);
        }
        if l.mode != Mode::Enforce {
            let _ = write!(m, ",\"mode\":\"{}\"", l.mode.name());
        }
        if let Some(a) = &l.adaptive_default {
            let _ = write!(m, ",\"adaptive\":\"{}\"", adaptive_arg(a));
        }
        if !l.adaptive.is_empty() {
            let accounts = object(&l.adaptive, |a| format!("\"{}\"", adaptive_arg(a)));
            let _ = write!(m, ",\"adaptiveAccounts\":{accounts}");
        }
        m.push('}');
        m
    };
    (scalars, maps)
}

/// A release's report as the scripts read it: the outcome's name ('' when unspecified) and the
/// latency ('' when not reported).
fn report_args(r: Report) -> (String, String) {
    let outcome = match r.outcome {
        Outcome::Unspecified => String::new(),
        o => o.name().to_string(),
    };
    (
        outcome,
        r.latency_ms.map_or_else(String::new, |l| l.to_string()),
    )
}

/// An adaptive cap's settings as the scripts read them: `min,max,decrease‰,increase,cooldown`.
fn adaptive_arg(a: &Adaptive) -> String {
    format!(
        "{},{},{},{},{}",
        a.min, a.max, a.decrease_pm, a.increase, a.cooldown_ms
    )
}

fn adaptive_of_arg(s: &str) -> Option<Adaptive> {
    let p: Vec<&str> = s.split(',').collect();
    if p.len() != 5 {
        return None;
    }
    Some(Adaptive {
        min: p[0].parse().ok()?,
        max: p[1].parse().ok()?,
        decrease_pm: p[2].parse().ok()?,
        increase: p[3].parse().ok()?,
        cooldown_ms: p[4].parse().ok()?,
    })
}

/// A reply field as text: a string or an integer; `None` for anything else (never a guess).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A reply field as a count: a non-negative integer, or a string of one.
fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

fn state(v: &Value) -> Option<TicketState> {
    codes::ticket_state(&text(v)?)
}

fn key_of(v: &Value) -> Option<TicketKey> {
    TicketKey::from_str_radix(&text(v)?, 16).ok()
}

fn hex(key: TicketKey) -> String {
    format!("{key:032x}")
}

/// A release's `{previous state, ticket key}` reply, or nil for an unknown ticket.
fn released(reply: Value) -> Result<Option<(TicketKey, TicketState)>, StoreError> {
    match &reply {
        Value::Nil => Ok(None),
        Value::Array(f) if f.len() == 2 => match (key_of(&f[1]), state(&f[0])) {
            (Some(k), Some(s)) => Ok(Some((k, s))),
            _ => Err(StoreError::protocol(format!(
                "redis: release answered {reply:?}"
            ))),
        },
        _ => Err(StoreError::protocol(format!(
            "redis: release answered {reply:?}"
        ))),
    }
}

/// The host's epoch when a Submit answered `{'epoch', seen}` (see `epoch.rs`).
fn epoch_reply(reply: &Value) -> Option<String> {
    match reply {
        Value::Array(f) if f.len() == 2 && f.first().and_then(text).as_deref() == Some("epoch") => {
            text(&f[1])
        }
        _ => None,
    }
}

/// A `{state, position, grant, lease, eta, blocker}` reply (or nil) as a view.
fn view(key: TicketKey, v: &Value) -> Result<Option<TicketView>, StoreError> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(f) if f.len() == 6 => {
            let bad = || StoreError::protocol(format!("redis: malformed ticket view {v:?}"));
            Ok(Some(TicketView {
                key,
                state: state(&f[0]).ok_or_else(bad)?,
                position: int(&f[1])
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(bad)?,
                grant: int(&f[2]).ok_or_else(bad)?,
                lease_remaining_ms: int(&f[3]).ok_or_else(bad)?,
                eta_ms: int(&f[4]).ok_or_else(bad)?,
                shadow: None,
                blocked_by: match text(&f[5]).ok_or_else(bad)?.as_str() {
                    "" => None,
                    code => Some(Blocker::from_code(code).ok_or_else(bad)?),
                },
            }))
        }
        other => Err(StoreError::protocol(format!(
            "redis: malformed ticket view {other:?}"
        ))),
    }
}

impl RedisStore {
    /// A ticket script on `host`: KEYS[1] the host's counters, ARGV the host prefix, limits,
    /// now, cap maps, then `args` (from ARGV[5]).
    async fn sched(
        &self,
        script: &redis::Script,
        host: &str,
        args: &[String],
    ) -> Result<Value, StoreError> {
        let prefix = self.keys.sched(host);
        let file = self.file_limits.read().expect("limits lock").clone();
        let (scalars, maps) = file.args(host);
        let mut inv = script.prepare_invoke();
        inv.key(format!("{prefix}c"))
            .arg(&prefix)
            .arg(scalars)
            .arg(self.now_arg())
            .arg(maps);
        for a in args {
            inv.arg(a);
        }
        self.conns.run(inv).await
    }

    /// Wake this replica's Wait streams on a ticket that changed.
    pub(super) fn notify(watchers: &Watchers, host: &str, key: TicketKey) {
        let mut w = watchers.lock().expect("watchers lock");
        if let Some(tx) = w.get(&(host.to_string(), key)) {
            tx.send_replace(());
            if tx.receiver_count() == 0 {
                w.remove(&(host.to_string(), key));
            }
        }
    }
}

impl TicketStore for RedisStore {
    type Watch = RedisWatch;

    fn file_limits(&self, host_id: &str) -> Limits {
        let file = self.file_limits.read().expect("limits lock").clone();
        file.table.for_host(host_id).clone()
    }

    fn reload_file_limits(&self, limits: LimitsTable) {
        // A newer version: the next call for each host writes these as its limits of record
        // (unless an operator's are there), on every replica.
        let file = FileLimits::new(limits, self.clock.as_ref());
        *self.file_limits.write().expect("limits lock") = Arc::new(file);
    }

    async fn get_limits(&self, host_id: &str) -> Result<LimitsRecord, StoreError> {
        let reply = self
            .sched(&self.limits, host_id, &["get".into(), "0".into()])
            .await?;
        limits_record(&reply)?.map_err(|rev| {
            StoreError::protocol(format!("redis: get limits answered moved at {rev}"))
        })
    }

    async fn set_limits(
        &self,
        host_id: &str,
        limits: Limits,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        self.register_host(host_id).await?;
        let (scalars, caps) = limits_parts(&limits);
        let args = ["set".into(), expected_revision.to_string(), scalars, caps];
        limits_record(&self.sched(&self.limits, host_id, &args).await?)
    }

    async fn reset_limits(
        &self,
        host_id: &str,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        let args = ["reset".into(), expected_revision.to_string()];
        limits_record(&self.sched(&self.limits, host_id, &args).await?)
    }

    async fn submit(
        &self,
        host_id: &str,
        args: SubmitArgs,
    ) -> Result<Result<(TicketId, TicketView), SubmitError>, StoreError> {
        self.register_host(host_id).await?;
        self.listener_ready().await;
        let key = TicketId::random_key();
        let mode = codes::mode_code(args.mode);
        let mut argv = vec![
            hex(key),
            args.instance_id,
            args.subject,
            args.account_id.unwrap_or_default(),
            args.run_id,
            mode.into(),
            args.rss_mb.map_or_else(String::new, |r| r.to_string()),
            level_of(args.priority).saturating_add(1).to_string(),
            self.epoch.id(),
            String::new(),
        ];
        // A host of another epoch than this replica knows changes nothing and says so: learn
        // the store's epoch (a loss, or a new host) and call again, beginning the host under it.
        let started = std::time::Instant::now();
        let mut reply = self.sched(&self.submit, host_id, &argv).await?;
        for _ in 0..2 {
            let Some(seen) = epoch_reply(&reply) else {
                break;
            };
            let init = self.learn_epoch(host_id, &seen, started).await?;
            argv[8] = self.epoch.id();
            argv[9] = init;
            reply = self.sched(&self.submit, host_id, &argv).await?;
        }
        let malformed = || StoreError::protocol(format!("redis: submit answered {reply:?}"));
        let Value::Array(f) = &reply else {
            return Err(malformed());
        };
        let tag = f.first().and_then(text).ok_or_else(malformed)?;
        let detail = f.get(1).and_then(text);
        if tag != "epoch" {
            self.epoch.served(host_id);
        }
        match tag.as_str() {
            "conflict" => Ok(Err(SubmitError::RunIdConflict {
                field: match detail.as_deref() {
                    Some("subject") => "subject",
                    Some("account_id") => "account_id",
                    _ => return Err(malformed()),
                },
            })),
            "refused" => {
                let refusal = detail
                    .as_deref()
                    .and_then(codes::refusal)
                    .ok_or_else(malformed)?;
                Ok(Err(match f.get(2).and_then(int) {
                    Some(left_ms) => SubmitError::Learning { refusal, left_ms },
                    None => SubmitError::Refused(refusal),
                }))
            }
            "ok" if f.len() == 9 => {
                let key = key_of(&f[1]).ok_or_else(malformed)?;
                let mut v = view(key, &Value::Array(f[2..8].to_vec()))?.ok_or_else(malformed)?;
                v.shadow = match text(&f[8]).ok_or_else(malformed)?.as_str() {
                    "" => None,
                    code => Some(ShadowDecision::from_code(code).ok_or_else(malformed)?),
                };
                let id = TicketId {
                    host_id: host_id.to_string(),
                    key,
                };
                Ok(Ok((id, v)))
            }
            _ => Err(malformed()),
        }
    }

    async fn renew(
        &self,
        ids: &[TicketId],
        rss_mb: Option<u32>,
    ) -> Result<Vec<Option<TicketView>>, StoreError> {
        // One script per host, in the order hosts first appear; answers go back in id order.
        let mut by_host: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match by_host.iter_mut().find(|(h, _)| *h == id.host_id) {
                Some((_, idx)) => idx.push(i),
                None => by_host.push((&id.host_id, vec![i])),
            }
        }
        let mut out = vec![None; ids.len()];
        for (host, idx) in by_host {
            let mut args = vec![rss_mb.map_or_else(String::new, |r| r.to_string())];
            args.extend(idx.iter().map(|&i| hex(ids[i].key)));
            let reply = self.sched(&self.renew, host, &args).await?;
            let Value::Array(views) = reply else {
                return Err(StoreError::protocol("redis: malformed renew answer"));
            };
            if views.len() != idx.len() {
                return Err(StoreError::protocol("redis: renew answered another count"));
            }
            for (&i, v) in idx.iter().zip(&views) {
                out[i] = view(ids[i].key, v)?;
            }
        }
        Ok(out)
    }

    async fn release(
        &self,
        id: &TicketId,
        report: Report,
    ) -> Result<Option<TicketState>, StoreError> {
        let (outcome, latency) = report_args(report);
        let reply = self
            .sched(
                &self.release,
                &id.host_id,
                &[hex(id.key), String::new(), outcome, latency],
            )
            .await?;
        Ok(released(reply)?.map(|(_, s)| s))
    }

    async fn release_run(
        &self,
        host_id: &str,
        run_id: &str,
        report: Report,
    ) -> Result<Option<(TicketId, TicketState)>, StoreError> {
        let (outcome, latency) = report_args(report);
        let reply = self
            .sched(
                &self.release,
                host_id,
                &[String::new(), run_id.to_string(), outcome, latency],
            )
            .await?;
        Ok(released(reply)?.map(|(key, s)| {
            (
                TicketId {
                    host_id: host_id.to_string(),
                    key,
                },
                s,
            )
        }))
    }

    async fn park(
        &self,
        id: &TicketId,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        let reply = self.sched(&self.park, &id.host_id, &[hex(id.key)]).await?;
        parked(id.key, reply)
    }

    async fn unpark(
        &self,
        id: &TicketId,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        let reply = self
            .sched(&self.unpark, &id.host_id, &[hex(id.key)])
            .await?;
        parked(id.key, reply)
    }

    async fn reclaim(
        &self,
        id: &TicketId,
        held: HeldArgs,
    ) -> Result<Result<Reclaimed, ReclaimRefusal>, StoreError> {
        self.register_host(&id.host_id).await?;
        let args = [
            hex(id.key),
            held.instance_id,
            held.subject,
            held.account_id.unwrap_or_default(),
            held.run_id,
            held.grant.to_string(),
            level_of(held.priority).saturating_add(1).to_string(),
        ];
        let reply = self.sched(&self.reclaim, &id.host_id, &args).await?;
        let malformed = || StoreError::protocol(format!("redis: reclaim answered {reply:?}"));
        let Value::Array(f) = &reply else {
            return Err(malformed());
        };
        match f.first().and_then(text).as_deref() {
            Some("ok") if f.len() == 8 => {
                let view = view(id.key, &Value::Array(f[2..8].to_vec()))?.ok_or_else(malformed)?;
                Ok(Ok(Reclaimed {
                    view,
                    reclaimed: int(&f[1]).ok_or_else(malformed)? == 1,
                }))
            }
            Some("refused") if f.len() == 3 => Ok(Err(match text(&f[1]).as_deref() {
                Some("TICKET_ENDED") => ReclaimRefusal::Ended(state(&f[2]).ok_or_else(malformed)?),
                Some("RUN_ID_TAKEN") => ReclaimRefusal::RunIdTaken,
                Some("TICKET_MISMATCH") => ReclaimRefusal::OtherRun,
                _ => return Err(malformed()),
            })),
            _ => Err(malformed()),
        }
    }

    async fn ticket(&self, id: &TicketId) -> Result<Option<TicketView>, StoreError> {
        self.listener_ready().await;
        let reply = self
            .sched(&self.ticket, &id.host_id, &[hex(id.key)])
            .await?;
        view(id.key, &reply)
    }

    fn watch(&self, id: &TicketId) -> RedisWatch {
        self.ensure_listener();
        let mut w = self.watchers.lock().expect("watchers lock");
        let rx = w
            .entry((id.host_id.clone(), id.key))
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        RedisWatch { rx: Some(rx) }
    }

    async fn sweep_tickets(&self) -> Result<(), StoreError> {
        self.check_epoch().await?;
        for host in self.hosts().await? {
            self.sched(&self.ticket, &host, &[hex(0), "sweep".into()])
                .await?;
        }
        self.watchers
            .lock()
            .expect("watchers lock")
            .retain(|_, tx| tx.receiver_count() > 0);
        Ok(())
    }

    async fn stats(&self, host_id: &str) -> Result<HostStats, StoreError> {
        let reply = self.sched(&self.stats, host_id, &[]).await?;
        stats_of(&reply)
    }

    async fn list(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<TicketInfo>, bool), StoreError> {
        let reply = self.sched(&self.list, host_id, &[]).await?;
        let Value::Array(f) = reply else {
            return Err(StoreError::protocol(format!(
                "redis: list answered {reply:?}"
            )));
        };
        let bad = || StoreError::protocol(format!("redis: list answered {f:?}"));
        let now = f.first().and_then(int).ok_or_else(bad)?;
        let body = &f[1..];
        if !body.len().is_multiple_of(14) {
            return Err(bad());
        }
        let mut rows: Vec<(TicketInfo, i64)> = body
            .chunks(14)
            .map(|r| {
                let info = TicketInfo {
                    key: key_of(&r[0])?,
                    state: state(&r[1])?,
                    subject: text(&r[2])?,
                    account_id: Some(text(&r[3])?).filter(|a| !a.is_empty()),
                    run_id: text(&r[4])?,
                    instance_id: text(&r[5])?,
                    grant: int(&r[6])?,
                    lease_remaining_ms: int(&r[7])?.saturating_sub(now),
                    priority: u8::try_from(int(&r[9])?).ok()?,
                    blocked_by: match text(&r[10])?.as_str() {
                        "" => None,
                        code => Some(Blocker::from_code(code)?),
                    },
                    in_state_ms: now.saturating_sub(int(&r[11])?),
                    place: u32::try_from(int(&r[12])?).ok()?,
                    eta_ms: int(&r[13])?,
                };
                // Smaller is earlier; an unparked ticket goes ahead of its subject's queue (< 0).
                Some((info, text(&r[8])?.parse::<i64>().ok()?))
            })
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        rows.sort_by_key(|(t, order)| (t.state == TicketState::Queued, t.grant, *order));
        let truncated = rows.len() > limit;
        Ok((
            rows.into_iter().take(limit).map(|(t, _)| t).collect(),
            truncated,
        ))
    }

    async fn host_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut hosts = self.hosts().await?;
        hosts.sort();
        Ok(hosts)
    }

    fn shared(&self) -> bool {
        true
    }

    fn state_losses(&self) -> u64 {
        self.epoch.losses()
    }

    fn readiness_note(&self) -> Option<String> {
        let lease = self
            .file_limits
            .read()
            .expect("limits lock")
            .table
            .longest_lease_ms();
        let window = std::time::Duration::from_millis(lease + lease / 3);
        let ago = self.epoch.recent_loss(window)?;
        Some(format!(
            "state loss detected {:.1} s ago: the runs still holding slots are re-registering; \
             new runs queue until the learning window ends ({} ms after the loss)",
            ago.as_secs_f64(),
            window.as_millis()
        ))
    }

    fn store_errors(&self) -> u64 {
        self.conns.errors()
    }

    async fn in_flight_here(&self) -> Result<u64, StoreError> {
        // Tickets live in Redis: other replicas keep renewing and releasing them.
        Ok(0)
    }

    async fn count_rejection(&self, host_id: &str) -> Result<(), StoreError> {
        // One command: nothing is decided, a counter only grows.
        let _: i64 = self
            .conns
            .command(
                redis::cmd("HINCRBY")
                    .arg(format!("{}c", self.keys.sched(host_id)))
                    .arg("rejected")
                    .arg(1),
            )
            .await?;
        Ok(())
    }
}

/// A limits script's answer: the limits of record, or the revision they moved to.
fn limits_record(reply: &Value) -> Result<Result<LimitsRecord, u64>, StoreError> {
    let bad = || StoreError::protocol(format!("redis: limits answered {reply:?}"));
    let Value::Array(f) = reply else {
        return Err(bad());
    };
    match f.first().and_then(text).as_deref() {
        Some("moved") => Ok(Err(f.get(1).and_then(int).ok_or_else(bad)?)),
        Some("ok") if f.len() >= 4 => Ok(Ok(LimitsRecord {
            source: match text(&f[1]).as_deref() {
                Some("operator") => LimitsSource::Operator,
                Some("file") => LimitsSource::File,
                _ => return Err(bad()),
            },
            revision: int(&f[2]).ok_or_else(bad)?,
            limits: limits_of(&f[3..]).ok_or_else(bad)?,
        })),
        _ => Err(bad()),
    }
}

/// A park or unpark answer.
fn parked(
    key: TicketKey,
    reply: Value,
) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
    let malformed = || StoreError::protocol(format!("redis: park answered {reply:?}"));
    let Value::Array(f) = &reply else {
        return match reply {
            Value::Nil => Ok(None),
            _ => Err(malformed()),
        };
    };
    match f.first().and_then(text).as_deref() {
        Some("ok") if f.len() == 7 => Ok(Some(Ok(
            view(key, &Value::Array(f[1..7].to_vec()))?.ok_or_else(malformed)?
        ))),
        Some("state") => Ok(Some(Err(f.get(1).and_then(state).ok_or_else(malformed)?))),
        _ => Err(malformed()),
    }
}

/// The limits of record the stats script answers: the scalars, then the subject and account
/// caps and the weights, each as a count and then name, value pairs, then aging and mode.
/// `None` when malformed.
fn limits_of(f: &[Value]) -> Option<Limits> {
    let scalars = text(f.first()?)?;
    let p: Vec<&str> = scalars.split(',').collect();
    if p.len() != 12 {
        return None;
    }
    let num = |i: usize| p[i].parse::<u64>().ok();
    let n32 = |i: usize| p[i].parse::<u32>().ok();
    let mut i = 1;
    let mut caps = || -> Option<HashMap<String, u32>> {
        let count = usize::try_from(int(f.get(i)?)?).ok()?;
        i += 1;
        let mut m = HashMap::new();
        for _ in 0..count {
            m.insert(text(f.get(i)?)?, u32::try_from(int(f.get(i + 1)?)?).ok()?);
            i += 2;
        }
        Some(m)
    };
    let subjects = caps()?;
    let accounts = caps()?;
    let weights = caps()?;
    let priority_aging_ms = int(f.get(i)?)?;
    let mode = Mode::parse(&text(f.get(i + 1)?)?)?;
    let adaptive_default = match text(f.get(i + 2)?)?.as_str() {
        "" => None,
        s => Some(adaptive_of_arg(s)?),
    };
    let count = usize::try_from(int(f.get(i + 3)?)?).ok()?;
    let mut adaptive = HashMap::new();
    for j in 0..count {
        let k = i + 4 + 2 * j;
        adaptive.insert(text(f.get(k)?)?, adaptive_of_arg(&text(f.get(k + 1)?)?)?);
    }
    Some(Limits {
        total: n32(0)?,
        per_subject: n32(1)?,
        per_account: match p[2] {
            "-1" => None,
            s => Some(s.parse().ok()?),
        },
        subjects,
        accounts,
        queue_total: n32(3)?,
        queue_per_subject: n32(4)?,
        queue_hard_total: n32(5)?,
        overflow: OverflowPolicy::parse(p[6])?,
        lease_ttl_ms: num(7)?,
        retention_ms: num(8)?,
        max_retained: n32(9)?,
        memory: crate::scheduler::MemoryLimits {
            max_rss_mb: n32(10)?,
            soft_rss_mb: n32(11)?,
        },
        weights,
        priority_aging_ms,
        mode,
        adaptive,
        adaptive_default,
    })
}

/// A stats row as the script answers it: name, in_flight, queued and (accounts) the cap.
type StatsRow = (String, u32, u32, Option<u32>);

fn stats_of(reply: &Value) -> Result<HostStats, StoreError> {
    let Value::Array(f) = reply else {
        return Err(StoreError::protocol("redis: malformed stats"));
    };
    let bad = || StoreError::protocol(format!("redis: malformed stats {reply:?}"));
    let n = |i: usize| f.get(i).and_then(int).ok_or_else(bad);
    let n32 = |i: usize| n(i).and_then(|x| u32::try_from(x).map_err(|_| bad()));
    let counters = Counters {
        submitted: n(3)?,
        admitted: n(4)?,
        rejected: n(5)?,
        released: n(6)?,
        cancelled: n(7)?,
        shed: n(8)?,
        expired: n(9)?,
        queue_wait: WaitHistogram::default(),
        shadow: [0; 4],
        hold_avg_ms: 0,
        outcomes: [0; 4],
        latency_sum_ms: 0,
        latency_count: 0,
        reclaimed: 0,
    };
    let mut i = 11;
    // Rows of name, in_flight, queued and (with `cap`) the cap in force (-1: none).
    let mut rows = |cap: bool| -> Result<Vec<StatsRow>, StoreError> {
        let count = n(i)? as usize;
        i += 1;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let name = f.get(i).and_then(text).ok_or_else(bad)?;
            let c = if cap {
                let c = f.get(i + 3).and_then(text).ok_or_else(bad)?;
                (c != "-1")
                    .then(|| c.parse::<u32>().map_err(|_| bad()))
                    .transpose()?
            } else {
                None
            };
            out.push((name, n32(i + 1)?, n32(i + 2)?, c));
            i += if cap { 4 } else { 3 };
        }
        out.sort();
        Ok(out)
    };
    let subject_rows = rows(false)?;
    let account_rows = rows(true)?;
    let mut queue_wait = WaitHistogram::default();
    for (j, b) in queue_wait.buckets.iter_mut().enumerate() {
        *b = n(i + j)?;
    }
    i += queue_wait.buckets.len();
    queue_wait.sum_ms = n(i)?;
    let mut shadow = [0; 4];
    for (j, c) in shadow.iter_mut().enumerate() {
        *c = n(i + 1 + j)?;
    }
    let hold_avg_ms = n(i + 5)?;
    let mut outcomes = [0; 4];
    for (j, c) in outcomes.iter_mut().enumerate() {
        *c = n(i + 6 + j)?;
    }
    let (latency_sum_ms, latency_count) = (n(i + 10)?, n(i + 11)?);
    let (reclaimed, learning_left_ms) = (n(i + 12)?, n(i + 13)?);
    let limits = limits_of(f.get(i + 14..).ok_or_else(bad)?).ok_or_else(bad)?;
    let subjects = subject_rows
        .into_iter()
        .map(|(name, in_flight, queued, _)| UsageRow {
            cap: limits.subject_cap(&name),
            in_flight,
            queued,
            name,
            adaptive: false,
        })
        .collect();
    let accounts = account_rows
        .into_iter()
        .map(|(name, in_flight, queued, cap)| UsageRow {
            cap: cap.unwrap_or(0),
            in_flight,
            queued,
            adaptive: limits.adaptive_of(&name).is_some(),
            name,
        })
        .collect();
    Ok(HostStats {
        in_flight: n32(0)?,
        queued: n32(1)?,
        parked: n32(2)?,
        counters: Counters {
            queue_wait,
            shadow,
            hold_avg_ms,
            outcomes,
            latency_sum_ms,
            latency_count,
            reclaimed,
            ..counters
        },
        reported_rss_mb: n32(10)?,
        subjects,
        accounts,
        limits,
        learning_left_ms,
    })
}

/// Listen for ticket changes published by any replica and wake the Wait streams of this one,
/// reconnecting after a second when the subscription drops (the Wait streams re-check their
/// tickets every second meanwhile, so a lost message only delays them).
pub(super) async fn listen(
    url: String,
    keys: super::keys::Keys,
    watchers: Arc<Watchers>,
    listening: watch::Sender<bool>,
) {
    use tokio_stream::StreamExt;
    // Said once when the subscription is lost (not once a second while Redis stays away).
    let mut lost = false;
    loop {
        let subscribed = async {
            let client = redis::Client::open(url.as_str())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.psubscribe(keys.sched_changes_pattern()).await?;
            listening.send_replace(true);
            if std::mem::take(&mut lost) {
                tracing::info!("redis change subscription restored");
            }
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let channel = msg.get_channel_name().to_string();
                let Some(host) = keys.host_of_changes(&channel) else {
                    continue;
                };
                let payload: String = msg.get_payload().unwrap_or_default();
                if let Ok(key) = u128::from_str_radix(&payload, 16) {
                    RedisStore::notify(&watchers, &host, key);
                }
            }
            Ok::<(), redis::RedisError>(())
        };
        if let Err(e) = subscribed.await
            && !lost
        {
            lost = true;
            tracing::warn!(
                "redis change subscription lost, resubscribing every second: {}: {}",
                super::redis_address(&url),
                super::connection::cause(&e)
            );
        }
        listening.send_replace(false);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
