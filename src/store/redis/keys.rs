//! Every Redis key the store uses, built in one place.
//!
//! Keys start with the configured prefix (default `admission:`), so environments sharing one
//! Redis never collide. The part in `{...}` is the Redis Cluster hash tag: every key one
//! decision touches shares it, so each script runs on one slot. Auth bucket keys are tagged by
//! `endpoint:identity` (buckets are installation-wide); ticket and ledger keys by host_id.

/// Key builder for one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// `{prefix}authrl:{<endpoint>:<identity>}:b`: the bucket (hash: `c` attempts counted,
    /// `e` end of the window in ms), expiring when its window ends.
    pub fn auth_bucket(&self, endpoint: &str, identity: &str) -> String {
        format!("{}authrl:{{{endpoint}:{identity}}}:b", self.prefix)
    }

    /// `{prefix}authrl:{<endpoint>:<identity>}:l`: the lockout (its end in ms), expiring when
    /// the lockout ends.
    pub fn auth_lockout(&self, endpoint: &str, identity: &str) -> String {
        format!("{}authrl:{{{endpoint}:{identity}}}:l", self.prefix)
    }
}

impl Keys {
    /// `{prefix}hosts`: the set of host_ids with ledger state, for the sweep (not per host:
    /// it is read by one command, never inside a script).
    pub fn hosts(&self) -> String {
        format!("{}hosts", self.prefix)
    }

    /// `{prefix}sched:{<host>}:`: the prefix of every scheduling key of a host (see
    /// `scripts::TICKET_CORE` for the keys under it).
    pub fn sched(&self, host: &str) -> String {
        format!("{}sched:{{{host}}}:", self.prefix)
    }

    /// The pattern of every host's change channel (`<sched prefix>changes`).
    pub fn sched_changes_pattern(&self) -> String {
        format!("{}sched:*changes", self.prefix)
    }

    /// The host whose change channel `channel` is, if it is one.
    pub fn host_of_changes<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix("sched:{")?
            .strip_suffix("}:changes")
    }

    /// `{prefix}ledger:{<host>}:run:`: the prefix of a host's run hashes (`...:run:<run_id>`;
    /// fields `subject`, `account`, `ut`/`uc` usage, `partial`, `open` steps, `aw` allowance
    /// window, and `s<step>` per step). Expires `run_retention` after its last call unless a
    /// reservation is open.
    pub fn ledger_run_prefix(&self, host: &str) -> String {
        format!("{}ledger:{{{host}}}:run:", self.prefix)
    }

    /// `{prefix}ledger:{<host>}:win:`: the prefix of a host's allowance windows
    /// (`...:win:<account>`; fields `start`, `end`, `ut`, `uc`), expiring when the window ends.
    pub fn ledger_window_prefix(&self, host: &str) -> String {
        format!("{}ledger:{{{host}}}:win:", self.prefix)
    }

    /// `{prefix}ledger:{<host>}:reserved`: reserved steps by when they were authorized.
    pub fn ledger_reserved(&self, host: &str) -> String {
        format!("{}ledger:{{{host}}}:reserved", self.prefix)
    }

    /// `{prefix}ledger:{<host>}:uncertain`: uncertain steps by when they were authorized.
    pub fn ledger_uncertain(&self, host: &str) -> String {
        format!("{}ledger:{{{host}}}:uncertain", self.prefix)
    }

    /// `{prefix}ledger:{<host>}:stats`: decision and settlement counters.
    pub fn ledger_stats(&self, host: &str) -> String {
        format!("{}ledger:{{{host}}}:stats", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_keys_of_a_bucket_share_one_hash_tag() {
        let k = Keys::new("admission:");
        assert_eq!(
            k.auth_bucket("approval", "203.0.113.7"),
            "admission:authrl:{approval:203.0.113.7}:b"
        );
        assert_eq!(
            k.auth_lockout("approval", "203.0.113.7"),
            "admission:authrl:{approval:203.0.113.7}:l"
        );
    }
}
