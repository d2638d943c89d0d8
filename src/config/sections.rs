//! The sections of the file: each read into what it configures, defaults and flags not yet
//! applied (that is [`super::resolve`]).

use super::walker::{Cx, given, join, kind};
use super::*;

/// Everything the file said, before defaults and flags.
#[derive(Default)]
pub(super) struct FileConfig {
    pub(super) listen: Option<(String, String)>,
    pub(super) scheduling: SchedPatch,
    pub(super) hosts: BTreeMap<String, SchedPatch>,
    pub(super) memory_max_rss_mb: Option<u32>,
    pub(super) memory_soft_ratio: Option<f64>,
    pub(super) authority_max_rss_mb: Option<u64>,
    pub(super) auth: AuthPolicy,
    pub(super) resources: ResourcePolicy,
    pub(super) credentials: Vec<crate::security::Credential>,
    pub(super) tls: Option<TlsFiles>,
    pub(super) grpc: GrpcLimits,
    pub(super) redis: Option<RedisConfig>,
    pub(super) embedded: EmbeddedConfig,
    pub(super) drain_grace_ms: Option<u64>,
    pub(super) admin_listen: Option<String>,
    pub(super) metrics_max_hosts: Option<usize>,
    pub(super) history: Option<crate::history::Shape>,
    pub(super) rate_limits: RateLimitsConfig,
    pub(super) http_admission: crate::http_admission::HttpAdmissionConfig,
}

/// A scheduling block as written: every field optional, so host blocks override field by field.
#[derive(Clone, Default)]
pub(super) struct SchedPatch {
    pub(super) total: Option<u32>,
    pub(super) per_subject: Option<u32>,
    pub(super) per_account: Option<u32>,
    pub(super) subjects: BTreeMap<String, u32>,
    pub(super) accounts: BTreeMap<String, u32>,
    pub(super) queue_total: Option<u32>,
    pub(super) queue_per_subject: Option<u32>,
    pub(super) queue_hard_total: Option<u32>,
    pub(super) overflow: Option<OverflowPolicy>,
    pub(super) lease_ttl_ms: Option<u64>,
    pub(super) retention_ms: Option<u64>,
    pub(super) max_retained: Option<u32>,
    pub(super) weights: BTreeMap<String, u32>,
    pub(super) priority_aging_ms: Option<u64>,
    pub(super) mode: Option<Mode>,
    pub(super) adaptive: BTreeMap<String, Adaptive>,
    pub(super) adaptive_default: Option<Adaptive>,
}

impl SchedPatch {
    /// `over` on top of `self`, field by field (maps merged key by key).
    pub(super) fn merged(&self, over: &SchedPatch) -> SchedPatch {
        let mut subjects = self.subjects.clone();
        subjects.extend(over.subjects.iter().map(|(k, v)| (k.clone(), *v)));
        let mut accounts = self.accounts.clone();
        accounts.extend(over.accounts.iter().map(|(k, v)| (k.clone(), *v)));
        let mut weights = self.weights.clone();
        weights.extend(over.weights.iter().map(|(k, v)| (k.clone(), *v)));
        // An account named in the block on top is fixed or adaptive as that block says.
        let mut adaptive = self.adaptive.clone();
        for name in over.accounts.keys() {
            adaptive.remove(name);
        }
        adaptive.extend(over.adaptive.iter().map(|(k, v)| (k.clone(), *v)));
        for name in over.adaptive.keys() {
            accounts.remove(name);
        }
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
            weights,
            priority_aging_ms: over.priority_aging_ms.or(self.priority_aging_ms),
            mode: over.mode.or(self.mode),
            adaptive,
            adaptive_default: over.adaptive_default.or(self.adaptive_default),
        }
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
    "priority_aging",
    "mode",
    "adaptive",
    "max_concurrent_runs",
    "queue_depth",
    "max_concurrent_runs_per_scope",
];

