//! The embedded store's scheduler tickets: each call one [`HostOp`], applied (and on a data
//! dir logged) under the host's lock by the helpers of the parent module.

use tokio::sync::watch;

use super::MemoryStore;
use super::ops::{HostOp, HostOut};
use crate::history;
use crate::scheduler::{
    Ending, HeldArgs, HostState, HostStats, Limits, LimitsRecord, LimitsSource, LimitsTable,
    ReclaimRefusal, Reclaimed, Report, SubmitArgs, SubmitError, TicketInfo, TicketState,
    TicketView,
};
use crate::store::ChangeWatch;
use crate::store::journal::SendGates;
use crate::store::{StoreError, TicketId, TicketStore};

impl TicketStore for MemoryStore {
    type Watch = ChangeWatch;

    fn file_limits(&self, host_id: &str) -> Limits {
        self.file_limits
            .read()
            .expect("limits lock")
            .for_host(host_id)
            .clone()
    }

    fn reload_file_limits(&self, limits: LimitsTable) {
        *self.file_limits.write().expect("limits lock") = limits;
        self.follow_file_limits();
    }

    async fn get_limits(&self, host_id: &str) -> Result<LimitsRecord, StoreError> {
        // A read makes no host: one without state has the file's limits, at the revision its
        // first change will find.
        let Some(host) = self.existing_host(host_id) else {
            return Ok(LimitsRecord {
                limits: self.file_limits(host_id),
                source: LimitsSource::File,
                revision: 1,
            });
        };
        let inner = host.inner.lock().expect("host lock");
        Ok(inner.core.limits.clone())
    }

    async fn set_limits(
        &self,
        host_id: &str,
        limits: Limits,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        self.change_limits(host_id, expected_revision, |_| {
            Some((limits, LimitsSource::Operator))
        })
        .await
    }

    async fn reset_limits(
        &self,
        host_id: &str,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        let file = self.file_limits(host_id);
        self.change_limits(host_id, expected_revision, |current| {
            (current.source == LimitsSource::Operator).then_some((file, LimitsSource::File))
        })
        .await
    }

    async fn submit(
        &self,
        host_id: &str,
        args: SubmitArgs,
    ) -> Result<Result<(TicketId, TicketView), SubmitError>, StoreError> {
        self.writable()?;
        let host = self.host(host_id);
        let key = {
            let inner = host.inner.lock().expect("host lock");
            let mut key = TicketId::random_key();
            while inner.core.state.has_ticket(key) {
                key = TicketId::random_key();
            }
            key
        };
        // A key drawn outside the lock can be taken by a concurrent Submit in between only
        // with 2^-128 odds; the core answers such a repeat as its own ticket anyway.
        let HostOut::Submitted(out) = self
            .change_host(host_id, &host, HostOp::Submit { args, key })
            .await?
        else {
            unreachable!("a submit answers Submitted")
        };
        Ok(out.map(|view| {
            let id = TicketId {
                host_id: host_id.to_string(),
                key: view.key,
            };
            (id, view)
        }))
    }

