//! The store sections: `store.redis` (URL, prefix, pool, cluster) and `store.embedded` (the data
//! dir and its sync policy).

use super::walker::{Cx, given, kind};
use super::*;

impl Cx {
    /// `store.redis`.
    pub(super) fn redis(&mut self, v: &Value) -> Option<RedisConfig> {
        let m = self.mapping(
            v,
            "store.redis",
            &[
                "url",
                "prefix",
                "pool_size",
                "cluster",
                "replicas_acked",
                "replication_timeout",
                "sentinel",
            ],
        )?;
        let url = match m.get("url").map(|v| (v.as_str(), v)) {
            Some((Some(u), _)) => Some(u.to_string()),
            Some((None, v)) => {
                self.err(
                    "store.redis.url",
                    format_args!("must be a string, got {}", kind(v)),
                );
                None
            }
            None => {
                self.err(
                    "store.redis",
                    "url is required (e.g. redis://127.0.0.1:6379/0)",
                );
                None
            }
        };
        let url = url.and_then(|u| self.redis_url(&u, "store.redis.url"));
        let prefix = match m.get("prefix") {
            None => Some(DEFAULT_REDIS_PREFIX.to_string()),
            Some(v) => match v.as_str() {
                Some(p) if p.len() <= 64 && !p.contains(['{', '}']) && check_id(p).is_ok() => {
                    Some(p.to_string())
                }
                _ => {
                    self.err(
                        "store.redis.prefix",
                        "must be 1..64 printable ASCII characters without { or }",
                    );
                    None
                }
            },
        };
        let pool_size = match m.get("pool_size") {
            None => Some(DEFAULT_REDIS_POOL),
            Some(v) => self
                .count(v, "store.redis.pool_size", 1, 256)
                .map(|n| n as u32),
        };
        let cluster = match m.get("cluster") {
            None => Some(false),
            Some(Value::Bool(b)) => Some(*b),
            Some(v) => {
                self.err(
                    "store.redis.cluster",
                    format_args!("must be true or false, got {}", kind(v)),
                );
                None
            }
        };
        let replicas_acked = match m.get("replicas_acked") {
            None => Some(0),
            Some(v) => self
                .count(v, "store.redis.replicas_acked", 0, MAX_REPLICAS_ACKED)
                .map(|n| n as u32),
        };
        if replicas_acked.is_some_and(|n| n > 0) && cluster == Some(true) {
            self.err(
                "store.redis.replicas_acked",
                "is not supported with cluster: true (a Redis Cluster's decisions land on \
                 several primaries, each to be confirmed by its own replicas): use 0",
            );
        }
        let replication_timeout_ms = match m.get("replication_timeout") {
            None => Some(DEFAULT_REPLICATION_TIMEOUT_MS),
            Some(v) => self.duration(v, "store.redis.replication_timeout", 10, 60_000),
        };
        let sentinel = match m.get("sentinel") {
            None => Some(None),
            Some(v) => self.sentinel(v).map(Some),
        };
        if matches!(sentinel, Some(Some(_))) && cluster == Some(true) {
            self.err(
                "store.redis.sentinel",
                "is not for cluster: true (a Redis Cluster promotes its own replicas)",
            );
        }
        Some(RedisConfig {
            url: url?,
            prefix: prefix?,
            pool_size: pool_size?,
            cluster: cluster?,
            replicas_acked: replicas_acked?,
            replication_timeout_ms: replication_timeout_ms?,
            sentinel: sentinel?,
        })
    }

    /// `store.redis.sentinel`: `{ master, nodes: [host:port, ...], password }`.
    fn sentinel(&mut self, v: &Value) -> Option<SentinelConfig> {
        let m = self.mapping(v, "store.redis.sentinel", &["master", "nodes", "password"])?;
        let master = match m.get("master").map(|v| v.as_str()) {
            Some(Some(name)) if check_id(name).is_ok() && !name.contains(' ') => {
                Some(name.to_string())
            }
            Some(_) => {
                self.err(
                    "store.redis.sentinel.master",
                    "must be the master set's name (1..128 printable ASCII characters, no \
                     spaces)",
                );
                None
            }
            None => {
                self.err(
                    "store.redis.sentinel",
                    "master is required (the name the sentinels monitor)",
                );
                None
            }
        };
        let nodes = match m.get("nodes").map(|v| v.as_sequence()) {
            Some(Some(list)) if !list.is_empty() && list.len() <= 32 => {
                let mut nodes = Vec::new();
                for (i, n) in list.iter().enumerate() {
                    let ok = n.as_str().filter(|s| {
                        s.rsplit_once(':').is_some_and(|(h, p)| {
                            !h.is_empty()
                                && !h.contains(['/', '@', ' '])
                                && p.parse::<u16>().is_ok_and(|p| p > 0)
                        })
                    });
                    match ok {
                        Some(s) => nodes.push(s.to_string()),
                        None => self.err(
                            &format!("store.redis.sentinel.nodes[{i}]"),
                            "must be a sentinel's host:port",
                        ),
                    }
                }
                (nodes.len() == list.len()).then_some(nodes)
            }
            Some(_) => {
                self.err(
                    "store.redis.sentinel.nodes",
                    "must be a list of 1..32 sentinels, host:port each",
                );
                None
            }
            None => {
                self.err(
                    "store.redis.sentinel",
                    "nodes is required (the sentinels, host:port each)",
                );
                None
            }
        };
        let password = match m.get("password") {
            None => Some(None),
            Some(Value::String(p)) if !p.is_empty() => Some(Some(p.clone())),
            Some(_) => {
                self.err(
                    "store.redis.sentinel.password",
                    "must be the sentinels' password, a non-empty string",
                );
                None
            }
        };
        Some(SentinelConfig {
            master: master?,
            nodes: nodes?,
            password: password?,
        })
    }

    /// `store.embedded`.
    pub(super) fn embedded(&mut self, v: &Value) -> EmbeddedConfig {
        let mut e = EmbeddedConfig::default();
        let Some(m) = self.mapping(
            v,
            "store.embedded",
            &["data_dir", "sync", "sync_interval", "snapshot_after"],
        ) else {
            return e;
        };
        if let Some(v) = given(m, "data_dir") {
            match v.as_str() {
                Some(d) if !d.is_empty() => e.data_dir = Some(self.file_path(d)),
                _ => self.err(
                    "store.embedded.data_dir",
                    format_args!("must be a directory path, got {}", kind(v)),
                ),
            }
        }
        if let Some(v) = m.get("sync") {
            match v.as_str().and_then(SyncPolicy::parse) {
                Some(p) => e.sync = p,
                None => self.err(
                    "store.embedded.sync",
                    format_args!("must be one of {}", SyncPolicy::NAMES.join(", ")),
                ),
            }
        }
        if let Some(v) = m.get("sync_interval")
            && let Some(ms) =
                self.duration(v, "store.embedded.sync_interval", 1, MAX_SYNC_INTERVAL_MS)
        {
            e.sync_interval_ms = ms;
        }
        if let Some(v) = m.get("snapshot_after")
            && let Some(b) = self.size(
                v,
                "store.embedded.snapshot_after",
                MIN_SNAPSHOT_AFTER,
                MAX_SNAPSHOT_AFTER,
            )
        {
            e.snapshot_after_bytes = b;
        }
        e
    }

    /// A Redis URL, checked for its scheme.
    pub(super) fn redis_url(&mut self, url: &str, path: &str) -> Option<String> {
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            Some(url.to_string())
        } else {
            // Not echoed: a URL may carry a password.
            self.err(path, "must be a redis:// or rediss:// URL");
            None
        }
    }
}
