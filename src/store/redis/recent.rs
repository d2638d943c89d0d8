//! Each host's newest endings on Redis: the `recent` list the scripts keep (newest first,
//! `RECENT_ENDINGS` of them; `note_end` in `lua/ticket_core.lua`), read as they wrote it.

use std::sync::Arc;

use redis::Value;

use super::RedisStore;
use super::codes;
use super::replies::text;
use crate::history::REASONS;
use crate::scheduler::{EndedAs, Ending, TicketKey};
use crate::store::StoreError;

impl RedisStore {
    pub(super) async fn recent_endings_of(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<Vec<Ending>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let reply: Value = self
            .conns
            .command(
                redis::cmd("LRANGE")
                    .arg(format!("{}recent", self.keys.sched(host_id)))
                    .arg(0)
                    .arg(limit - 1),
            )
            .await?;
        let Value::Array(items) = reply else {
            return Err(StoreError::protocol(format!(
                "redis: recent endings answered {reply:?}"
            )));
        };
        items
            .iter()
            .map(|v| {
                text(v)
                    .and_then(|s| ending(&s))
                    .ok_or_else(|| StoreError::protocol(format!("redis: a recent ending {v:?}")))
            })
            .collect()
    }
}

/// One record of `note_end`: ticket, state, run, subject, account, instance, key, superseding
/// ticket, refusal reason and time, joined by newlines.
fn ending(record: &str) -> Option<Ending> {
    let f: Vec<&str> = record.split('\n').collect();
    let [
        k,
        state,
        run,
        subject,
        account,
        instance,
        key,
        sby,
        reason,
        at,
    ] = f[..]
    else {
        return None;
    };
    let ticket = |s: &str| -> Option<Option<TicketKey>> {
        if s.is_empty() {
            Some(None)
        } else {
            TicketKey::from_str_radix(s, 16).ok().map(Some)
        }
    };
    let ended_as = if state.is_empty() {
        let code = REASONS.into_iter().find(|c| *c == reason)?;
        EndedAs::Refused(code)
    } else {
        EndedAs::Ticket(codes::ticket_state(state)?)
    };
    let name = |s: &str| (!s.is_empty()).then(|| Arc::<str>::from(s));
    Some(Ending {
        key: ticket(k)?,
        ended_as,
        run_id: Arc::from(run),
        subject: Arc::from(subject),
        account: name(account),
        instance: Arc::from(instance),
        keyed: name(key),
        superseded_by: ticket(sby)?,
        at: at.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::TicketState;

    #[test]
    fn records_read_back_and_malformed_ones_are_refused() {
        let released = codes::ticket_code(TicketState::Released);
        let r = ending(&format!(
            "00ff\n{released}\nrun-1\nalice\n\ngw-1\nconv-9\n\n\n1700000000000"
        ))
        .expect("a record");
        assert_eq!(r.key, Some(0xff));
        assert_eq!(r.ended_as, EndedAs::Ticket(TicketState::Released));
        assert_eq!(
            (&*r.run_id, &*r.subject, r.account.as_deref()),
            ("run-1", "alice", None)
        );
        assert_eq!(
            (r.keyed.as_deref(), r.at),
            (Some("conv-9"), 1_700_000_000_000)
        );
        let refused = ending("\n\nrun-2\nbob\nacct\ngw-1\n\n\nQUEUE_FULL\n5").expect("a refusal");
        assert_eq!(refused.ended_as, EndedAs::Refused("QUEUE_FULL"));
        assert_eq!(
            (refused.key, refused.account.as_deref()),
            (None, Some("acct"))
        );
        assert_eq!(
            ending("\n\nrun\ns\n\ni\n\n\nNOPE\n5"),
            None,
            "an unknown reason"
        );
        assert_eq!(
            ending("zz\nR\nrun\ns\n\ni\n\n\n\n5"),
            None,
            "a bad ticket key"
        );
        assert_eq!(ending("a\nb"), None, "too few fields");
    }
}