impl Cx {
    pub(super) fn file(&mut self, root: &Value) -> FileConfig {
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
                "history",
                "max_concurrent_runs",
                "queue_depth",
                "overflow_policy",
                "max_concurrent_runs_per_scope",
                "max_rss_mb",
                "rate_limits",
                "http_admission",
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
        if let Some(v) = given(m, "tls") {
            f.tls = self.tls(v);
        }
        if let Some(v) = given(m, "admin_listen") {
            match v.as_str() {
                Some(a) => f.admin_listen = Some(a.to_string()),
                None => self.err("admin_listen", "must be an address like 127.0.0.1:9464"),
            }
        }
        if let Some(v) = m.get("drain_grace") {
            f.drain_grace_ms = self.duration(v, "drain_grace", 0, MAX_DRAIN_MS);
        }
        if let Some(v) = m.get("store")
            && let Some(sm) = self.mapping(v, "store", &["redis", "embedded"])
        {
            if let Some(rv) = given(sm, "redis") {
                f.redis = self.redis(rv);
            }
            if let Some(ev) = given(sm, "embedded") {
                f.embedded = self.embedded(ev);
                if f.embedded.data_dir.is_some() && given(sm, "redis").is_some() {
                    self.err(
                        "store.embedded.data_dir",
                        "has no effect with store.redis (Redis keeps the state): remove one",
                    );
                }
            }
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
        if let Some(v) = m.get("history") {
            f.history = self.history(v);
        }
        if let Some(v) = m.get("rate_limits") {
            f.rate_limits = self.rate_limits(v);
        }
        if let Some(v) = m.get("http_admission") {
            f.http_admission = self.http_admission(v);
        }
        // A credential may name only policies the file has (or "*"); its path is its place
        // in the file's list (names are unique there).
        let place = |name: &str| {
            m.get("credentials")
                .and_then(Value::as_sequence)
                .and_then(|items| {
                    items
                        .iter()
                        .position(|c| c.get("name").and_then(Value::as_str) == Some(name))
                })
                .unwrap_or(0)
        };
        for c in &f.credentials {
            for p in &c.http_policies {
                if p != "*" && !f.http_admission.policies.contains_key(p) {
                    self.err(
                        &format!("credentials[{}].http_policies", place(&c.name)),
                        format_args!("no http_admission policy is named {p:?}"),
                    );
                }
            }
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

    /// The gateway.yaml aliases found in `m`, checked against what `canonical` already sets.
    pub(super) fn aliases(
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

    /// An adaptive cap's settings: `{min: 1, max (required), decrease: 0.7, increase: 1,
    /// cooldown: 1s}`.
    pub(super) fn adaptive(&mut self, v: &Value, path: &str) -> Option<Adaptive> {
        let m = self.mapping(v, path, &["min", "max", "decrease", "increase", "cooldown"])?;
        let mut a = Adaptive::up_to(1);
        let mut ok = true;
        match m.get("max") {
            Some(v) => match self.count32(v, &join(path, "max"), 1) {
                Some(n) => a.max = n,
                None => ok = false,
            },
            None => {
                self.err(
                    path,
                    "max is required (the cap it starts at and never exceeds)",
                );
                ok = false;
            }
        }
        if let Some(v) = m.get("min") {
            match self.count32(v, &join(path, "min"), 1) {
                Some(n) => a.min = n,
                None => ok = false,
            }
        }
        if ok && a.min > a.max {
            self.err(
                &join(path, "min"),
                format_args!("must be <= max ({})", a.max),
            );
            ok = false;
        }
        if let Some(v) = m.get("decrease") {
            match v.as_f64() {
                Some(d) if d > 0.0 && d < 1.0 && (d * 1000.0).round() >= 1.0 => {
                    a.decrease_pm = ((d * 1000.0).round() as u32).min(999);
                }
                _ => {
                    self.err(
                        &join(path, "decrease"),
                        "must be a number between 0 and 1 (the factor a rate-limited outcome multiplies the cap by)",
                    );
                    ok = false;
                }
            }
        }
        if let Some(v) = m.get("increase") {
            match self.count(v, &join(path, "increase"), 1, 1000) {
                Some(n) => a.increase = n as u32,
                None => ok = false,
            }
        }
        if let Some(v) = m.get("cooldown") {
            match self.duration(v, &join(path, "cooldown"), 0, MAX_COOLDOWN_MS) {
                Some(ms) => a.cooldown_ms = ms,
                None => ok = false,
            }
        }
        ok.then_some(a)
    }

    pub(super) fn scheduling(&mut self, v: &Value, path: &str) -> SchedPatch {
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
        if let Some(v) = given(m, "per_account") {
            p.per_account = self.count32(v, &join(path, "per_account"), 1);
        }
        if let Some(v) = m.get("subjects") {
            let mpath = join(path, "subjects");
            for (name, sv) in self.named_entries(v, &mpath) {
                let spath = join(&mpath, &name);
                // A cap, or {cap, weight}.
                let (cap, weight) = match sv {
                    Value::Mapping(_) => {
                        let sm = self.mapping(sv, &spath, &["cap", "weight"]);
                        let cap = sm
                            .and_then(|sm| sm.get("cap"))
                            .and_then(|v| self.count32(v, &join(&spath, "cap"), 1));
                        let weight = sm.and_then(|sm| sm.get("weight")).and_then(|v| {
                            self.count(v, &join(&spath, "weight"), 1, u64::from(MAX_WEIGHT))
                                .map(|n| n as u32)
                        });
                        (cap, weight)
                    }
                    _ => (self.count32(sv, &spath, 1), None),
                };
                if let Some(cap) = cap {
                    p.subjects.insert(name.clone(), cap);
                }
                if let Some(w) = weight {
                    p.weights.insert(name, w);
                }
            }
        }
        if let Some(v) = m.get("accounts") {
            let mpath = join(path, "accounts");
            for (name, av) in self.named_entries(v, &mpath) {
                let apath = join(&mpath, &name);
                // A cap, {cap}, or {adaptive: {...}}.
                match av {
                    Value::Mapping(_) => {
                        let Some(am) = self.mapping(av, &apath, &["cap", "adaptive"]) else {
                            continue;
                        };
                        match (am.get("cap"), am.get("adaptive")) {
                            (Some(_), Some(_)) => self.err(
                                &apath,
                                "give cap or adaptive, not both (an adaptive cap moves within min..max)",
                            ),
                            (Some(cv), None) => {
                                if let Some(cap) = self.count32(cv, &join(&apath, "cap"), 1) {
                                    p.accounts.insert(name, cap);
                                }
                            }
                            (None, Some(ad)) => {
                                if let Some(a) = self.adaptive(ad, &join(&apath, "adaptive")) {
                                    p.adaptive.insert(name, a);
                                }
                            }
                            (None, None) => self.err(&apath, "give cap or adaptive"),
                        }
                    }
                    _ => {
                        if let Some(cap) = self.count32(av, &apath, 1) {
                            p.accounts.insert(name, cap);
                        }
                    }
                }
            }
        }
        if let Some(v) = given(m, "adaptive") {
            p.adaptive_default = self.adaptive(v, &join(path, "adaptive"));
        }
        if let Some(v) = m.get("priority_aging") {
            p.priority_aging_ms =
                self.duration(v, &join(path, "priority_aging"), 0, MAX_PRIORITY_AGING_MS);
        }
        if let Some(v) = m.get("mode") {
            let s = v.as_str();
            p.mode = s.and_then(Mode::parse);
            if p.mode.is_none() {
                let got = s.map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"));
                self.err(
                    &join(path, "mode"),
                    format_args!("must be one of {}, got {got}", Mode::NAMES.join(", ")),
                );
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
}

impl Cx {
    /// `history`: how the last hour each host's page charts is cut (bucket, keep, max_hosts).
    fn history(&mut self, v: &Value) -> Option<crate::history::Shape> {
        let m = self.mapping(v, "history", &["bucket", "keep", "max_hosts"])?;
        let default = crate::history::Shape::DEFAULT;
        let bucket_ms = match m.get("bucket") {
            Some(v) => self.duration(v, "history.bucket", 10, 3_600_000),
            None => Some(default.bucket_ms),
        };
        let keep_ms = match m.get("keep") {
            Some(v) => self.duration(v, "history.keep", 20, 7 * 86_400_000),
            None => Some(default.bucket_ms * default.buckets),
        };
        let max_hosts = match m.get("max_hosts") {
            Some(v) => self.count(v, "history.max_hosts", 0, 1_000_000),
            None => Some(default.max_hosts as u64),
        };
        let (bucket_ms, keep_ms, max_hosts) = (bucket_ms?, keep_ms?, max_hosts?);
        let buckets = keep_ms / bucket_ms;
        if !(2..=10_000).contains(&buckets) {
            self.err(
                "history.keep",
                format_args!("must hold 2 to 10000 buckets of history.bucket, got {buckets}"),
            );
            return None;
        }
        Some(crate::history::Shape {
            bucket_ms,
            buckets,
            max_hosts: max_hosts as usize,
        })
    }
}
