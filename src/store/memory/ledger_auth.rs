//! The embedded store's ledger and auth buckets: each call one [`LedgerOp`] or [`AuthOp`],
//! applied (and on a data dir logged) under the part's own lock by the helpers of the parent
//! module.

use super::MemoryStore;
use super::ops::{AuthOp, AuthOut, LedgerOp, LedgerOut};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, BucketRule};
use crate::ledger::{
    Authorization, AuthorizeArgs, LedgerStats, ReservationInfo, Resolution, Usage,
};
use crate::store::{AuthStore, LedgerResult, LedgerStore, StoreError};

impl LedgerStore for MemoryStore {
    async fn authorize(&self, host_id: &str, args: AuthorizeArgs) -> LedgerResult<Authorization> {
        let host = self.host(host_id);
        let LedgerOut::Authorized(out) = self
            .change_ledger(host_id, &host, LedgerOp::Authorize(args))
            .await?
        else {
            unreachable!("an authorize answers Authorized")
        };
        Ok(out)
    }

    async fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> LedgerResult<bool> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(Err(crate::ledger::LedgerError::NotAuthorized));
        };
        let op = LedgerOp::Settle {
            run_id: run_id.to_string(),
            step,
            usage,
        };
        let LedgerOut::Settled(out) = self.change_ledger(host_id, &host, op).await? else {
            unreachable!("a settle answers Settled")
        };
        Ok(out)
    }

    async fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> LedgerResult<()> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(Err(crate::ledger::LedgerError::NoSuchReservation));
        };
        let op = LedgerOp::Resolve {
            run_id: run_id.to_string(),
            step,
            resolution,
        };
        let LedgerOut::Resolved(out) = self.change_ledger(host_id, &host, op).await? else {
            unreachable!("a resolve answers Resolved")
        };
        Ok(out)
    }

    async fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<ReservationInfo>, bool), StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok((Vec::new(), false));
        };
        self.read_ledger(host_id, &host, |ledger, now| {
            ledger.open_reservations(limit, now)
        })
        .await
    }

    async fn ledger_stats(&self, host_id: &str) -> Result<LedgerStats, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(LedgerStats::default());
        };
        self.read_ledger(host_id, &host, |ledger, _| ledger.stats())
            .await
    }

    async fn sweep_ledger(&self) -> Result<(), StoreError> {
        for (host_id, host) in self.all_hosts() {
            self.read_ledger(&host_id, &host, |_, _| ()).await?;
        }
        Ok(())
    }
}

impl AuthStore for MemoryStore {
    fn auth_policy(&self) -> &AuthPolicy {
        &self.policy.auth
    }

    async fn auth_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let op = AuthOp::Attempt {
            endpoint: endpoint.to_string(),
            identity: identity.to_string(),
            rule,
        };
        let AuthOut::Decided(d) = self.change_auth(op).await? else {
            unreachable!("an attempt answers Decided")
        };
        Ok(d)
    }

    async fn auth_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let part = self.auth.lock().expect("auth lock");
        Ok(part
            .table
            .peek(endpoint, identity, rule, self.clock.now_ms()))
    }

    async fn auth_reset(&self, endpoint: &str, identity: &str) -> Result<AuthCleared, StoreError> {
        let op = AuthOp::Reset {
            endpoint: endpoint.to_string(),
            identity: identity.to_string(),
        };
        let AuthOut::Cleared(c) = self.change_auth(op).await? else {
            unreachable!("a reset answers Cleared")
        };
        Ok(c)
    }

    async fn sweep_auth(&self) -> Result<(), StoreError> {
        let writable = self.writable().is_ok();
        let now = self.clock.now_ms();
        let due = self.auth.lock().expect("auth lock").table.prune_due(now);
        if due && writable {
            let applied = self.apply_auth(AuthOp::Prune);
            self.commit(applied).await?;
        }
        self.snapshot_if_due();
        Ok(())
    }
}
