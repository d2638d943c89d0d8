//! Every Redis key the store uses, built in one place.
//!
//! Keys start with the configured prefix (default `admission:`), so environments sharing one
//! Redis never collide. The part in `{...}` is the Redis Cluster hash tag: every key one
//! decision touches shares it, so each script runs on one slot. Auth bucket keys are tagged by
//! `endpoint:identity` (buckets are installation-wide); ticket and ledger keys by host_id.
//!
//! Keys never collide, whatever bytes the ids hold: the ids inside a hash tag are escaped
//! ([`escape`]: `%`, `{`, `}` and `:` as `%25`, `%7B`, `%7D`, `%3A`), so a tag ends at the
//! first `}` and its parts split at `:` unambiguously, and every other id follows a literal of
//! its own after the tag (`run:`, `q:`, `win:`, ...) that no fixed key name starts with. Ids
//! without those four characters are written as they are.

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
        format!(
            "{}authrl:{{{}:{}}}:b",
            self.prefix,
            escape(endpoint),
            escape(identity)
        )
    }

    /// `{prefix}authrl:{<endpoint>:<identity>}:l`: the lockout (its end in ms), expiring when
    /// the lockout ends.
    pub fn auth_lockout(&self, endpoint: &str, identity: &str) -> String {
        format!(
            "{}authrl:{{{}:{}}}:l",
            self.prefix,
            escape(endpoint),
            escape(identity)
        )
    }
}

impl Keys {
    /// `{prefix}rl:{<domain>}:live`: a rate limit domain's tally of live counters (sorted set:
    /// counter key -> its window's end in ms).
    pub fn rate_limit_live(&self, domain: &str) -> String {
        format!("{}rl:{{{}}}:live", self.prefix, escape(domain))
    }

    /// `{prefix}rl:{<domain>}:c:`: the prefix of a domain's counters (`...:c:<counter key>`,
    /// a string `<window start s>:<count>` expiring when its window ends). Every key of a
    /// domain shares its hash tag, so one request's hits are one script on one slot.
    pub fn rate_limit_counter_prefix(&self, domain: &str) -> String {
        format!("{}rl:{{{}}}:c:", self.prefix, escape(domain))
    }
}

impl Keys {
    /// `{prefix}epoch`: the store's state epoch (see `epoch.rs`; not per host: it is read by
    /// its own script, never inside a host's).
    pub fn epoch(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// `{prefix}losses`: the installation's count of state losses, `<count>|<last ms>`,
    /// carried across them by the replicas (see `epoch.rs`; not per host).
    pub fn losses(&self) -> String {
        format!("{}losses", self.prefix)
    }

    /// `{prefix}acks`: the count each replication confirmation increments before its `WAIT`
    /// (see `acks.rs`; not per host).
    pub fn acks(&self) -> String {
        format!("{}acks", self.prefix)
    }

    /// `{prefix}lost:<host>`: set for a while by the first replica that counts the loss of the
    /// host's keys (see `epoch.rs`).
    pub fn lost_host(&self, host: &str) -> String {
        format!("{}lost:{}", self.prefix, escape(host))
    }

    /// The prefix every key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{prefix}replicas`: the registry of replicas using the prefix and their layouts (see
    /// `layout.rs`; not per host).
    pub fn replicas(&self) -> String {
        format!("{}replicas", self.prefix)
    }

    /// `{prefix}hosts`: the set of host_ids with ledger state, for the sweep (not per host:
    /// it is read by one command, never inside a script).
    pub fn hosts(&self) -> String {
        format!("{}hosts", self.prefix)
    }

    /// `{prefix}sched:{<host>}:`: the prefix of every scheduling key of a host (see
    /// `scripts::TICKET_CORE` for the keys under it).
    pub fn sched(&self, host: &str) -> String {
        format!("{}sched:{{{}}}:", self.prefix, escape(host))
    }

    /// The pattern of every host's change channel (`<sched prefix>changes`).
    pub fn sched_changes_pattern(&self) -> String {
        format!("{}sched:*changes", self.prefix)
    }

    /// The host whose change channel `channel` is, if it is one.
    pub fn host_of_changes(&self, channel: &str) -> Option<String> {
        let escaped = channel
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix("sched:{")?
            .strip_suffix("}:changes")?;
        unescape(escaped)
    }

    /// `{prefix}ledger:{<host>}:run:`: the prefix of a host's run hashes (`...:run:<run_id>`;
    /// fields `subject`, `account`, `ut`/`uc` usage, `partial`, `open` steps, `aw` allowance
    /// window, and `s<step>` per step). Expires `run_retention` after its last call unless a
    /// reservation is open.
    pub fn ledger_run_prefix(&self, host: &str) -> String {
        format!("{}ledger:{{{}}}:run:", self.prefix, escape(host))
    }

    /// `{prefix}ledger:{<host>}:win:`: the prefix of a host's allowance windows
    /// (`...:win:<account>`; fields `start`, `end`, `ut`, `uc`), expiring when the window ends.
    pub fn ledger_window_prefix(&self, host: &str) -> String {
        format!("{}ledger:{{{}}}:win:", self.prefix, escape(host))
    }

    /// `{prefix}ledger:{<host>}:reserved`: reserved steps by when they were authorized.
    pub fn ledger_reserved(&self, host: &str) -> String {
        format!("{}ledger:{{{}}}:reserved", self.prefix, escape(host))
    }

    /// `{prefix}ledger:{<host>}:uncertain`: uncertain steps by when they were authorized.
    pub fn ledger_uncertain(&self, host: &str) -> String {
        format!("{}ledger:{{{}}}:uncertain", self.prefix, escape(host))
    }

    /// `{prefix}ledger:{<host>}:stats`: decision and settlement counters.
    pub fn ledger_stats(&self, host: &str) -> String {
        format!("{}ledger:{{{}}}:stats", self.prefix, escape(host))
    }
}

/// An id as it appears inside a hash tag: `%`, `{`, `}` and `:` percent-escaped, everything
/// else as it is (so the common ids read as themselves).
pub fn escape(id: &str) -> std::borrow::Cow<'_, str> {
    if !id.contains(['%', '{', '}', ':']) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The id [`escape`] made `escaped` from; `None` when it is not one of its outputs.
pub fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find(['%', '{', '}', ':']) {
        out.push_str(&rest[..i]);
        let code = rest.get(i..i + 3)?;
        out.push(match code {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            "%3A" => ':',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_look_like_key_syntax_never_share_a_key() {
        let k = Keys::new("p:");
        // The collision of the old layout: host `hA}:run:X` and host `hA` with run `X}:c`.
        let counters_of_odd_host = format!("{}c", k.sched("hA}:run:X"));
        let run_key_of_plain_host = format!("{}run:{}", k.sched("hA"), "X}:c");
        assert_ne!(counters_of_odd_host, run_key_of_plain_host);
        assert_eq!(counters_of_odd_host, "p:sched:{hA%7D%3Arun%3AX}:c");
        assert_ne!(k.auth_bucket("a:b", "c"), k.auth_bucket("a", "b:c"));
        assert_eq!(
            k.sched("plain-host"),
            "p:sched:{plain-host}:",
            "common ids unchanged"
        );
        for id in ["plain", "a:b", "{x}", "100%", "%7B", "::}{%"] {
            assert_eq!(unescape(&escape(id)).as_deref(), Some(id));
            assert!(!escape(id).contains(['{', '}', ':']));
        }
        let channel = format!("{}changes", k.sched("h}:x"));
        assert_eq!(k.host_of_changes(&channel).as_deref(), Some("h}:x"));
        assert_eq!(unescape("bad%zz"), None);
    }

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
