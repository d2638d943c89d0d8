//! Scheduler tickets on Redis: the [`TicketStore`] half of [`RedisStore`], and the Wait
//! wake-ups that cross replicas (Redis pub/sub, with the Wait stream's own periodic re-check
//! as the safety net for a lost message).

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;
use tokio::sync::watch;

use super::coalesce::{Head, Kind};
use super::limits_args::*;
use super::replies::*;
use super::{RedisStore, codes};
use crate::scheduler::{
    Blocker, HeldArgs, HostStats, Limits, LimitsRecord, LimitsTable, ReclaimRefusal, Reclaimed,
    Refusal, Report, ShadowDecision, SubmitArgs, SubmitError, TicketInfo, TicketKey, TicketState,
    TicketView, level_of,
};
use crate::store::{ChangeWatch, StoreError, TicketId, TicketStore};

/// Wait streams of this replica waiting for changes, by host and ticket.
pub(super) type Watchers = std::sync::Mutex<HashMap<(String, TicketKey), watch::Sender<()>>>;

impl RedisStore {
    /// A ticket script on `host`: KEYS[1] the host's counters, ARGV the host prefix, limits,
    /// now, cap maps, then `args` (from ARGV[5]).
    async fn sched(
        &self,
        script: &redis::Script,
        host: &str,
        args: &[String],
    ) -> Result<Value, StoreError> {
        self.refuse_if_incompatible()?;
        self.resume_if_paused(host).await?;
        self.conns
            .run(self.head(host).invocation(script, args))
            .await
    }

    /// After a pause of this process, a host's first script here is preceded by one that gives
    /// its live tickets a lease from now ([`crate::pause`]): the Wait streams and Renews that
    /// keep them alive sat in this process, and Redis's time went on. The same after Redis
    /// stopped answering (a failover, a restart, a stall): no Renew could reach it meanwhile,
    /// so a holder that kept renewing through the outage keeps its slot, and no newcomer
    /// takes it for it to come back to above the cap.
    async fn resume_if_paused(&self, host: &str) -> Result<(), StoreError> {
        let pauses = self.pauses.look_at(self.clock.now_ms()) + self.conns.outages();
        if pauses == 0 {
            // No pause yet (nearly always): no lock on the way of every call.
            return Ok(());
        }
        let done = |map: &HashMap<String, u64>| map.get(host).copied().unwrap_or(0) == pauses;
        if done(&self.resumed.lock().expect("resumed lock")) {
            return Ok(());
        }
        let args = [hex(0), "resume".into()];
        self.conns
            .run::<Value>(self.head(host).invocation(&self.ticket, &args))
            .await?;
        let mut resumed = self.resumed.lock().expect("resumed lock");
        // Bounded by the hosts of the store (the sweep's list), like `registered_hosts`.
        resumed.insert(host.to_string(), pauses);
        Ok(())
    }

    /// This process's pauses, for the server to beat
    /// ([`crate::pause::PauseWatch::start_heartbeat`]).
    pub fn pauses(&self) -> Arc<crate::pause::PauseWatch> {
        self.pauses.clone()
    }

    /// A Submit or Release on `host` (`args` from ARGV[5] of its script), sent with the host's
    /// others that arrive meanwhile ([`coalesce`]).
    async fn coalesced(
        &self,
        kind: Kind,
        host: &str,
        args: Arc<[String]>,
    ) -> Result<Value, StoreError> {
        self.refuse_if_incompatible()?;
        self.resume_if_paused(host).await?;
        self.coalescer.call(host, kind, self.head(host), args).await
    }

    /// The arguments every ticket script on `host` takes first.
    fn head(&self, host: &str) -> Head {
        let file = self.file_limits.read().expect("limits lock").clone();
        let (scalars, maps) = file.args(host);
        Head {
            prefix: self.keys.sched(host),
            scalars: scalars.to_string(),
            now: self.now_arg(),
            maps: maps.to_string(),
        }
    }

