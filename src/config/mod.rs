//! Configuration: built-in defaults < YAML file < command-line flags.
//!
//! The file is read into a YAML value tree and walked by hand rather than deserialised with
//! serde's `deny_unknown_fields`, because serde stops at the first problem while operators want
//! every problem of a file in one pass, each with its path
//! (`scheduling.queue.total: must be >= 0`).

mod access;

pub use access::{GrpcLimits, TlsFiles};

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::Path;

use serde_norway::{Mapping, Value};

use crate::auth::{AuthPolicy, BUILT_IN_BUCKETS, DEFAULT_BUCKET};
use crate::ledger::{
    Allowance, Budget, MAX_USD, ResourcePolicy, UnknownUsage, micros_to_usd, usd_to_micros,
};
use crate::scheduler::{Limits, LimitsTable, MemoryLimits, OverflowPolicy};

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
/// Longest auth window or lockout.
const MAX_AUTH_MS: u64 = 7 * 24 * 3_600_000;
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
    /// The shared store; `None` = the embedded in-memory store.
    pub redis: Option<RedisConfig>,
    /// After SIGTERM, how long admitted tickets may keep running before the process exits.
    pub drain_grace_ms: u64,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None` = off.
    pub admin_listen: Option<SocketAddr>,
    /// Hosts with series of their own in `/metrics` (`metrics.max_hosts`); the rest are summed
    /// under `host_id="_other"`.
    pub metrics_max_hosts: usize,
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
}

/// Values given on the command line; each wins over the file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub insecure: bool,
    pub total: Option<u32>,
    pub per_subject: Option<u32>,
    pub per_account: Option<u32>,
    pub queue_total: Option<u32>,
    pub queue_per_subject: Option<u32>,
    pub overflow_policy: Option<String>,
    pub lease_ttl: Option<String>,
    pub max_rss_mb: Option<u32>,
    pub redis_url: Option<String>,
    pub drain_grace: Option<String>,
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

/// Everything the file said, before defaults and flags.
#[derive(Default)]
struct FileConfig {
    listen: Option<(String, String)>,
    scheduling: SchedPatch,
    hosts: BTreeMap<String, SchedPatch>,
    memory_max_rss_mb: Option<u32>,
    memory_soft_ratio: Option<f64>,
    authority_max_rss_mb: Option<u64>,
    auth: AuthPolicy,
    resources: ResourcePolicy,
    credentials: Vec<crate::security::Credential>,
    tls: Option<TlsFiles>,
    grpc: GrpcLimits,
    redis: Option<RedisConfig>,
    drain_grace_ms: Option<u64>,
    admin_listen: Option<String>,
    metrics_max_hosts: Option<usize>,
}

/// A scheduling block as written: every field optional, so host blocks override field by field.
#[derive(Clone, Default)]
struct SchedPatch {
    total: Option<u32>,
    per_subject: Option<u32>,
    per_account: Option<u32>,
    subjects: BTreeMap<String, u32>,
    accounts: BTreeMap<String, u32>,
    queue_total: Option<u32>,
    queue_per_subject: Option<u32>,
    queue_hard_total: Option<u32>,
    overflow: Option<OverflowPolicy>,
    lease_ttl_ms: Option<u64>,
    retention_ms: Option<u64>,
    max_retained: Option<u32>,
}

impl SchedPatch {
    /// `over` on top of `self`, field by field (maps merged key by key).
    fn merged(&self, over: &SchedPatch) -> SchedPatch {
        let mut subjects = self.subjects.clone();
        subjects.extend(over.subjects.iter().map(|(k, v)| (k.clone(), *v)));
        let mut accounts = self.accounts.clone();
        accounts.extend(over.accounts.iter().map(|(k, v)| (k.clone(), *v)));
        SchedPatch {
            total: over.total.or(self.total),
            per_subject: over.per_subject.or(self.per_subject),
            per_account: over.per_account.or(self.per_account),
            subjects,
            accounts,
            queue_total: over.queue_total.or(self.queue_total),
            queue_per_subject: over.queue_per_subject.or(self.queue_per_subject),
            queue_hard_total: over.queue_hard_total.or(self.queue_hard_total),
            overflow: over.overflow.or(self.overflow),
            lease_ttl_ms: over.lease_ttl_ms.or(self.lease_ttl_ms),
            retention_ms: over.retention_ms.or(self.retention_ms),
            max_retained: over.max_retained.or(self.max_retained),
        }
    }
}

struct Cx {
    errors: Vec<String>,
    /// The config file's directory: relative paths in the file are relative to it.
    base: Option<std::path::PathBuf>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

const SCHEDULING_KEYS: &[&str] = &[
    "total",
    "per_subject",
    "per_account",
    "subjects",
    "accounts",
    "queue",
    "overflow_policy",
    "lease_ttl",
    "retention",
    "max_retained",
    "max_concurrent_runs",
    "queue_depth",
    "max_concurrent_runs_per_scope",
];

impl Cx {
    fn err(&mut self, path: &str, msg: impl fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    /// The mapping at `path`, with unknown keys reported. `Null` (an empty section) is an
    /// empty mapping.
    fn mapping<'a>(&mut self, v: &'a Value, path: &str, known: &[&str]) -> Option<&'a Mapping> {
        static EMPTY: std::sync::OnceLock<Mapping> = std::sync::OnceLock::new();
        let m = match v {
            Value::Null => EMPTY.get_or_init(Mapping::new),
            Value::Mapping(m) => m,
            _ => {
                self.err(path, "must be a mapping of keys to values");
                return None;
            }
        };
        for k in m.keys() {
            match k.as_str() {
                Some(k) if known.contains(&k) => {}
                Some(k) => self.err(
                    &join(path, k),
                    format_args!("unknown key (known here: {})", known.join(", ")),
                ),
                None => self.err(path, "keys must be strings"),
            }
        }
        Some(m)
    }

    /// Entries of a map from names (ids) to values, with the names checked.
    fn named_entries<'a>(&mut self, v: &'a Value, path: &str) -> Vec<(String, &'a Value)> {
        let m = match v {
            Value::Null => return Vec::new(),
            Value::Mapping(m) => m,
            _ => {
                self.err(path, "must be a mapping of names to values");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (k, v) in m {
            match k.as_str() {
                Some(name) => match check_id(name) {
                    Ok(()) => out.push((name.to_string(), v)),
                    Err(rule) => self.err(&format!("{path}.{name:?}"), format_args!("name {rule}")),
                },
                None => self.err(path, "names must be strings"),
            }
        }
        out
    }

    fn count(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        let n = match v {
            Value::Number(n) => n,
            _ => {
                self.err(
                    path,
                    format_args!("must be a whole number, got {}", kind(v)),
                );
                return None;
            }
        };
        if let Some(u) = n.as_u64() {
            if u < min {
                self.err(path, format_args!("must be >= {min}"));
                None
            } else if u > max {
                self.err(path, format_args!("must be <= {max}"));
                None
            } else {
                Some(u)
            }
        } else if n.as_i64().is_some() {
            self.err(path, format_args!("must be >= {min}"));
            None
        } else {
            self.err(path, "must be a whole number");
            None
        }
    }

    fn count32(&mut self, v: &Value, path: &str, min: u64) -> Option<u32> {
        self.count(v, path, min, MAX_COUNT).map(|n| n as u32)
    }

    fn duration(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        let Some(s) = v.as_str() else {
            self.err(
                path,
                format_args!(
                    "must be a duration like 500ms, 30s, 10m or 1h, got {}",
                    kind(v)
                ),
            );
            return None;
        };
        self.duration_str(s, path, min, max)
    }

    fn duration_str(&mut self, s: &str, path: &str, min: u64, max: u64) -> Option<u64> {
        match parse_duration_ms(s) {
            None => {
                self.err(
                    path,
                    format_args!("must be a duration like 500ms, 30s, 10m or 1h, got {s:?}"),
                );
                None
            }
            Some(ms) if ms < min => {
                self.err(path, format_args!("must be at least {}", format_ms(min)));
                None
            }
            Some(ms) if ms > max => {
                self.err(path, format_args!("must be at most {}", format_ms(max)));
                None
            }
            Some(ms) => Some(ms),
        }
    }

    fn policy(&mut self, v: &Value, path: &str) -> Option<OverflowPolicy> {
        let s = v.as_str();
        match s.and_then(OverflowPolicy::parse) {
            Some(p) => Some(p),
            None => {
                let got = s.map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"));
                self.err(
                    path,
                    format_args!(
                        "must be one of {}, got {got}",
                        OverflowPolicy::NAMES.join(", ")
                    ),
                );
                None
            }
        }
    }

    fn file(&mut self, root: &Value) -> FileConfig {
        let mut f = FileConfig::default();
        let Some(m) = self.mapping(
            root,
            "",
            &[
                "listen",
                "scheduling",
                "hosts",
                "memory",
                "authority",
                "auth",
                "resources",
                "allowances",
                "credentials",
                "tls",
                "grpc",
                "store",
                "drain_grace",
                "admin_listen",
                "metrics",
                "max_concurrent_runs",
                "queue_depth",
                "overflow_policy",
                "max_concurrent_runs_per_scope",
                "max_rss_mb",
            ],
        ) else {
            return f;
        };
        if let Some(v) = m.get("listen") {
            match v.as_str() {
                Some(s) => f.listen = Some((s.to_string(), "listen".into())),
                None => self.err("listen", "must be an address like 127.0.0.1:50051"),
            }
        }
        if let Some(v) = m.get("scheduling") {
            f.scheduling = self.scheduling(v, "scheduling");
        }
        // gateway.yaml names at the top level, as aliases of the scheduling keys.
        let top = self.aliases(m, "", &f.scheduling, "scheduling");
        f.scheduling = f.scheduling.merged(&top);
        if let Some(v) = m.get("hosts") {
            for (host, hv) in self.named_entries(v, "hosts") {
                let path = join("hosts", &host);
                if let Some(hm) = self.mapping(hv, &path, &["scheduling"]) {
                    let patch = match hm.get("scheduling") {
                        Some(sv) => self.scheduling(sv, &join(&path, "scheduling")),
                        None => SchedPatch::default(),
                    };
                    f.hosts.insert(host, patch);
                }
            }
        }
        if let Some(v) = m.get("memory")
            && let Some(mm) = self.mapping(v, "memory", &["max_rss_mb", "soft_ratio"])
        {
            if let Some(v) = mm.get("max_rss_mb") {
                f.memory_max_rss_mb = self
                    .count(v, "memory.max_rss_mb", 0, 100_000_000)
                    .map(|n| n as u32);
            }
            if let Some(v) = mm.get("soft_ratio") {
                match v.as_f64() {
                    Some(r) if r > 0.0 && r <= 1.0 => f.memory_soft_ratio = Some(r),
                    Some(_) => self.err("memory.soft_ratio", "must be > 0 and <= 1"),
                    None => self.err(
                        "memory.soft_ratio",
                        format_args!("must be a number, got {}", kind(v)),
                    ),
                }
            }
        }
        if let Some(v) = m.get("max_rss_mb") {
            if f.memory_max_rss_mb.is_some() {
                self.err(
                    "max_rss_mb",
                    "conflicts with memory.max_rss_mb; give one of them",
                );
            } else {
                f.memory_max_rss_mb = self
                    .count(v, "max_rss_mb", 0, 100_000_000)
                    .map(|n| n as u32);
            }
        }
        if let Some(v) = m.get("authority")
            && let Some(am) = self.mapping(v, "authority", &["max_rss_mb"])
            && let Some(v) = am.get("max_rss_mb")
        {
            f.authority_max_rss_mb = self.count(v, "authority.max_rss_mb", 0, 100_000_000);
        }
        f.auth = match m.get("auth") {
            Some(v) => self.auth(v),
            None => AuthPolicy::default(),
        };
        if let Some(v) = m.get("resources") {
            self.resources(v, &mut f.resources);
        }
        if let Some(v) = m.get("tls") {
            f.tls = self.tls(v);
        }
        if let Some(v) = m.get("admin_listen") {
            match v.as_str() {
                Some(a) => f.admin_listen = Some(a.to_string()),
                None => self.err("admin_listen", "must be an address like 127.0.0.1:9464"),
            }
        }
        if let Some(v) = m.get("drain_grace") {
            f.drain_grace_ms = self.duration(v, "drain_grace", 0, MAX_DRAIN_MS);
        }
        if let Some(v) = m.get("store")
            && let Some(sm) = self.mapping(v, "store", &["redis"])
            && let Some(rv) = sm.get("redis")
        {
            f.redis = self.redis(rv);
        }
        if let Some(v) = m.get("credentials") {
            let mtls = f.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
            f.credentials = self.credentials(v, mtls);
        }
        if let Some(v) = m.get("grpc") {
            f.grpc = self.grpc(v);
        }
        if let Some(v) = m.get("metrics")
            && let Some(mm) = self.mapping(v, "metrics", &["max_hosts"])
            && let Some(v) = mm.get("max_hosts")
        {
            f.metrics_max_hosts = self
                .count(v, "metrics.max_hosts", 1, 1_000_000)
                .map(|n| n as usize);
        }
        if let Some(v) = m.get("allowances") {
            for (account, av) in self.named_entries(v, "allowances") {
                let path = format!("allowances.{}", yaml_key(&account));
                if let Some(a) = self.allowance(av, &path) {
                    f.resources.allowances.insert(account, a);
                }
            }
        }
        f
    }

    /// `store.redis`.
    fn redis(&mut self, v: &Value) -> Option<RedisConfig> {
        let m = self.mapping(v, "store.redis", &["url", "prefix", "pool_size", "cluster"])?;
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
        Some(RedisConfig {
            url: url?,
            prefix: prefix?,
            pool_size: pool_size?,
            cluster: cluster?,
        })
    }

    /// A Redis URL, checked for its scheme.
    fn redis_url(&mut self, url: &str, path: &str) -> Option<String> {
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            Some(url.to_string())
        } else {
            // Not echoed: a URL may carry a password.
            self.err(path, "must be a redis:// or rediss:// URL");
            None
        }
    }

    /// The `resources` section into `p`.
    fn resources(&mut self, v: &Value, p: &mut ResourcePolicy) {
        let Some(m) = self.mapping(
            v,
            "resources",
            &[
                "default",
                "subjects",
                "accounts",
                "reservation_ttl",
                "run_retention",
            ],
        ) else {
            return;
        };
        if let Some(v) = m.get("default") {
            p.default = self.budget(v, "resources.default");
        }
        for (key, target) in [("subjects", &mut p.subjects), ("accounts", &mut p.accounts)] {
            if let Some(v) = m.get(key) {
                let mpath = join("resources", key);
                for (name, bv) in self.named_entries(v, &mpath) {
                    let path = format!("{mpath}.{}", yaml_key(&name));
                    if let Some(b) = self.budget(bv, &path) {
                        target.insert(name, b);
                    }
                }
            }
        }
        if let Some(v) = m.get("reservation_ttl")
            && let Some(ms) = self.duration(
                v,
                "resources.reservation_ttl",
                MIN_RESERVATION_TTL_MS,
                MAX_RESOURCE_MS,
            )
        {
            p.reservation_ttl_ms = ms;
        }
        if let Some(v) = m.get("run_retention")
            && let Some(ms) = self.duration(v, "resources.run_retention", 1_000, MAX_RESOURCE_MS)
        {
            p.run_retention_ms = ms;
        }
    }

    /// A per-run budget block.
    fn budget(&mut self, v: &Value, path: &str) -> Option<Budget> {
        let m = self.mapping(v, path, &["max_tokens", "max_cost_usd", "unknown_usage"])?;
        let mut b = Budget::default();
        let mut ok = true;
        if let Some(v) = m.get("max_tokens") {
            b.max_tokens = self.count(v, &join(path, "max_tokens"), 0, MAX_TOKENS);
            ok &= b.max_tokens.is_some();
        }
        if let Some(v) = m.get("max_cost_usd") {
            b.max_cost = self.usd(v, &join(path, "max_cost_usd"));
            ok &= b.max_cost.is_some();
        }
        if let Some(v) = m.get("unknown_usage") {
            let s = v.as_str();
            match s.and_then(UnknownUsage::parse) {
                Some(u) => b.unknown_usage = u,
                None => {
                    let got = s.map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"));
                    self.err(
                        &join(path, "unknown_usage"),
                        format_args!(
                            "must be one of {}, got {got}",
                            UnknownUsage::NAMES.join(", ")
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(b)
    }

    /// An allowance block.
    fn allowance(&mut self, v: &Value, path: &str) -> Option<Allowance> {
        let m = self.mapping(v, path, &["tokens", "cost_usd", "window"])?;
        let mut ok = true;
        let tokens = m.get("tokens").and_then(|v| {
            let t = self.count(v, &join(path, "tokens"), 0, MAX_TOKENS);
            ok &= t.is_some();
            t
        });
        let cost = m.get("cost_usd").and_then(|v| {
            let c = self.usd(v, &join(path, "cost_usd"));
            ok &= c.is_some();
            c
        });
        if !m.contains_key("tokens") && !m.contains_key("cost_usd") {
            self.err(path, "give tokens, cost_usd or both");
            ok = false;
        }
        let window = match m.get("window") {
            Some(v) => self.duration(v, &join(path, "window"), 1_000, MAX_RESOURCE_MS),
            None => {
                self.err(path, "window is required (e.g. window: 24h)");
                None
            }
        };
        let window_ms = window?;
        ok.then_some(Allowance {
            tokens,
            cost,
            window_ms,
        })
    }

    /// A dollar amount (whole or fractional), 0..MAX_USD.
    fn usd(&mut self, v: &Value, path: &str) -> Option<u64> {
        let Some(f) = v.as_f64() else {
            self.err(
                path,
                format_args!("must be a number of dollars, got {}", kind(v)),
            );
            return None;
        };
        let m = usd_to_micros(f);
        if m.is_none() {
            self.err(
                path,
                format_args!("must be a finite number of dollars, 0..{MAX_USD}"),
            );
        }
        m
    }

    /// The `auth` section: the built-in buckets, with the file's buckets over them by name.
    fn auth(&mut self, v: &Value) -> AuthPolicy {
        let mut policy = AuthPolicy::default();
        let Some(m) = self.mapping(v, "auth", &["local_max_keys", "buckets"]) else {
            return policy;
        };
        if let Some(v) = m.get("local_max_keys")
            && let Some(n) = self.count(v, "auth.local_max_keys", 1, MAX_AUTH_KEYS)
        {
            policy.local_max_keys = n as usize;
        }
        let Some(v) = m.get("buckets") else {
            return policy;
        };
        for (name, bv) in self.named_entries(v, "auth.buckets") {
            let path = format!("auth.buckets.{}", yaml_key(&name));
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                || name.len() > 64
            {
                self.err(
                    &path,
                    "endpoint names are 1..64 letters, digits, '_', '-' or '.'",
                );
                continue;
            }
            let Some(bm) = self.mapping(bv, &path, &["max_attempts", "window", "lockout"]) else {
                continue;
            };
            // Fields left out keep the built-in bucket's values, or DEFAULT_BUCKET's.
            let mut rule = BUILT_IN_BUCKETS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(DEFAULT_BUCKET, |(_, r)| *r);
            let mut ok = true;
            if let Some(v) = bm.get("max_attempts") {
                match self.count(v, &join(&path, "max_attempts"), 1, MAX_COUNT) {
                    Some(n) => rule.max_attempts = n as u32,
                    None => ok = false,
                }
            }
            if let Some(v) = bm.get("window") {
                match self.duration(v, &join(&path, "window"), 1, MAX_AUTH_MS) {
                    Some(ms) => rule.window_ms = ms,
                    None => ok = false,
                }
            }
            if let Some(v) = bm.get("lockout") {
                match self.duration(v, &join(&path, "lockout"), 0, MAX_AUTH_MS) {
                    Some(ms) => rule.lockout_ms = ms,
                    None => ok = false,
                }
            }
            if ok {
                policy.buckets.insert(name, rule);
            }
        }
        policy
    }

    /// The gateway.yaml aliases found in `m`, checked against what `canonical` already sets.
    fn aliases(
        &mut self,
        m: &Mapping,
        path: &str,
        canonical: &SchedPatch,
        canonical_path: &str,
    ) -> SchedPatch {
        let mut p = SchedPatch::default();
        let pairs: [(&str, &str, bool); 4] = [
            ("max_concurrent_runs", "total", canonical.total.is_some()),
            (
                "queue_depth",
                "queue.total",
                canonical.queue_total.is_some(),
            ),
            (
                "max_concurrent_runs_per_scope",
                "per_subject",
                canonical.per_subject.is_some(),
            ),
            (
                "overflow_policy",
                "overflow_policy",
                canonical.overflow.is_some(),
            ),
        ];
        for (alias, target, taken) in pairs {
            let Some(v) = m.get(alias) else { continue };
            let alias_path = join(path, alias);
            if alias == target && path == canonical_path {
                continue; // the canonical key itself, read by `scheduling`
            }
            if taken {
                self.err(
                    &alias_path,
                    format_args!(
                        "is an alias of {}; give one of them",
                        join(canonical_path, target)
                    ),
                );
                continue;
            }
            match alias {
                "max_concurrent_runs" => p.total = self.count32(v, &alias_path, 1),
                "queue_depth" => p.queue_total = self.count32(v, &alias_path, 0),
                "max_concurrent_runs_per_scope" => p.per_subject = self.count32(v, &alias_path, 1),
                _ => p.overflow = self.policy(v, &alias_path),
            }
        }
        p
    }

    fn scheduling(&mut self, v: &Value, path: &str) -> SchedPatch {
        let mut p = SchedPatch::default();
        let Some(m) = self.mapping(v, path, SCHEDULING_KEYS) else {
            return p;
        };
        if let Some(v) = m.get("total") {
            p.total = self.count32(v, &join(path, "total"), 1);
        }
        if let Some(v) = m.get("per_subject") {
            p.per_subject = self.count32(v, &join(path, "per_subject"), 1);
        }
        if let Some(v) = m.get("per_account") {
            p.per_account = self.count32(v, &join(path, "per_account"), 1);
        }
        for (key, target) in [("subjects", &mut p.subjects), ("accounts", &mut p.accounts)] {
            if let Some(v) = m.get(key) {
                let mpath = join(path, key);
                for (name, cv) in self.named_entries(v, &mpath) {
                    if let Some(cap) = self.count32(cv, &join(&mpath, &name), 1) {
                        target.insert(name, cap);
                    }
                }
            }
        }
        if let Some(v) = m.get("queue") {
            let qpath = join(path, "queue");
            if let Some(q) = self.mapping(v, &qpath, &["total", "per_subject", "hard_total"]) {
                if let Some(v) = q.get("total") {
                    p.queue_total = self.count32(v, &join(&qpath, "total"), 0);
                }
                if let Some(v) = q.get("per_subject") {
                    p.queue_per_subject = self.count32(v, &join(&qpath, "per_subject"), 0);
                }
                if let Some(v) = q.get("hard_total") {
                    p.queue_hard_total = self
                        .count(v, &join(&qpath, "hard_total"), 0, 4 * MAX_COUNT)
                        .map(|n| n as u32);
                }
            }
        }
        if let Some(v) = m.get("overflow_policy") {
            p.overflow = self.policy(v, &join(path, "overflow_policy"));
        }
        if let Some(v) = m.get("lease_ttl") {
            p.lease_ttl_ms = self.duration(v, &join(path, "lease_ttl"), MIN_LEASE_MS, MAX_LEASE_MS);
        }
        if let Some(v) = m.get("retention") {
            p.retention_ms = self.duration(v, &join(path, "retention"), 0, MAX_RETENTION_MS);
        }
        if let Some(v) = m.get("max_retained") {
            p.max_retained = self
                .count(v, &join(path, "max_retained"), 0, MAX_RETAINED)
                .map(|n| n as u32);
        }
        let aliases = self.aliases(m, path, &p, path);
        p.merged(&aliases)
    }

    /// The command-line flags as a patch, each checked by the file's rules under its flag name.
    fn flags(&mut self, o: &Overrides) -> SchedPatch {
        let mut p = SchedPatch::default();
        let count = |cx: &mut Cx, v: Option<u32>, flag: &str, min: u64| {
            v.and_then(|n| cx.count32(&Value::from(n), flag, min))
        };
        p.total = count(self, o.total, "--total", 1);
        p.per_subject = count(self, o.per_subject, "--per-subject", 1);
        p.per_account = count(self, o.per_account, "--per-account", 1);
        p.queue_total = count(self, o.queue_total, "--queue-total", 0);
        p.queue_per_subject = count(self, o.queue_per_subject, "--queue-per-subject", 0);
        if let Some(s) = &o.overflow_policy {
            p.overflow = self.policy(&Value::from(s.as_str()), "--overflow-policy");
        }
        if let Some(s) = &o.lease_ttl {
            p.lease_ttl_ms = self.duration_str(s, "--lease-ttl", MIN_LEASE_MS, MAX_LEASE_MS);
        }
        p
    }

    fn resolve(&mut self, file: FileConfig, o: &Overrides) -> Config {
        let (listen_text, listen_path) = match (&o.listen, &file.listen) {
            (Some(s), _) => (s.clone(), "--listen".to_string()),
            (None, Some((s, path))) => (s.clone(), path.clone()),
            (None, None) => (DEFAULT_LISTEN.to_string(), "listen".to_string()),
        };
        let listen = match listen_text.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                self.err(
                    &listen_path,
                    format_args!("must be an address like 127.0.0.1:50051, got {listen_text:?}"),
                );
                DEFAULT_LISTEN.parse().expect("valid default")
            }
        };
        let memory_max_rss_mb = o.max_rss_mb.or(file.memory_max_rss_mb).unwrap_or(0);
        let memory_soft_ratio = file.memory_soft_ratio.unwrap_or(0.9);
        let memory = MemoryLimits::from_ratio(memory_max_rss_mb, memory_soft_ratio);

        let base = file.scheduling.merged(&self.flags(o));
        let default = self.limits(&base, "scheduling", memory);
        let mut hosts = HashMap::new();
        for (host, patch) in &file.hosts {
            let merged = base.merged(patch);
            let path = format!("hosts.{host}.scheduling");
            hosts.insert(host.clone(), self.limits(&merged, &path, memory));
        }
        Config {
            listen,
            insecure: o.insecure,
            limits: LimitsTable { default, hosts },
            memory_max_rss_mb,
            memory_soft_ratio,
            authority_max_rss_mb: file.authority_max_rss_mb.unwrap_or(0),
            auth: file.auth,
            resources: file.resources,
            credentials: file.credentials,
            tls: file.tls,
            grpc: file.grpc,
            metrics_max_hosts: file.metrics_max_hosts.unwrap_or(DEFAULT_METRICS_MAX_HOSTS),
            admin_listen: {
                let (text, path) = match (&o.admin_listen, &file.admin_listen) {
                    (Some(a), _) => (Some(a.clone()), "--admin-listen"),
                    (None, Some(a)) => (Some(a.clone()), "admin_listen"),
                    (None, None) => (None, ""),
                };
                text.and_then(|t| match t.parse::<SocketAddr>() {
                    Ok(a) => Some(a),
                    Err(_) => {
                        self.err(
                            path,
                            format_args!("must be an address like 127.0.0.1:9464, got {t:?}"),
                        );
                        None
                    }
                })
            },
            drain_grace_ms: match &o.drain_grace {
                Some(d) => self
                    .duration_str(d, "--drain-grace", 0, MAX_DRAIN_MS)
                    .unwrap_or(DEFAULT_DRAIN_MS),
                None => file.drain_grace_ms.unwrap_or(DEFAULT_DRAIN_MS),
            },
            redis: match &o.redis_url {
                Some(url) => self.redis_url(url, "--redis-url").map(|url| RedisConfig {
                    url,
                    ..file.redis.clone().unwrap_or(RedisConfig {
                        url: String::new(),
                        prefix: DEFAULT_REDIS_PREFIX.to_string(),
                        pool_size: DEFAULT_REDIS_POOL,
                        cluster: false,
                    })
                }),
                None => file.redis,
            },
        }
    }

    /// Defaults under a patch, with the rules that tie fields together.
    fn limits(&mut self, p: &SchedPatch, path: &str, memory: MemoryLimits) -> Limits {
        let d = Limits::default();
        let queue_total = p.queue_total.unwrap_or(d.queue_total);
        let queue_hard_total = p.queue_hard_total.unwrap_or(queue_total.saturating_mul(4));
        if queue_hard_total < queue_total {
            self.err(
                &format!("{path}.queue.hard_total"),
                format_args!("must be >= queue.total ({queue_total})"),
            );
        }
        Limits {
            total: p.total.unwrap_or(d.total),
            per_subject: p.per_subject.unwrap_or(d.per_subject),
            per_account: p.per_account,
            subjects: p.subjects.clone().into_iter().collect(),
            accounts: p.accounts.clone().into_iter().collect(),
            queue_total,
            queue_per_subject: p.queue_per_subject.unwrap_or(d.queue_per_subject),
            queue_hard_total,
            overflow: p.overflow.unwrap_or(d.overflow),
            lease_ttl_ms: p.lease_ttl_ms.unwrap_or(d.lease_ttl_ms),
            retention_ms: p.retention_ms.unwrap_or(d.retention_ms),
            max_retained: p.max_retained.unwrap_or(d.max_retained),
            memory,
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// `500ms`, `30s`, `10m`, `1h`, `24h` → milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// Milliseconds → the shortest exact duration text.
pub fn format_ms(ms: u64) -> String {
    for (unit, factor) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// The id rule of the whole contract: 1..128 bytes of printable ASCII.
pub fn check_id(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        Err("must not be empty")
    } else if s.len() > 128 {
        Err("must be at most 128 bytes")
    } else if !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Err("must be printable ASCII")
    } else {
        Ok(())
    }
}

impl Config {
    /// Refuse to serve without authentication on an address other hosts can reach, unless
    /// `--insecure`.
    ///
    /// Fails for a non-loopback `listen` with no credentials configured and no `--insecure`.
    ///
    /// The admin port follows the same rule: `/metrics` names every host and its load, so a
    /// non-loopback `admin_listen` needs credentials configured (which say this is a deployment
    /// that thought about exposure) or `--insecure`. The admin port itself takes no
    /// credentials: keep it on a network only your scrapers reach.
    pub fn check_exposure(&self) -> Result<(), String> {
        let open = self.insecure || !self.credentials.is_empty();
        if !open && !self.listen.ip().is_loopback() {
            return Err(format!(
                "listen: {} is not a loopback address and no credentials are configured; \
                 pass --insecure to serve it without authentication",
                self.listen
            ));
        }
        if let Some(admin) = self.admin_listen
            && !open
            && !admin.ip().is_loopback()
        {
            return Err(format!(
                "admin_listen: {admin} is not a loopback address and no credentials are \
                 configured; /metrics would tell anyone who can reach it every host's load: \
                 pass --insecure to serve it anyway"
            ));
        }
        Ok(())
    }

    /// The resolved configuration as YAML, for `check-config`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "listen: {}", self.listen);
        let _ = writeln!(out, "drain_grace: {}", format_ms(self.drain_grace_ms));
        match self.admin_listen {
            Some(a) => {
                let _ = writeln!(out, "admin_listen: {a}");
            }
            None => {
                let _ = writeln!(out, "admin_listen: null   # no /metrics");
            }
        }
        let _ = writeln!(out, "metrics: {{max_hosts: {}}}", self.metrics_max_hosts);
        let _ = writeln!(out, "scheduling:");
        render_limits(&mut out, &self.limits.default, "  ");
        if !self.limits.hosts.is_empty() {
            let _ = writeln!(out, "hosts:");
            let hosts: BTreeMap<_, _> = self.limits.hosts.iter().collect();
            for (host, limits) in hosts {
                let _ = writeln!(out, "  {}:\n    scheduling:", yaml_key(host));
                render_limits(&mut out, limits, "      ");
            }
        }
        let _ = writeln!(
            out,
            "memory:\n  max_rss_mb: {}\n  soft_ratio: {}",
            self.memory_max_rss_mb, self.memory_soft_ratio
        );
        let _ = writeln!(
            out,
            "authority:\n  max_rss_mb: {}",
            self.authority_max_rss_mb
        );
        render_resources(&mut out, &self.resources);
        access::render(&mut out, self);
        let _ = writeln!(
            out,
            "auth:\n  local_max_keys: {}\n  buckets:",
            self.auth.local_max_keys
        );
        for (name, r) in &self.auth.buckets {
            let _ = writeln!(
                out,
                "    {}: {{max_attempts: {}, window: {}, lockout: {}}}",
                yaml_key(name),
                r.max_attempts,
                format_ms(r.window_ms),
                format_ms(r.lockout_ms)
            );
        }
        out
    }
}

fn yaml_key(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

fn render_limits(out: &mut String, l: &Limits, ind: &str) {
    let _ = writeln!(out, "{ind}total: {}", l.total);
    let _ = writeln!(out, "{ind}per_subject: {}", l.per_subject);
    match l.per_account {
        Some(n) => {
            let _ = writeln!(out, "{ind}per_account: {n}");
        }
        None => {
            let _ = writeln!(out, "{ind}per_account: null   # no per-account cap");
        }
    }
    for (key, map) in [("subjects", &l.subjects), ("accounts", &l.accounts)] {
        let sorted: BTreeMap<_, _> = map.iter().collect();
        let body: Vec<String> = sorted
            .iter()
            .map(|(k, v)| format!("{}: {v}", yaml_key(k)))
            .collect();
        let _ = writeln!(out, "{ind}{key}: {{{}}}", body.join(", "));
    }
    let _ = writeln!(
        out,
        "{ind}queue: {{total: {}, per_subject: {}, hard_total: {}}}",
        l.queue_total, l.queue_per_subject, l.queue_hard_total
    );
    let _ = writeln!(out, "{ind}overflow_policy: {}", l.overflow.name());
    let _ = writeln!(out, "{ind}lease_ttl: {}", format_ms(l.lease_ttl_ms));
    let _ = writeln!(out, "{ind}retention: {}", format_ms(l.retention_ms));
    let _ = writeln!(out, "{ind}max_retained: {}", l.max_retained);
}

fn render_resources(out: &mut String, r: &ResourcePolicy) {
    let budget = |b: &Budget| {
        let mut parts = Vec::new();
        if let Some(t) = b.max_tokens {
            parts.push(format!("max_tokens: {t}"));
        }
        if let Some(c) = b.max_cost {
            parts.push(format!("max_cost_usd: {}", micros_to_usd(c)));
        }
        parts.push(format!("unknown_usage: {}", b.unknown_usage.name()));
        format!("{{{}}}", parts.join(", "))
    };
    let _ = writeln!(out, "resources:");
    match &r.default {
        Some(b) => {
            let _ = writeln!(out, "  default: {}", budget(b));
        }
        None => {
            let _ = writeln!(out, "  default: null   # no budget for every run");
        }
    }
    for (key, map) in [("subjects", &r.subjects), ("accounts", &r.accounts)] {
        let sorted: BTreeMap<_, _> = map.iter().collect();
        if sorted.is_empty() {
            let _ = writeln!(out, "  {key}: {{}}");
            continue;
        }
        let _ = writeln!(out, "  {key}:");
        for (name, b) in sorted {
            let _ = writeln!(out, "    {}: {}", yaml_key(name), budget(b));
        }
    }
    let _ = writeln!(
        out,
        "  reservation_ttl: {}\n  run_retention: {}",
        format_ms(r.reservation_ttl_ms),
        format_ms(r.run_retention_ms)
    );
    let sorted: BTreeMap<_, _> = r.allowances.iter().collect();
    if sorted.is_empty() {
        let _ = writeln!(out, "allowances: {{}}");
        return;
    }
    let _ = writeln!(out, "allowances:");
    for (account, a) in sorted {
        let mut parts = Vec::new();
        if let Some(t) = a.tokens {
            parts.push(format!("tokens: {t}"));
        }
        if let Some(c) = a.cost {
            parts.push(format!("cost_usd: {}", micros_to_usd(c)));
        }
        parts.push(format!("window: {}", format_ms(a.window_ms)));
        let _ = writeln!(out, "  {}: {{{}}}", yaml_key(account), parts.join(", "));
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
