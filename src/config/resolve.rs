//! Resolution: built-in defaults, under the file, under the flags, into one [`Config`], with
//! the rules that tie fields together.

use super::sections::{FileConfig, SchedPatch};
use super::walker::Cx;
use super::*;

impl Cx {
    /// The command-line flags as a patch, each checked by the file's rules under its flag name.
    pub(super) fn flags(&mut self, o: &Overrides) -> SchedPatch {
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

    pub(super) fn resolve(&mut self, file: FileConfig, o: &Overrides) -> Config {
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
        let redis = o.redis_url.is_some() || file.redis.is_some();
        if redis && o.data_dir.is_some() {
            self.err(
                "--data-dir",
                "has no effect with a Redis store (Redis keeps the state): remove one",
            );
        } else if o.redis_url.is_some() && file.embedded.data_dir.is_some() {
            self.err(
                "store.embedded.data_dir",
                "has no effect with --redis-url (Redis keeps the state): remove one",
            );
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
            history: file.history.unwrap_or(crate::history::Shape::DEFAULT),
            rate_limits: file.rate_limits,
            http_admission: file.http_admission,
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
                        replicas_acked: 0,
                        replication_timeout_ms: DEFAULT_REPLICATION_TIMEOUT_MS,
                        sentinel: None,
                    })
                }),
                None => file.redis,
            },
            embedded: EmbeddedConfig {
                data_dir: o.data_dir.clone().or(file.embedded.data_dir),
                ..file.embedded
            },
        }
    }

    /// Defaults under a patch, with the rules that tie fields together.
    pub(super) fn limits(&mut self, p: &SchedPatch, path: &str, memory: MemoryLimits) -> Limits {
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
            weights: p.weights.clone().into_iter().collect(),
            priority_aging_ms: p.priority_aging_ms.unwrap_or(d.priority_aging_ms),
            mode: p.mode.unwrap_or(d.mode),
            adaptive: p.adaptive.clone().into_iter().collect(),
            adaptive_default: p.adaptive_default,
        }
    }
}
