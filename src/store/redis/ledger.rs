//! The resource ledger on Redis: the [`LedgerStore`] part of [`RedisStore`]. Every call is one
//! script from [`super::scripts`] over the run's hash and the host's reservation indexes.

use super::RedisStore;
use super::codes::{self, StepCode};
use crate::ledger::{
    Authorization, AuthorizeArgs, LedgerError, LedgerStats, ReservationInfo, Resolution, StepState,
    UnknownUsage, Usage,
};
use crate::store::{LedgerResult, LedgerStore, StoreError};

impl RedisStore {
    /// Housekeeping of a host's ledger, and up to `limit` of its open reservations.
    async fn open_steps(
        &self,
        host: &str,
        limit: usize,
    ) -> Result<(u64, u64, u64, Vec<ReservationInfo>), StoreError> {
        let mut inv = self.open_reservations.prepare_invoke();
        inv.key(self.keys.ledger_reserved(host))
            .key(self.keys.ledger_uncertain(host))
            .arg(self.policy.resources.reservation_ttl_ms)
            .arg(self.keys.ledger_run_prefix(host))
            .arg(limit)
            .arg(self.now_arg());
        let out: Vec<String> = self.conns.run(inv).await?;
        let bad = || StoreError::protocol(format!("redis: reservation listing answered {out:?}"));
        if out.len() < 3 || !(out.len() - 3).is_multiple_of(9) {
            return Err(bad());
        }
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let now = num(&out[0])?;
        let rows = out[3..]
            .chunks(9)
            .map(|r| {
                Ok(ReservationInfo {
                    run_id: r[0].clone(),
                    step: r[1].parse().map_err(|_| bad())?,
                    state: match codes::step_state(&r[2]) {
                        Some(StepCode::Uncertain) => StepState::Uncertain,
                        Some(StepCode::Reserved) => StepState::Reserved,
                        _ => return Err(bad()),
                    },
                    subject: r[3].clone(),
                    account_id: (!r[4].is_empty()).then(|| r[4].clone()),
                    model: r[5].clone(),
                    reserved_tokens: num(&r[6])?,
                    reserved_cost: num(&r[7])?,
                    age_ms: now.saturating_sub(num(&r[8])?),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((now, num(&out[1])?, num(&out[2])?, rows))
    }
}

/// A number a script answered, `''` for none; anything else is not understood.
fn opt_num(s: &str) -> Result<Option<u64>, ()> {
    if s.is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(drop)
    }
}

fn opt_arg(v: Option<u64>) -> String {
    v.map_or_else(String::new, |n| n.to_string())
}

impl LedgerStore for RedisStore {
    async fn authorize(&self, host_id: &str, args: AuthorizeArgs) -> LedgerResult<Authorization> {
        self.refuse_if_incompatible()?;
        self.register_host(host_id).await?;
        let policy = &self.policy.resources;
        let budget = policy.effective(&args.subject, args.account_id.as_deref());
        let allowance = args
            .account_id
            .as_deref()
            .and_then(|a| policy.allowances.get(a));
        let window_key = match (&args.account_id, allowance) {
            (Some(a), Some(_)) => format!("{}{a}", self.keys.ledger_window_prefix(host_id)),
            // Any key of the host, so the script's keys stay on one slot.
            _ => self.keys.ledger_stats(host_id),
        };
        let mut inv = self.authorize.prepare_invoke();
        inv.key(format!(
            "{}{}",
            self.keys.ledger_run_prefix(host_id),
            args.run_id
        ))
        .key(window_key)
        .key(self.keys.ledger_reserved(host_id))
        .key(self.keys.ledger_uncertain(host_id))
        .key(self.keys.ledger_stats(host_id))
        .arg(&args.run_id)
        .arg(args.step)
        .arg(&args.subject)
        .arg(args.account_id.as_deref().unwrap_or(""))
        .arg(&args.model)
        .arg(args.requested_output_tokens)
        .arg(args.estimated_input_tokens)
        .arg(args.estimated_cost)
        .arg(opt_arg(budget.max_tokens))
        .arg(opt_arg(budget.max_cost))
        .arg(budget.unknown_usage.map_or("", UnknownUsage::name))
        .arg(opt_arg(allowance.and_then(|a| a.tokens)))
        .arg(opt_arg(allowance.and_then(|a| a.cost)))
        .arg(opt_arg(allowance.map(|a| a.window_ms)))
        .arg(policy.reservation_ttl_ms)
        .arg(policy.run_retention_ms)
        .arg(self.keys.ledger_run_prefix(host_id))
        .arg(self.now_arg());
        let out: Vec<String> = self.conns.run(inv).await?;
        // A reply this authority does not understand is an error of its own, never a guess.
        let strange = || StoreError::protocol(format!("redis: authorize answered {out:?}"));
        match out.first().map(String::as_str) {
            Some("conflict") => {
                let field = match out.get(1).map(String::as_str) {
                    Some("subject") => "subject",
                    Some("account_id") => "account_id",
                    _ => return Err(strange()),
                };
                return Ok(Err(LedgerError::RunConflict { field }));
            }
            Some("ok") if out.len() == 7 => {}
            _ => return Err(strange()),
        }
        Ok(Ok(Authorization {
            decision: codes::decision(&out[1]).ok_or_else(strange)?,
            reason: codes::reason(&out[2]).ok_or_else(strange)?,
            granted_output_tokens: out[3].parse().map_err(|_| strange())?,
            remaining_tokens: opt_num(&out[4]).map_err(|_| strange())?,
            remaining_cost: opt_num(&out[5]).map_err(|_| strange())?,
            replay: match out[6].as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(strange()),
            },
        }))
    }

    async fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> LedgerResult<bool> {
        self.refuse_if_incompatible()?;
        let policy = &self.policy.resources;
        let coverage = codes::coverage_code(usage.coverage);
        let mut inv = self.settle.prepare_invoke();
        inv.key(format!("{}{run_id}", self.keys.ledger_run_prefix(host_id)))
            .key(self.keys.ledger_reserved(host_id))
            .key(self.keys.ledger_uncertain(host_id))
            .key(self.keys.ledger_stats(host_id))
            .arg(run_id)
            .arg(step)
            .arg(usage.input_tokens)
            .arg(usage.output_tokens)
            .arg(usage.cost)
            .arg(coverage)
            .arg(self.keys.ledger_window_prefix(host_id))
            .arg(policy.reservation_ttl_ms)
            .arg(policy.run_retention_ms)
            .arg(self.keys.ledger_run_prefix(host_id))
            .arg(self.now_arg());
        let out: Vec<String> = self.conns.run(inv).await?;
        Ok(match out.first().map(String::as_str) {
            Some("ok") => Ok(false),
            Some("replay") => Ok(true),
            Some("not_authorized") => Err(LedgerError::NotAuthorized),
            Some("conflict") => Err(LedgerError::SettleConflict),
            Some("resolved") => Err(LedgerError::AlreadyResolved),
            _ => {
                return Err(StoreError::protocol(format!(
                    "redis: settle answered {out:?}"
                )));
            }
        })
    }

    async fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> LedgerResult<()> {
        self.refuse_if_incompatible()?;
        let policy = &self.policy.resources;
        let mut inv = self.resolve.prepare_invoke();
        inv.key(format!("{}{run_id}", self.keys.ledger_run_prefix(host_id)))
            .key(self.keys.ledger_reserved(host_id))
            .key(self.keys.ledger_uncertain(host_id))
            .key(self.keys.ledger_stats(host_id))
            .arg(run_id)
            .arg(step)
            .arg(codes::resolution_code(resolution))
            .arg(self.keys.ledger_window_prefix(host_id))
            .arg(policy.reservation_ttl_ms)
            .arg(policy.run_retention_ms)
            .arg(self.keys.ledger_run_prefix(host_id))
            .arg(self.now_arg());
        let out: Vec<String> = self.conns.run(inv).await?;
        Ok(match out.first().map(String::as_str) {
            Some("ok") => Ok(()),
            Some("no_such") => Err(LedgerError::NoSuchReservation),
            Some("not_uncertain") => {
                let state = match out.get(1).and_then(|c| codes::step_state(c)) {
                    Some(code) if code != StepCode::Uncertain => code.name(),
                    _ => {
                        return Err(StoreError::protocol(format!(
                            "redis: resolve answered {out:?}"
                        )));
                    }
                };
                Err(LedgerError::NotUncertain { state })
            }
            _ => {
                return Err(StoreError::protocol(format!(
                    "redis: resolve answered {out:?}"
                )));
            }
        })
    }

    async fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<ReservationInfo>, bool), StoreError> {
        if limit == 0 {
            return Ok((Vec::new(), false));
        }
        let (_, _, _, mut rows) = self.open_steps(host_id, limit).await?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        Ok((rows, more))
    }

    async fn ledger_stats(&self, host_id: &str) -> Result<LedgerStats, StoreError> {
        let (_, uncertain, reserved, _) = self.open_steps(host_id, 0).await?;
        let c: std::collections::HashMap<String, u64> = self
            .conns
            .command(redis::cmd("HGETALL").arg(self.keys.ledger_stats(host_id)))
            .await?;
        let get = |k: &str| c.get(k).copied().unwrap_or(0);
        Ok(LedgerStats {
            open: uncertain + reserved,
            uncertain,
            allowed: get("allowed"),
            denied: get("denied"),
            deferred: get("deferred"),
            settled: get("settled"),
        })
    }

    async fn sweep_ledger(&self) -> Result<(), StoreError> {
        for host in self.hosts().await? {
            self.open_steps(&host, 0).await?;
        }
        Ok(())
    }
}
