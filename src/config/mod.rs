//! Configuration: built-in defaults < YAML file < command-line flags.
//!
//! The file is read into a YAML value tree and walked by hand rather than deserialised with
//! serde's `deny_unknown_fields`, because serde stops at the first problem while operators want
//! every problem of a file in one pass, each with its path
//! (`scheduling.queue.total: must be >= 0`).
//!
//! - [`walker`]: typed reads of the YAML tree that report and keep going;
//! - [`sections`]: the file's top level and the scheduling sections read into what they
//!   configure; [`stores`] the store sections, [`policies`] `resources` and `auth`;
//! - [`resolve`]: defaults < file < flags into one [`Config`];
//! - [`render`]: a [`Config`] as the YAML `check-config` prints;
//! - [`access`]: credentials, TLS and the gRPC edge's limits;
//! - [`http_admission`]: the external processor's policies (`http_admission`).

mod access;
mod http_admission;
mod policies;
mod rate_limits;
mod render;
mod resolve;
mod sections;
mod stores;
mod walker;

pub use access::{GrpcLimits, TlsFiles};
pub use rate_limits::RateLimitsConfig;
pub use render::changed_keys;
pub use walker::{check_id, format_ms, parse_duration_ms};

use walker::{Cx, join, kind, yaml_key};

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};

use crate::auth::{AuthPolicy, BUILT_IN_BUCKETS, DEFAULT_BUCKET};
use crate::ledger::{
    Allowance, Budget, MAX_USD, ResourcePolicy, UnknownUsage, micros_to_usd, usd_to_micros,
};
use crate::scheduler::{
    Adaptive, Limits, LimitsTable, MAX_WEIGHT, MemoryLimits, Mode, OverflowPolicy,
};
pub use crate::store::journal::SyncPolicy;

/// How long a draining authority waits for admitted tickets, unless told otherwise.
pub const DEFAULT_DRAIN_MS: u64 = 30_000;
const MAX_DRAIN_MS: u64 = 3_600_000;

/// Key prefix in Redis when the file names none.
pub const DEFAULT_REDIS_PREFIX: &str = "admission:";
/// Redis connections when the file names no pool_size. One multiplexed connection pipelines
/// every concurrent call, so Redis reads many scripts per read and answers them in one write;
/// measured with `scripts/bench --only redis --redis-pool N` on a 2-core machine, 1 connection
/// gave 0.35–0.37 × the in-memory cycle rate where 4 and 16 gave 0.30–0.33 (one Redis thread
/// gains nothing from more). More help only when one client thread cannot parse the replies.
pub const DEFAULT_REDIS_POOL: u32 = 1;

/// The address `serve` listens on when neither file nor flag names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

/// Largest accepted cap or queue bound: far above any real installation, low enough that a
/// typo (an extra zero or six) is caught instead of silently allowing unbounded memory.
const MAX_COUNT: u64 = 1_000_000;
const MAX_LEASE_MS: u64 = 3_600_000;
const MIN_LEASE_MS: u64 = 10;
const MAX_RETENTION_MS: u64 = 7 * 24 * 3_600_000;
/// Most ended tickets a host may be told to remember (about 1.5 GiB of memory).
const MAX_RETAINED: u64 = 10_000_000;
/// The longest `priority_aging`.
const MAX_PRIORITY_AGING_MS: u64 = 86_400_000;
/// The longest cooldown of an adaptive cap.
const MAX_COOLDOWN_MS: u64 = 3_600_000;
// Longest auth window or lockout (shared with declared buckets).
use crate::auth::MAX_AUTH_MS;
/// Largest auth.local_max_keys: about 2 GiB of buckets at most.
const MAX_AUTH_KEYS: u64 = 10_000_000;
/// Largest token budget or allowance: a trillion tokens.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
const MIN_RESERVATION_TTL_MS: u64 = 10;
const MAX_RESOURCE_MS: u64 = 30 * 24 * 3_600_000;