    /// Submits and Releases sent in batches of two or more, and how many such batches, since
    /// the store was made.
    pub fn coalesced_counts(&self) -> (u64, u64) {
        self.coalescer.batched()
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
    type Watch = ChangeWatch;

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
        if args.keyed.is_some() && self.keys_refused_by_layout() {
            return Ok(Err(SubmitError::Unsupported {
                field: "key",
                rule: "a replica of an older version (Redis layout 2) runs on this prefix and \
                       would dispatch a keyed ticket as if it had no key: Submits with a key \
                       are refused until every replica runs this version (docs/upgrading.md)",
            }));
        }
        self.register_host(host_id).await?;
        self.listener_ready().await;
        let key = TicketId::random_key();
        let args_policy = args.keyed.as_ref().map(|k| k.policy);
        let mode = codes::mode_code(args.mode);
        let argv: Arc<[String]> = Arc::from([
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
            if args.resubmit_expired { "1" } else { "" }.into(),
        ]);
        // A keyed Submit goes alone, with the full rules (the coalesced fast paths take no
        // key): its key's arguments follow the others.
        let keyed: Option<Arc<[String]>> = args.keyed.as_ref().map(|k| {
            let mut all = argv.to_vec();
            all.extend([
                k.key.clone(),
                codes::key_policy_code(k.policy).into(),
                if k.supersede_running { "1" } else { "" }.into(),
                k.debounce_ms.to_string(),
                k.debounce_max_ms.to_string(),
            ]);
            Arc::from(all)
        });
        let argv = keyed.clone().unwrap_or(argv);
        // A host of another epoch than this replica knows changes nothing and says so: learn
        // the store's epoch (a loss, or a new host) and call again, beginning the host under it.
        let started = self.epoch.tick();
        let mut reply = match &keyed {
            Some(all) => self.sched(&self.submit, host_id, all).await?,
            None => self.coalesced(Kind::Submit, host_id, argv.clone()).await?,
        };
        for _ in 0..2 {
            let Some(seen) = epoch_reply(&reply) else {
                break;
            };
            let init = self.learn_epoch(host_id, &seen, started).await?;
            let mut again = argv.to_vec();
            again[8] = self.epoch.id();
            again[9] = init;
            reply = self.sched(&self.submit, host_id, &again).await?;
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
            "key_policy" => Ok(Err(SubmitError::KeyPolicyConflict {
                live: detail
                    .as_deref()
                    .and_then(codes::key_policy)
                    .ok_or_else(malformed)?,
                asked: args_policy.ok_or_else(malformed)?,
            })),
            "key_busy" => Ok(Err(SubmitError::KeyBusy {
                holder: f.get(1).and_then(key_of).ok_or_else(malformed)?,
            })),
            "ok" if f.len() == 11 => {
                let key = key_of(&f[1]).ok_or_else(malformed)?;
                let mut v = view(key, &Value::Array(f[2..10].to_vec()))?.ok_or_else(malformed)?;
                v.shadow = match text(&f[10]).ok_or_else(malformed)?.as_str() {
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
            .coalesced(
                Kind::Release,
                &id.host_id,
                Arc::from([hex(id.key), String::new(), outcome, latency]),
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
            .coalesced(
                Kind::Release,
                host_id,
                Arc::from([String::new(), run_id.to_string(), outcome, latency]),
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
            held.key
                .as_ref()
                .map_or_else(String::new, |(k, _)| k.clone()),
            held.key
                .as_ref()
                .map_or_else(String::new, |(_, p)| codes::key_policy_code(*p).into()),
        ];
        let reply = self.sched(&self.reclaim, &id.host_id, &args).await?;
        let malformed = || StoreError::protocol(format!("redis: reclaim answered {reply:?}"));
        let Value::Array(f) = &reply else {
            return Err(malformed());
        };
        match f.first().and_then(text).as_deref() {
            Some("ok") if f.len() == 10 || f.len() == 11 => {
                let view = view(id.key, &Value::Array(f[2..10].to_vec()))?.ok_or_else(malformed)?;
                if f.get(10).and_then(text).as_deref() == Some("rollback") {
                    self.epoch
                        .rolled_back(&self.conns, &self.keys, self.now_arg(), &id.host_id)
                        .await?;
                }
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

    fn watch(&self, id: &TicketId) -> ChangeWatch {
        self.ensure_listener();
        let mut w = self.watchers.lock().expect("watchers lock");
        let rx = w
            .entry((id.host_id.clone(), id.key))
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        ChangeWatch::new(rx)
    }

    async fn sweep_tickets(&self) -> Result<(), StoreError> {
        self.join().await?;
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

    async fn recent_endings(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<Vec<crate::scheduler::Ending>, StoreError> {
        self.recent_endings_of(host_id, limit).await
    }

    async fn record_history(
        &self,
        host_id: &str,
        counts: &crate::history::Counts,
        shape: &crate::history::Shape,
    ) -> Result<(), StoreError> {
        self.record_history_sample(host_id, counts, shape).await
    }

    async fn history(&self, host_id: &str) -> Result<Vec<crate::history::Sample>, StoreError> {
        self.history_samples(host_id).await
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
        if !body.len().is_multiple_of(18) {
            return Err(bad());
        }
        let mut rows: Vec<(TicketInfo, i64)> = body
            .chunks(18)
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
                    keyed: match text(&r[14])?.as_str() {
                        "" => None,
                        key => Some((key.to_string(), codes::key_policy(&text(&r[15])?)?)),
                    },
                    superseded_by: match text(&r[16])?.as_str() {
                        "" => None,
                        _ => Some(key_of(&r[16])?),
                    },
                    debounce_left_ms: int(&r[17])?,
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

    async fn knows_host(&self, host_id: &str) -> Result<bool, StoreError> {
        if self.configured_or_registered(host_id) {
            return Ok(true);
        }
        self.conns
            .command(redis::cmd("SISMEMBER").arg(self.keys.hosts()).arg(host_id))
            .await
    }

    async fn host_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut hosts = self.hosts().await?;
        hosts.sort();
        Ok(hosts)
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn shared(&self) -> bool {
        true
    }

    fn state_losses(&self) -> u64 {
        self.epoch.installation().0
    }

    /// The scripts' clock is Redis `TIME`, in ms since the Unix epoch (a test's frozen time
    /// otherwise).
    fn last_state_loss_ms(&self) -> u64 {
        self.epoch.installation().1
    }

    fn readiness(&self) -> Result<(), String> {
        match &*self.incompatible.lock().expect("layout lock") {
            Some(why) => Err(format!("store incompatible: {why}")),
            None => Ok(()),
        }
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
        // Nothing is decided, two counters only grow.
        let counters = format!("{}c", self.keys.sched(host_id));
        let reason = format!("r:{}", Refusal::MemoryPressure.code());
        let _: () = self
            .conns
            .transaction(
                redis::pipe()
                    .atomic()
                    .hincr(&counters, "rejected", 1)
                    .ignore()
                    .hincr(&counters, reason, 1)
                    .ignore(),
            )
            .await?;
        Ok(())
    }
}

/// Listen for ticket changes published by any replica and wake the Wait streams of this one,
/// reconnecting after a second when the subscription drops (the Wait streams re-check their
/// tickets every second meanwhile, so a lost message only delays them).
pub(super) async fn listen(
    source: Arc<super::source::Source>,
    addr: String,
    keys: super::keys::Keys,
    watchers: Arc<Watchers>,
    listening: watch::Sender<bool>,
) {
    use tokio_stream::StreamExt;
    // Said once when the subscription is lost (not once a second while Redis stays away).
    let mut lost = false;
    loop {
        let subscribed = async {
            let mut pubsub = source.client().await?.get_async_pubsub().await?;
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
                addr,
                super::connection::cause(&e)
            );
        }
        listening.send_replace(false);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
