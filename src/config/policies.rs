//! The `resources` (budgets and allowances, money in micro-dollars) and `auth` (buckets)
//! sections.

use super::walker::{Cx, given, join, kind};
use super::*;

impl Cx {
    /// The `resources` section into `p`.
    pub(super) fn resources(&mut self, v: &Value, p: &mut ResourcePolicy) {
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
        if let Some(v) = given(m, "default") {
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
    pub(super) fn budget(&mut self, v: &Value, path: &str) -> Option<Budget> {
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
    pub(super) fn allowance(&mut self, v: &Value, path: &str) -> Option<Allowance> {
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
    pub(super) fn usd(&mut self, v: &Value, path: &str) -> Option<u64> {
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
    pub(super) fn auth(&mut self, v: &Value) -> AuthPolicy {
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
            if !crate::auth::valid_endpoint_name(&name) {
                self.err(&path, crate::auth::ENDPOINT_NAME_RULE);
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
                policy.configured.insert(name.clone());
                policy.buckets.insert(name, rule);
            }
        }
        policy
    }
}
