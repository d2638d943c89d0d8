//! One `ShouldRateLimit` request: which counters it hits ([`plan`]), and, from their counts, its
//! answer and what each configured descriptor's metrics count ([`Plan::answer`]), as
//! envoyproxy/ratelimit decides and counts them.
//!
//! A counter is named by its domain, the descriptor's entries and the unit:
//! `key=value,key=value|unit`, with `%`, `=`, `,` and `|` in keys and values percent-escaped, so
//! two descriptors share a counter exactly when upstream's cache keys would be equal. A
//! wildcard with `share_threshold` counts every value it matches under its pattern.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::UNLIMITED_REMAINING;
use super::counters::Hit;
use super::rules::{Limit, Match, Rule, Rules};

/// One descriptor of a request.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// (key, value), in order.
    pub entries: Vec<(String, String)>,
    /// The limit Envoy's route configuration set on the descriptor, winning over the file's.
    pub limit: Option<Limit>,
    /// The descriptor's own hits (0 only looks); `None` for the request's.
    pub hits_addend: Option<u64>,
}

/// A `ShouldRateLimit` request, checked (a domain and at least one descriptor).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// The request's hits per descriptor; 0 means 1.
    pub hits_addend: u32,
    /// Hits taken back per descriptor (Envoy's `hits_subtrahend`); 0 = none. A request that
    /// takes back adds nothing.
    pub hits_subtrahend: u32,
}

/// `RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

impl Code {
    /// The proto enum's number.
    pub fn proto(self) -> i32 {
        match self {
            Code::Ok => 1,
            Code::OverLimit => 2,
        }
    }
}

/// One descriptor's `DescriptorStatus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// The limit that decided it and the rule's name; `None` when none applies.
    pub limit: Option<(Limit, String)>,
    pub remaining: u32,
    /// Seconds until its window resets; `None` without a limit.
    pub reset_s: Option<u64>,
}

/// What one request adds to a configured descriptor's metrics (upstream's stats).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Tally {
    /// The configured descriptor (`tenant_acme.model`); for a limit set by Envoy's route, its
    /// keys (`tenant.model`).
    pub descriptor: String,
    pub total: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
    /// Its counter could not be made: the domain holds its `max_counters` live ones.
    pub refused: bool,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub overall: Code,
    pub statuses: Vec<Status>,
    /// The `x-ratelimit-*` headers, when configured.
    pub headers: Vec<(&'static str, String)>,
    /// One per counted descriptor.
    pub tallies: Vec<Tally>,
    /// The domain is not configured.
    pub unknown_domain: bool,
}

/// How one descriptor is decided.
#[derive(Clone, Debug, PartialEq)]
enum Item<'a> {
    /// No rule applies (none matches, the domain is unknown, or another rule replaces it).
    Free,
    Unlimited,
    Counted {
        limit: Limit,
        /// `None` for a limit Envoy set on the descriptor.
        rule: Option<&'a Rule>,
        label: Cow<'a, str>,
        addend: u64,
        /// Its place in [`Plan::hits`].
        hit: usize,
    },
}

/// The counters one request hits, and how each descriptor is decided from them.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<'a> {
    items: Vec<Item<'a>>,
    /// What the store counts, in one atomic operation (empty: nothing to count); with
    /// [`Self::subtract`], what it takes back.
    pub hits: Vec<Hit>,
    /// The request takes back `hits` (each one's `addend` is what is subtracted) rather than
    /// adding them: it refuses nothing and counts in no metric.
    pub subtract: bool,
    unknown_domain: bool,
}

/// What a descriptor matched: its limit, the rule (`None`: Envoy's own limit), the metrics
/// label, and the wildcard values its counter is shared under.
type Found<'a> = (Limit, Option<&'a Rule>, Cow<'a, str>, Vec<Option<&'a str>>);