    async fn renew(
        &self,
        ids: &[TicketId],
        rss_mb: Option<u32>,
    ) -> Result<Vec<Option<TicketView>>, StoreError> {
        self.writable()?;
        let mut last = None;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(host) = self.existing_host(&id.host_id) else {
                out.push(None);
                continue;
            };
            let op = HostOp::Renew {
                key: id.key,
                rss_mb,
            };
            let (HostOut::Ticket(view), pending) = self.apply_host(&id.host_id, &host, op) else {
                unreachable!("a renew answers Ticket")
            };
            out.push(view);
            last = pending.or(last);
        }
        // The log is written in order: committing the last record commits them all.
        self.commit((out, last)).await
    }

    async fn release(
        &self,
        id: &TicketId,
        report: Report,
    ) -> Result<Option<TicketState>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        let op = HostOp::Release {
            key: id.key,
            report,
        };
        let HostOut::Released(previous) = self.change_host(&id.host_id, &host, op).await? else {
            unreachable!("a release answers Released")
        };
        Ok(previous)
    }

    async fn release_run(
        &self,
        host_id: &str,
        run_id: &str,
        report: Report,
    ) -> Result<Option<(TicketId, TicketState)>, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(None);
        };
        let op = HostOp::ReleaseRun {
            run_id: run_id.to_string(),
            report,
        };
        let HostOut::ReleasedRun(found) = self.change_host(host_id, &host, op).await? else {
            unreachable!("a release by run answers ReleasedRun")
        };
        Ok(found.map(|(key, s)| {
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
        self.change_parking(id, HostOp::Park(id.key)).await
    }

    async fn unpark(
        &self,
        id: &TicketId,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        self.change_parking(id, HostOp::Unpark(id.key)).await
    }

    async fn reclaim(
        &self,
        id: &TicketId,
        held: HeldArgs,
    ) -> Result<Result<Reclaimed, ReclaimRefusal>, StoreError> {
        self.writable()?;
        // A store that lost the host (a restart without a data dir) knows it again.
        let host = self.host(&id.host_id);
        let op = HostOp::Reclaim { held, key: id.key };
        let HostOut::Reclaimed(out) = self.change_host(&id.host_id, &host, op).await? else {
            unreachable!("a reclaim answers Reclaimed")
        };
        Ok(out)
    }

    async fn ticket(&self, id: &TicketId) -> Result<Option<TicketView>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        self.read_host(&id.host_id, &host, |state, limits, now| {
            state.view(limits, id.key, now)
        })
        .await
    }

    fn watch(&self, id: &TicketId) -> ChangeWatch {
        let Some(host) = self.existing_host(&id.host_id) else {
            return ChangeWatch::never();
        };
        let mut inner = host.inner.lock().expect("host lock");
        let rx = inner
            .watchers
            .entry(id.key)
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        ChangeWatch::new(rx)
    }

    async fn sweep_tickets(&self) -> Result<(), StoreError> {
        for (host_id, host) in self.all_hosts() {
            self.read_host(&host_id, &host, |_, _, _| ()).await?;
        }
        self.writable()
    }

    async fn stats(&self, host_id: &str) -> Result<HostStats, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            let limits = self.file_limits(host_id);
            return Ok(HostState::new().stats(&limits, self.clock.now_ms()));
        };
        self.read_host(host_id, &host, |state, limits, now| {
            state.stats(limits, now)
        })
        .await
    }

    async fn record_history(
        &self,
        host_id: &str,
        counts: &history::Counts,
        shape: &history::Shape,
    ) -> Result<(), StoreError> {
        let at = self.epoch_ms();
        let mut ring = self.history.lock().expect("history lock");
        ring.record(shape, host_id, at, *counts);
        Ok(())
    }

    async fn history(&self, host_id: &str) -> Result<Vec<history::Sample>, StoreError> {
        Ok(self.history.lock().expect("history lock").samples(host_id))
    }

    async fn recent_endings(&self, host_id: &str, limit: usize) -> Result<Vec<Ending>, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(Vec::new());
        };
        let origin_ms = self.clock.origin_epoch_us() / 1000;
        let mut endings = self
            .read_host(host_id, &host, |state, _, _| state.recent_endings(limit))
            .await?;
        for e in &mut endings {
            e.at += origin_ms;
        }
        Ok(endings)
    }

    async fn list(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<TicketInfo>, bool), StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok((Vec::new(), false));
        };
        self.read_host(host_id, &host, |state, limits, now| {
            state.list(limits, limit, now)
        })
        .await
    }

    async fn knows_host(&self, host_id: &str) -> Result<bool, StoreError> {
        Ok(self.existing_host(host_id).is_some()
            || self
                .file_limits
                .read()
                .expect("limits lock")
                .hosts
                .contains_key(host_id))
    }

    async fn host_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut hosts: Vec<String> = self.all_hosts().into_iter().map(|(h, _)| h).collect();
        hosts.sort();
        Ok(hosts)
    }

    fn kind(&self) -> &'static str {
        if self.journal.is_some() {
            "data_dir"
        } else {
            "memory"
        }
    }

    async fn in_flight_here(&self) -> Result<u64, StoreError> {
        Ok(self
            .all_hosts()
            .iter()
            .map(|(_, h)| u64::from(h.inner.lock().expect("host lock").core.state.in_flight()))
            .sum())
    }

    async fn count_rejection(&self, host_id: &str) -> Result<(), StoreError> {
        let host = self.host(host_id);
        self.change_host(host_id, &host, HostOp::CountRejection)
            .await
            .map(|_| ())
    }

    fn store_errors(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.errors())
    }

    fn readiness(&self) -> Result<(), String> {
        self.journal.as_ref().map_or(Ok(()), |j| j.health())
    }

    fn flush(&self) {
        self.close();
    }

    fn send_gates(&self) -> Option<SendGates> {
        self.journal.as_ref().and_then(|j| j.gate_sends())
    }
}

impl MemoryStore {
    /// Park or unpark a ticket (`op`); `None` when its host has no state.
    async fn change_parking(
        &self,
        id: &TicketId,
        op: HostOp,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        let HostOut::Parked(out) = self.change_host(&id.host_id, &host, op).await? else {
            unreachable!("a park or unpark answers Parked")
        };
        Ok(out)
    }
}
