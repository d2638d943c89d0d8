//! Rendering: a resolved [`Config`] as the YAML `check-config` prints, which loads back as the
//! same configuration.

use super::*;

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
        let h = &self.history;
        let _ = writeln!(
            out,
            "history: {{bucket: {}, keep: {}, max_hosts: {}}}",
            format_ms(h.bucket_ms),
            format_ms(h.bucket_ms * h.buckets),
            h.max_hosts
        );
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
        let configured = &self.auth.configured;
        let _ = writeln!(
            out,
            "auth:\n  local_max_keys: {}\n  buckets:{}",
            self.auth.local_max_keys,
            if configured.is_empty() { " {}" } else { "" }
        );
        // Built-in buckets the file does not name are comments: naming them would make them
        // the operator's, which wins over a gateway's declared bucket.
        for (name, r) in &self.auth.buckets {
            let _ = writeln!(
                out,
                "    {}{}: {{max_attempts: {}, window: {}, lockout: {}}}{}",
                if configured.contains(name) { "" } else { "# " },
                yaml_key(name),
                r.max_attempts,
                format_ms(r.window_ms),
                format_ms(r.lockout_ms),
                if configured.contains(name) {
                    ""
                } else {
                    "  (built in; a gateway's declared bucket wins over it)"
                }
            );
        }
        rate_limits::render(&mut out, &self.rate_limits);
        http_admission::render(&mut out, &self.http_admission);
        out
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
    // A subject with a weight is written {cap, weight}; its cap only when overridden.
    let names: std::collections::BTreeSet<&String> =
        l.subjects.keys().chain(l.weights.keys()).collect();
    let body: Vec<String> = names
        .iter()
        .map(|k| match (l.subjects.get(*k), l.weights.get(*k)) {
            (Some(c), None) => format!("{}: {c}", yaml_key(k)),
            (Some(c), Some(w)) => format!("{}: {{cap: {c}, weight: {w}}}", yaml_key(k)),
            (None, w) => format!("{}: {{weight: {}}}", yaml_key(k), w.copied().unwrap_or(1)),
        })
        .collect();
    let _ = writeln!(out, "{ind}subjects: {{{}}}", body.join(", "));
    // An adaptive account is written {adaptive: {...}}.
    let mut accounts: BTreeMap<&String, String> =
        l.accounts.iter().map(|(k, v)| (k, v.to_string())).collect();
    for (k, a) in &l.adaptive {
        accounts.insert(k, format!("{{adaptive: {}}}", render_adaptive(a)));
    }
    let body: Vec<String> = accounts
        .iter()
        .map(|(k, v)| format!("{}: {v}", yaml_key(k)))
        .collect();
    let _ = writeln!(out, "{ind}accounts: {{{}}}", body.join(", "));
    let _ = writeln!(
        out,
        "{ind}queue: {{total: {}, per_subject: {}, hard_total: {}}}",
        l.queue_total, l.queue_per_subject, l.queue_hard_total
    );
    let _ = writeln!(out, "{ind}overflow_policy: {}", l.overflow.name());
    let _ = writeln!(out, "{ind}lease_ttl: {}", format_ms(l.lease_ttl_ms));
    let _ = writeln!(out, "{ind}retention: {}", format_ms(l.retention_ms));
    let _ = writeln!(out, "{ind}max_retained: {}", l.max_retained);
    if l.priority_aging_ms > 0 {
        let _ = writeln!(
            out,
            "{ind}priority_aging: {}",
            format_ms(l.priority_aging_ms)
        );
    } else {
        let _ = writeln!(out, "{ind}priority_aging: 0s   # off");
    }
    let _ = writeln!(out, "{ind}mode: {}", l.mode.name());
    match &l.adaptive_default {
        Some(a) => {
            let _ = writeln!(out, "{ind}adaptive: {}", render_adaptive(a));
        }
        None => {
            let _ = writeln!(
                out,
                "{ind}adaptive: null   # accounts without a cap of their own use per_account"
            );
        }
    }
}

fn render_adaptive(a: &Adaptive) -> String {
    format!(
        "{{min: {}, max: {}, decrease: {}, increase: {}, cooldown: {}}}",
        a.min,
        a.max,
        f64::from(a.decrease_pm) / 1000.0,
        a.increase,
        format_ms(a.cooldown_ms)
    )
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

/// The keys whose values differ between two configurations, as dotted paths, split into those
/// a running authority applies on reload (`scheduling`, `hosts`, `memory`: the limits) and
/// those that take a restart (everything else).
pub fn changed_keys(old: &Config, new: &Config) -> (Vec<String>, Vec<String>) {
    fn walk(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Mapping(x)), Some(Value::Mapping(y))) => {
                let keys: std::collections::BTreeSet<String> = x
                    .keys()
                    .chain(y.keys())
                    .map(|k| k.as_str().map_or_else(|| format!("{k:?}"), str::to_string))
                    .collect();
                for k in keys {
                    let child = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&child, x.get(k.as_str()), y.get(k.as_str()), out);
                }
            }
            (a, b) if a != b => out.push(path.to_string()),
            _ => {}
        }
    }
    let parse = |c: &Config| serde_norway::from_str::<Value>(&c.render()).ok();
    let mut changed = Vec::new();
    walk("", parse(old).as_ref(), parse(new).as_ref(), &mut changed);
    changed.into_iter().partition(|k| {
        [
            "scheduling",
            "hosts",
            "memory",
            "rate_limits",
            "http_admission",
        ]
        .iter()
        .any(|s| k == s || k.starts_with(&format!("{s}.")))
    })
}