/// The counters `request` hits under `rules`, and how each descriptor will be decided.
pub fn plan<'a>(rules: &'a Rules, request: &Request) -> Plan<'a> {
    let mut matched: Vec<Option<Found<'a>>> = Vec::with_capacity(request.descriptors.len());
    let mut unlimited = vec![false; request.descriptors.len()];
    let mut replacing: Vec<&'a str> = Vec::new();
    let mut unknown_domain = false;
    for (i, d) in request.descriptors.iter().enumerate() {
        let found = match rules.lookup(&request.domain, &d.entries) {
            Match::UnknownDomain => {
                unknown_domain = true;
                None
            }
            // Envoy's own limit on the descriptor, in a known domain (as upstream).
            _ if d.limit.is_some() => {
                let keys: Vec<&str> = d.entries.iter().map(|(k, _)| k.as_str()).collect();
                let limit = d.limit.expect("checked");
                Some((limit, None, Cow::Owned(keys.join(".")), Vec::new()))
            }
            Match::NoRule => None,
            Match::Rule { rule, shared } => {
                replacing.extend(rule.replaces.iter().map(String::as_str));
                match rule.limit {
                    None => {
                        unlimited[i] = true;
                        None
                    }
                    Some(limit) => Some((limit, Some(rule), Cow::Borrowed(&*rule.path), shared)),
                }
            }
        };
        matched.push(found);
    }
    let mut hits = Vec::new();
    let items = matched
        .into_iter()
        .zip(&request.descriptors)
        .zip(unlimited)
        .map(|((found, d), unlimited)| match found {
            _ if unlimited => Item::Unlimited,
            None => Item::Free,
            Some((_, Some(rule), _, _))
                if !rule.name.is_empty() && replacing.contains(&rule.name.as_str()) =>
            {
                Item::Free
            }
            Some((limit, rule, label, shared)) => {
                let addend = if request.hits_subtrahend > 0 {
                    u64::from(request.hits_subtrahend)
                } else {
                    d.hits_addend
                        .unwrap_or(u64::from(request.hits_addend.max(1)))
                };
                hits.push(Hit {
                    key: counter_key(&d.entries, &shared, limit),
                    unit: limit.unit,
                    addend,
                });
                Item::Counted {
                    limit,
                    rule,
                    label,
                    addend,
                    hit: hits.len() - 1,
                }
            }
        })
        .collect();
    Plan {
        items,
        hits,
        subtract: request.hits_subtrahend > 0,
        unknown_domain,
    }
}

/// A counter's key: the entries (with shared wildcard values) and the unit.
fn counter_key(entries: &[(String, String)], shared: &[Option<&str>], limit: Limit) -> String {
    let mut out = String::with_capacity(
        entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>()
            + 8,
    );
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        escape_into(&mut out, k);
        out.push('=');
        escape_into(&mut out, shared.get(i).copied().flatten().unwrap_or(v));
    }
    out.push('|');
    out.push_str(limit.unit.name());
    out
}