/// The resolved, validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    /// Serve on a non-loopback address without credentials.
    pub insecure: bool,
    pub limits: LimitsTable,
    /// memory.max_rss_mb and memory.soft_ratio as given (the ladder lives in `limits`).
    pub memory_max_rss_mb: u32,
    pub memory_soft_ratio: f64,
    /// The authority's own resident-memory ceiling in MiB; 0 = off.
    pub authority_max_rss_mb: u64,
    /// Auth buckets (the built-in ones unless overridden by name).
    pub auth: AuthPolicy,
    /// Per-run budgets, account allowances and reservation timing.
    pub resources: ResourcePolicy,
    /// Who may call; empty = open (loopback only, unless --insecure).
    pub credentials: Vec<crate::security::Credential>,
    /// TLS (and mTLS with a client CA); `None` = plaintext.
    pub tls: Option<TlsFiles>,
    pub grpc: GrpcLimits,
    /// The shared store; `None` = the embedded store (see `embedded`).
    pub redis: Option<RedisConfig>,
    /// The embedded store: in memory, or durable in a data dir.
    pub embedded: EmbeddedConfig,
    /// After SIGTERM, how long admitted tickets may keep running before the process exits.
    pub drain_grace_ms: u64,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None` = off.
    pub admin_listen: Option<SocketAddr>,
    /// Hosts with series of their own in `/metrics` (`metrics.max_hosts`); the rest are summed
    /// under `host_id="_other"`.
    pub metrics_max_hosts: usize,
    /// Each host's history (`history`): bucket width, buckets kept, hosts kept (0: none).
    pub history: crate::history::Shape,
    /// The rate limit service's domains and settings (`rate_limits`).
    pub rate_limits: RateLimitsConfig,
    /// The policies of the external processor (`http_admission`).
    pub http_admission: crate::http_admission::HttpAdmissionConfig,
}

/// `metrics.max_hosts` by default.
pub const DEFAULT_METRICS_MAX_HOSTS: usize = 1_000;

/// `store.redis`: several authority replicas share their state in one Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    pub url: String,
    /// Start of every key, so environments sharing one Redis never collide.
    pub prefix: String,
    /// Multiplexed connections kept open.
    pub pool_size: u32,
    /// `url` is a node of a Redis Cluster (the rest are found from it).
    pub cluster: bool,
    /// A decision is answered only once this many Redis replicas hold it (`WAIT`); 0: once
    /// the primary does.
    pub replicas_acked: u32,
    /// How long the replicas have to confirm a decision before its call answers
    /// `OUTCOME_UNKNOWN`.
    pub replication_timeout_ms: u64,
    /// `store.redis.sentinel`: the primary is the one these sentinels name (then `url` gives
    /// only the credentials, database and TLS).
    pub sentinel: Option<SentinelConfig>,
}

/// `store.redis.sentinel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The master set's name.
    pub master: String,
    /// The sentinels, `host:port` each.
    pub nodes: Vec<String>,
    /// The sentinels' own password.
    pub password: Option<String>,
}

/// `store.redis.replication_timeout` by default.
pub const DEFAULT_REPLICATION_TIMEOUT_MS: u64 = 1_000;
/// The most replicas `store.redis.replicas_acked` may ask for.
pub const MAX_REPLICAS_ACKED: u64 = 16;

/// `store.embedded`: where the embedded store keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// `None`: in memory only (the state ends with the process).
    pub data_dir: Option<PathBuf>,
    pub sync: SyncPolicy,
    pub sync_interval_ms: u64,
    /// A snapshot is taken once this much log was written since the last one (or as much as
    /// the last snapshot, if that is more).
    pub snapshot_after_bytes: u64,
}

/// `store.embedded.sync_interval` by default.
pub const DEFAULT_SYNC_INTERVAL_MS: u64 = 10;
/// The longest `store.embedded.sync_interval`: what a power loss may take at most.
pub const MAX_SYNC_INTERVAL_MS: u64 = 10_000;
/// Bounds of `store.embedded.snapshot_after`.
pub const MIN_SNAPSHOT_AFTER: u64 = 4 << 10;
pub const MAX_SNAPSHOT_AFTER: u64 = 1 << 30;

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            data_dir: None,
            sync: SyncPolicy::default(),
            sync_interval_ms: DEFAULT_SYNC_INTERVAL_MS,
            snapshot_after_bytes: crate::store::journal::SNAPSHOT_AFTER_BYTES,
        }
    }
}