/// A counter's entries and unit name, read back from its key ([`counter_key`]); `None` for a
/// key it did not make.
pub fn counter_entries(key: &str) -> Option<(Vec<(String, String)>, &str)> {
    let (entries, unit) = key.rsplit_once('|')?;
    let unescape = |s: &str| -> Option<String> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            let byte = u8::from_str_radix(rest.get(at + 1..at + 3)?, 16).ok()?;
            out.push(char::from(byte));
            rest = &rest[at + 3..];
        }
        out.push_str(rest);
        Some(out)
    };
    let entries = entries
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((unescape(k)?, unescape(v)?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((entries, unit))
}

fn escape_into(out: &mut String, s: &str) {
    if !s.contains(['%', '=', ',', '|']) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '%' | '=' | ',' | '|' => {
                let _ = write!(out, "%{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
}

impl Plan<'_> {
    /// The answer, from the store's count after each of [`Self::hits`] (`None`: refused, the
    /// domain is full) at `now_s` seconds since the epoch.
    pub fn answer(
        &self,
        counts: &[Option<u64>],
        now_s: u64,
        near_limit_ratio: f64,
        headers: bool,
    ) -> Answer {
        let mut statuses = Vec::with_capacity(self.items.len());
        let mut tallies = Vec::new();
        let (mut over, mut quota, mut quota_over) = (false, 0, 0);
        // The descriptor the headers describe.
        let (mut closest, mut min_remaining) = (None, u32::MAX);
        for item in &self.items {
            let mut in_quota = false;
            let status = match item {
                Item::Free => Status {
                    code: Code::Ok,
                    limit: None,
                    remaining: 0,
                    reset_s: None,
                },
                Item::Unlimited => Status {
                    code: Code::Ok,
                    limit: None,
                    remaining: UNLIMITED_REMAINING,
                    reset_s: None,
                },
                // A subtraction refuses nothing and counts in no metric.
                Item::Counted {
                    limit, rule, hit, ..
                } if self.subtract => {
                    let after = counts.get(*hit).copied().flatten().unwrap_or(0);
                    let threshold = u64::from(limit.requests_per_unit);
                    Status {
                        code: Code::Ok,
                        limit: Some((*limit, rule.map_or("", |r| &r.name).to_string())),
                        remaining: threshold.saturating_sub(after) as u32,
                        reset_s: Some(limit.unit.reset_in(now_s)),
                    }
                }
                Item::Counted {
                    limit,
                    rule,
                    label,
                    addend,
                    hit,
                } => {
                    let (shadow, quota_mode, name) = rule.map_or((false, false, ""), |r| {
                        (r.shadow_mode, r.quota_mode, r.name.as_str())
                    });
                    let mut tally = Tally {
                        descriptor: label.to_string(),
                        total: *addend,
                        ..Tally::default()
                    };
                    let threshold = u64::from(limit.requests_per_unit);
                    let near = (threshold as f64 * near_limit_ratio).floor() as u64;
                    let (is_over, remaining) = match counts.get(*hit).copied().flatten() {
                        None => {
                            tally.refused = true;
                            tally.over_limit = *addend;
                            (true, 0)
                        }
                        Some(after) => {
                            let before = after.saturating_sub(*addend);
                            if after > threshold {
                                if before >= threshold {
                                    tally.over_limit = *addend;
                                } else {
                                    tally.over_limit = after - threshold;
                                    tally.near_limit = threshold - near.max(before);
                                }
                                if shadow {
                                    tally.shadow_mode = tally.over_limit;
                                }
                                (true, 0)
                            } else {
                                if after > near {
                                    tally.near_limit = if before >= near {
                                        *addend
                                    } else {
                                        after - near
                                    };
                                }
                                tally.within_limit = *addend;
                                (false, (threshold - after) as u32)
                            }
                        }
                    };
                    tallies.push(tally);
                    let code = if is_over && !shadow {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    };
                    in_quota = quota_mode;
                    if quota_mode {
                        quota += 1;
                        quota_over += usize::from(code == Code::OverLimit);
                    } else if code == Code::OverLimit {
                        over = true;
                    }
                    Status {
                        code,
                        limit: Some((*limit, name.to_string())),
                        remaining,
                        reset_s: Some(limit.unit.reset_in(now_s)),
                    }
                }
            };
            // As upstream: the least remaining so far, and any descriptor over its limit (not
            // in quota mode) from then on.
            if status.limit.is_some() && status.remaining < min_remaining {
                closest = Some(statuses.len());
                min_remaining = status.remaining;
            }
            if status.code == Code::OverLimit && !in_quota {
                closest = Some(statuses.len());
                min_remaining = 0;
            }
            statuses.push(status);
        }
        let overall = if over || (quota > 0 && quota == quota_over) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let headers = match closest {
            Some(c) if headers => {
                let s = &statuses[c];
                let (limit, _) = s.limit.as_ref().expect("closest has a limit");
                vec![
                    ("x-ratelimit-limit", limit.requests_per_unit.to_string()),
                    ("x-ratelimit-remaining", s.remaining.to_string()),
                    ("x-ratelimit-reset", s.reset_s.unwrap_or(0).to_string()),
                ]
            }
            _ => Vec::new(),
        };
        Answer {
            overall,
            statuses,
            headers,
            tallies,
            unknown_domain: self.unknown_domain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_key_reads_back_as_its_entries_and_unit() {
        let entries = vec![
            ("tenant".to_string(), "a,b=c|d%e".to_string()),
            ("model".to_string(), "gpt-4o".to_string()),
        ];
        let limit = Limit {
            requests_per_unit: 3,
            unit: crate::ratelimit::rules::Unit::Minute,
        };
        let key = counter_key(&entries, &[], limit);
        assert_eq!(counter_entries(&key), Some((entries, "minute")));
        assert_eq!(counter_entries("tenant=a%2"), None);
        assert_eq!(counter_entries("tenant%zz=a|minute"), None);
    }
    use crate::ratelimit::rules::{Node, Unit};

    fn limit(rpu: u32, unit: Unit) -> Option<Limit> {
        Some(Limit {
            requests_per_unit: rpu,
            unit,
        })
    }

    fn rule_node(key: &str, value: &str, rule: Rule) -> Node {
        Node {
            key: key.into(),
            value: value.into(),
            rule: Some(rule),
            ..Node::default()
        }
    }

    fn rules(nodes: Vec<Node>) -> Rules {
        Rules::one_domain(nodes)
    }

    fn desc(pairs: &[(&str, &str)]) -> Descriptor {
        Descriptor {
            entries: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Descriptor::default()
        }
    }

    fn request(descriptors: Vec<Descriptor>, hits_addend: u32) -> Request {
        Request {
            domain: "d".into(),
            descriptors,
            hits_addend,
            hits_subtrahend: 0,
        }
    }

    fn tenant_rule(rpu: u32) -> Rule {
        Rule {
            limit: limit(rpu, Unit::Minute),
            path: "tenant".into(),
            ..Rule::default()
        }
    }

    #[test]
    fn hits_addend_zero_means_one_and_a_descriptors_own_zero_only_looks() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(5))]);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 0));
        assert_eq!(p.hits[0].addend, 1);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 7));
        assert_eq!(p.hits[0].addend, 7);
        let mut look = desc(&[("tenant", "a")]);
        look.hits_addend = Some(0);
        let p = plan(&r, &request(vec![look], 7));
        assert_eq!(p.hits[0].addend, 0);
        assert_eq!(p.hits[0].key, "tenant=a|minute");
    }

    #[test]
    fn a_subtraction_takes_its_hits_back_refuses_nothing_and_counts_in_no_metric() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(5))]);
        let mut req = request(vec![desc(&[("tenant", "a")])], 0);
        req.hits_subtrahend = 3;
        let p = plan(&r, &req);
        assert!(p.subtract);
        assert_eq!(p.hits[0].addend, 3);
        let a = p.answer(&[Some(0)], 0, 0.8, false);
        assert_eq!(a.overall, Code::Ok);
        assert_eq!(a.statuses[0].remaining, 5);
        assert!(a.tallies.is_empty());
        // Even when the counter is still above the limit after it.
        let a = p.answer(&[Some(9)], 0, 0.8, false);
        assert_eq!((a.overall, a.statuses[0].code), (Code::Ok, Code::Ok));
        assert_eq!(a.statuses[0].remaining, 0);
    }

    #[test]
    fn over_the_limit_is_a_count_above_it() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(5))]);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 1));
        let a = p.answer(&[Some(5)], 125, 0.8, true);
        assert_eq!(a.overall, Code::Ok);
        assert_eq!(a.statuses[0].remaining, 0);
        assert_eq!(a.statuses[0].reset_s, Some(55));
        let a = p.answer(&[Some(6)], 125, 0.8, true);
        assert_eq!(a.overall, Code::OverLimit);
        assert_eq!(
            a.headers,
            vec![
                ("x-ratelimit-limit", "5".to_string()),
                ("x-ratelimit-remaining", "0".to_string()),
                ("x-ratelimit-reset", "55".to_string()),
            ]
        );
        assert_eq!(p.answer(&[Some(6)], 125, 0.8, false).headers, vec![]);
    }

    #[test]
    fn a_charge_past_the_limit_makes_the_next_look_over_it() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(100))]);
        let mut look = desc(&[("tenant", "a")]);
        look.hits_addend = Some(0);
        let p = plan(&r, &request(vec![look], 0));
        assert_eq!(p.answer(&[Some(100)], 0, 0.8, false).overall, Code::Ok);
        assert_eq!(
            p.answer(&[Some(130)], 0, 0.8, false).overall,
            Code::OverLimit
        );
    }

    #[test]
    fn stats_split_hits_as_upstream_does() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(10))]);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 4));
        // 6 -> 10: near threshold 8, so 2 near, all 4 within.
        let t = &p.answer(&[Some(10)], 0, 0.8, false).tallies[0];
        assert_eq!(
            (t.total, t.near_limit, t.within_limit, t.over_limit),
            (4, 2, 4, 0)
        );
        // 8 -> 12: 2 over, 2 near (8..10).
        let t = &p.answer(&[Some(12)], 0, 0.8, false).tallies[0];
        assert_eq!((t.over_limit, t.near_limit, t.within_limit), (2, 2, 0));
        // 11 -> 15: all over.
        let t = &p.answer(&[Some(15)], 0, 0.8, false).tallies[0];
        assert_eq!((t.over_limit, t.near_limit), (4, 0));
    }

    #[test]
    fn shadow_mode_counts_but_answers_ok() {
        let mut rule = tenant_rule(1);
        rule.shadow_mode = true;
        let r = rules(vec![rule_node("tenant", "", rule)]);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 1));
        let a = p.answer(&[Some(3)], 0, 0.8, false);
        assert_eq!(a.overall, Code::Ok);
        assert_eq!(a.statuses[0].code, Code::Ok);
        assert_eq!((a.tallies[0].over_limit, a.tallies[0].shadow_mode), (1, 1));
    }

    #[test]
    fn unlimited_and_unmatched_descriptors_count_nothing() {
        let r = rules(vec![rule_node(
            "tenant",
            "vip",
            Rule {
                limit: None,
                path: "tenant_vip".into(),
                ..Rule::default()
            },
        )]);
        let p = plan(
            &r,
            &request(vec![desc(&[("tenant", "vip")]), desc(&[("user", "u")])], 1),
        );
        assert!(p.hits.is_empty());
        let a = p.answer(&[], 0, 0.8, true);
        assert_eq!(a.statuses[0].remaining, UNLIMITED_REMAINING);
        assert_eq!(a.statuses[1].limit, None);
        assert!(a.headers.is_empty() && a.tallies.is_empty());
        let p = plan(
            &r,
            &Request {
                domain: "other".into(),
                ..request(vec![desc(&[("tenant", "x")])], 1)
            },
        );
        assert!(p.hits.is_empty());
        assert!(p.answer(&[], 0, 0.8, false).unknown_domain);
    }

    #[test]
    fn a_named_rule_is_replaced_by_the_one_that_replaces_it() {
        let general = Rule {
            limit: limit(10, Unit::Second),
            name: "general".into(),
            path: "tenant".into(),
            ..Rule::default()
        };
        let special = Rule {
            limit: limit(100, Unit::Second),
            replaces: vec!["general".into()],
            path: "plan_pro".into(),
            ..Rule::default()
        };
        let r = rules(vec![
            rule_node("tenant", "", general),
            rule_node("plan", "pro", special),
        ]);
        let p = plan(
            &r,
            &request(vec![desc(&[("tenant", "a")]), desc(&[("plan", "pro")])], 1),
        );
        assert_eq!(p.hits.len(), 1);
        assert_eq!(p.hits[0].key, "plan=pro|second");
        let a = p.answer(&[Some(1)], 0, 0.8, false);
        assert_eq!(a.statuses[0].limit, None);
        assert_eq!(a.statuses[1].remaining, 99);
    }

    #[test]
    fn envoys_own_limit_wins_in_a_known_domain() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(5))]);
        let mut d = desc(&[("tenant", "a"), ("path", "/x")]);
        d.limit = limit(2, Unit::Hour);
        let p = plan(&r, &request(vec![d.clone()], 1));
        assert_eq!(p.hits[0].key, "tenant=a,path=/x|hour");
        let a = p.answer(&[Some(3)], 0, 0.8, false);
        assert_eq!(a.overall, Code::OverLimit);
        assert_eq!(a.tallies[0].descriptor, "tenant.path");
        let unknown = Request {
            domain: "nope".into(),
            ..request(vec![d], 1)
        };
        assert!(plan(&r, &unknown).hits.is_empty());
    }

    #[test]
    fn quota_mode_is_over_only_when_every_quota_descriptor_is() {
        let mut q1 = tenant_rule(1);
        q1.quota_mode = true;
        let mut q2 = q1.clone();
        q2.path = "user".into();
        let r = rules(vec![rule_node("tenant", "", q1), rule_node("user", "", q2)]);
        let p = plan(
            &r,
            &request(vec![desc(&[("tenant", "a")]), desc(&[("user", "u")])], 1),
        );
        assert_eq!(
            p.answer(&[Some(2), Some(1)], 0, 0.8, false).overall,
            Code::Ok
        );
        assert_eq!(
            p.answer(&[Some(2), Some(2)], 0, 0.8, false).overall,
            Code::OverLimit
        );
    }

    #[test]
    fn a_refused_counter_is_over_its_limit() {
        let r = rules(vec![rule_node("tenant", "", tenant_rule(5))]);
        let p = plan(&r, &request(vec![desc(&[("tenant", "a")])], 1));
        let a = p.answer(&[None], 0, 0.8, false);
        assert_eq!(a.overall, Code::OverLimit);
        assert!(a.tallies[0].refused);
    }

    #[test]
    fn counter_keys_never_collide() {
        let lim = Limit {
            requests_per_unit: 1,
            unit: Unit::Second,
        };
        let a = counter_key(&[("a".into(), "b,c=d".into())], &[], lim);
        let b = counter_key(
            &[("a".into(), "b".into()), ("c".into(), "d".into())],
            &[],
            lim,
        );
        assert_ne!(a, b);
        assert_eq!(a, "a=b%2Cc%3Dd|second");
    }
}