/// Values given on the command line; each wins over the file. These are `serve`'s flags
/// (derived with clap), checked by the same rules as the file under their flag names.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// Address to listen on (default 127.0.0.1:50051; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Allow a non-loopback listen address without credentials.
    #[arg(long)]
    pub insecure: bool,
    /// Cap on admitted tickets per host (default 32; the file's scheduling.total wins over the
    /// default, this flag over both).
    #[arg(long, value_name = "N")]
    pub total: Option<u32>,
    /// Cap on admitted tickets per subject (default 4).
    #[arg(long, value_name = "N")]
    pub per_subject: Option<u32>,
    /// Cap on admitted tickets per account (default: none).
    #[arg(long, value_name = "N")]
    pub per_account: Option<u32>,
    /// Declared queue depth per host (default 0 = no queue: saturation answers BUSY).
    #[arg(long, value_name = "N")]
    pub queue_total: Option<u32>,
    /// Queue bound per subject (default 0 = none).
    #[arg(long, value_name = "N")]
    pub queue_per_subject: Option<u32>,
    /// reject | shed_oldest | queue (default reject).
    #[arg(long, value_name = "POLICY")]
    pub overflow_policy: Option<String>,
    /// Lease of an admitted ticket without Renew (default 30s).
    #[arg(long, value_name = "DURATION")]
    pub lease_ttl: Option<String>,
    /// Per-replica memory ceiling in MiB from reported rss_mb (default 0 = off).
    #[arg(long, value_name = "MIB")]
    pub max_rss_mb: Option<u32>,
    /// Share state with other replicas in this Redis (e.g. redis://127.0.0.1:6379/0).
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Keep the embedded store's state in this directory, so that a restart loses nothing
    /// (default: in memory only).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// After SIGTERM, how long admitted tickets may keep running before exit (default 30s).
    #[arg(long, value_name = "DURATION")]
    pub drain_grace: Option<String>,
    /// Serve /metrics (Prometheus), /healthz, /readyz and the operator console (/console) on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
}

/// Every problem found, one per line, each starting with its YAML path (or flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_char('\n')?;
            }
            f.write_str(e)?;
        }
        Ok(())
    }
}

/// Read and resolve the file at `path` (if any) with `overrides` on top.
///
/// Fails with every problem of the file and the flags, or with the read error.
pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigErrors> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", p.display())]))?,
        None => String::new(),
    };
    let base = path.and_then(Path::parent).map(Path::to_path_buf);
    parse_in(&text, overrides, base)
}

/// Resolve YAML text (empty = all defaults) with `overrides` on top.
///
/// Fails with every problem found, each naming its path.
pub fn parse(text: &str, overrides: &Overrides) -> Result<Config, ConfigErrors> {
    parse_in(text, overrides, None)
}

/// Limits an operator gives a host (SetLimits), checked by the file's rules: `block` is a
/// `scheduling` block as the file would write it, and every problem is named under `limits`
/// (`limits.queue.total: must be >= 0`). The memory ladder is not part of them: `memory` is
/// kept.
pub fn operator_limits(block: &Value, memory: MemoryLimits) -> Result<Limits, ConfigErrors> {
    let mut cx = Cx {
        errors: Vec::new(),
        base: None,
    };
    let patch = cx.scheduling(block, "limits");
    let limits = cx.limits(&patch, "limits", memory);
    if cx.errors.is_empty() {
        Ok(limits)
    } else {
        Err(ConfigErrors(cx.errors))
    }
}

/// As [`parse`], with relative file paths in the text (tls files, token files) taken relative
/// to `base` (the config file's directory) rather than the working directory.
fn parse_in(
    text: &str,
    overrides: &Overrides,
    base: Option<std::path::PathBuf>,
) -> Result<Config, ConfigErrors> {
    let root: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_norway::from_str(text)
            .map_err(|e| ConfigErrors(vec![format!("the file is not valid YAML: {e}")]))?
    };
    let mut cx = Cx {
        errors: Vec::new(),
        base,
    };
    let file = cx.file(&root);
    let config = cx.resolve(file, overrides);
    if cx.errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(cx.errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("30s"), Some(30_000));
        assert_eq!(parse_duration_ms("10m"), Some(600_000));
        assert_eq!(parse_duration_ms("24h"), Some(86_400_000));
        for bad in ["", "30", "s", "1.5s", "-1s", "3d", "1 h"] {
            assert_eq!(parse_duration_ms(bad), None, "{bad:?}");
        }
        assert_eq!(format_ms(90_000), "90s");
        assert_eq!(format_ms(3_600_000), "1h");
        assert_eq!(format_ms(250), "250ms");
        assert_eq!(format_ms(0), "0ms");
    }
}
