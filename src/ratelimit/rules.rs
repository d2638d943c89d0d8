//! The configured rate limits: per domain, a tree of descriptors as envoyproxy/ratelimit's files
//! nest them, and the lookup of the rule a request's descriptor meets.
//!
//! A level holds its nodes by composite key, `key_value` (or `key` for a node without a value),
//! as upstream does; values with `*` are wildcards, tried in the order configured after the
//! exact `key_value` and before the `key` alone. A `*` matches any run of characters (zero or
//! more), wherever it stands. A rule applies only when it sits at the descriptor's last entry.

use std::collections::{BTreeMap, HashMap};

/// A unit of time of `RateLimitResponse.RateLimit.Unit`, with the proto's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Month,
    Year,
    Week,
}

impl Unit {
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window's length in seconds, as upstream counts it (a month is 30 days, a year 365).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The proto enum's number.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a proto number; `None` for UNKNOWN (0) and numbers the proto does not have.
    pub fn from_proto(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.proto() == n)
    }

    /// A unit as the files write it, in any case (`minute`, `MINUTE`).
    pub fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(s))
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// When the window holding `now_s` (seconds since the Unix epoch) started.
    pub fn window_start(self, now_s: u64) -> u64 {
        now_s - now_s % self.seconds()
    }

    /// Seconds from `now_s` until the window holding it ends (at least 1).
    pub fn reset_in(self, now_s: u64) -> u64 {
        self.seconds() - now_s % self.seconds()
    }
}

/// `requests_per_unit` hits per window of `unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub requests_per_unit: u32,
    pub unit: Unit,
}

/// A descriptor's `rate_limit` and the flags beside it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Rule {
    /// `None`: `unlimited`.
    pub limit: Option<Limit>,
    /// The name other rules' `replaces` refer to; empty for none.
    pub name: String,
    /// Names of rules this one stands in for when both match one request.
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    /// Accepted as upstream's files write it; metrics stay per configured descriptor (never
    /// per runtime value), so it changes nothing here.
    pub detailed_metric: bool,
    /// Where it is configured below its domain, as upstream names its stats
    /// (`tenant`, `tenant_acme.model`): the `descriptor` label of its metrics.
    pub path: String,
}

/// One configured descriptor.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Node {
    pub key: String,
    /// Empty for a node that matches any value of its key.
    pub value: String,
    pub rule: Option<Rule>,
    /// Values this wildcard matches share one counter (upstream's `share_threshold`).
    pub share_threshold: bool,
    pub children: Level,
}

impl Node {
    /// The composite key its level holds it by.
    pub fn composite(&self) -> String {
        if self.value.is_empty() {
            self.key.clone()
        } else {
            format!("{}_{}", self.key, self.value)
        }
    }
}

/// The descriptors of one level of a domain's tree.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Level {
    nodes: HashMap<String, Node>,
    /// Composite keys holding a `*`, in the order configured, split at every `*`.
    wildcards: Vec<(String, Vec<String>)>,
    /// Composite keys in the order configured.
    order: Vec<String>,
}

impl Level {
    /// Add a node; `Err` with its composite key when the level already has one of that key.
    pub fn insert(&mut self, node: Node) -> Result<(), String> {
        let composite = node.composite();
        if self.nodes.contains_key(&composite) {
            return Err(composite);
        }
        if composite.contains('*') {
            let parts = composite.split('*').map(str::to_string).collect();
            self.wildcards.push((composite.clone(), parts));
        }
        self.order.push(composite.clone());
        self.nodes.insert(composite, node);
        Ok(())
    }

    /// The nodes in the order configured.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.order.iter().map(|k| &self.nodes[k])
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// One domain's descriptors, and where they were configured.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DomainRules {
    pub domain: String,
    pub root: Level,
    /// The file (or the inline YAML path) it came from, as check-config and the console say it.
    pub source: String,
}

/// Every configured domain.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Rules {
    domains: BTreeMap<String, DomainRules>,
}

/// What a descriptor meets.
#[derive(Clone, Debug, PartialEq)]
pub enum Match<'a> {
    /// The request's domain is not configured.
    UnknownDomain,
    /// No rule at the descriptor's last entry.
    NoRule,
    Rule {
        rule: &'a Rule,
        /// Per entry: the wildcard value its counter is shared under (`share_threshold`), or
        /// `None` to count under the entry's own value.
        shared: Vec<Option<&'a str>>,
    },
}

impl Rules {
    /// Add a domain; `Err` with where the domain was configured first when it already is.
    pub fn insert(&mut self, domain: DomainRules) -> Result<(), String> {
        if let Some(first) = self.domains.get(&domain.domain) {
            return Err(first.source.clone());
        }
        self.domains.insert(domain.domain.clone(), domain);
        Ok(())
    }

    pub fn domain(&self, domain: &str) -> Option<&DomainRules> {
        self.domains.get(domain)
    }

    /// The domains, sorted by name.
    pub fn domains(&self) -> impl Iterator<Item = &DomainRules> {
        self.domains.values()
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The rule a descriptor of `entries` (key, value) meets in `domain`, as upstream looks it
    /// up: at each level the node of `key_value`, else the first wildcard that matches
    /// `key_value`, else the node of `key`; a rule counts only at the last entry; the walk
    /// stops where a node has no children.
    pub fn lookup<'a>(&'a self, domain: &str, entries: &[(String, String)]) -> Match<'a> {
        let Some(d) = self.domains.get(domain) else {
            return Match::UnknownDomain;
        };
        let mut level = &d.root;
        let mut found = None;
        let mut shared: Vec<Option<&'a str>> = Vec::new();
        let mut composite = String::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            composite.clear();
            composite.push_str(key);
            composite.push('_');
            composite.push_str(value);
            let mut next = level.nodes.get(composite.as_str());
            if next.is_none() {
                for (wild, parts) in &level.wildcards {
                    if wildcard_match(parts, &composite) {
                        let node = &level.nodes[wild];
                        if node.share_threshold {
                            shared.resize(entries.len(), None);
                            shared[i] = Some(node.value.as_str());
                        }
                        next = Some(node);
                        break;
                    }
                }
            }
            let next = match next.or_else(|| level.nodes.get(key.as_str())) {
                Some(n) => n,
                None => break,
            };
            if i == entries.len() - 1 {
                found = next.rule.as_ref();
            }
            if next.children.is_empty() {
                break;
            }
            level = &next.children;
        }
        match found {
            Some(rule) => {
                shared.resize(entries.len(), None);
                Match::Rule { rule, shared }
            }
            None => Match::NoRule,
        }
    }
}

/// Whether `value` matches a pattern split at its `*`s, each `*` standing for any run of
/// characters (upstream's `wildcardMatch`).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (first, last) = (&parts[0], &parts[parts.len() - 1]);
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Rules of one domain, `d`, of these top-level descriptors: for the tests of this module and
/// of the decisions.
#[cfg(test)]
impl Rules {
    pub(crate) fn one_domain(nodes: Vec<Node>) -> Rules {
        let mut root = Level::default();
        for n in nodes {
            root.insert(n).unwrap();
        }
        let mut r = Rules::default();
        r.insert(DomainRules {
            domain: "d".into(),
            root,
            source: "test".into(),
        })
        .unwrap();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str, rpu: u32) -> Rule {
        Rule {
            limit: Some(Limit {
                requests_per_unit: rpu,
                unit: Unit::Minute,
            }),
            path: path.into(),
            ..Rule::default()
        }
    }

    fn node(key: &str, value: &str, rule: Option<Rule>, children: Vec<Node>) -> Node {
        let mut level = Level::default();
        for c in children {
            level.insert(c).unwrap();
        }
        Node {
            key: key.into(),
            value: value.into(),
            rule,
            share_threshold: false,
            children: level,
        }
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rules(nodes: Vec<Node>) -> Rules {
        Rules::one_domain(nodes)
    }

    fn path_of(m: Match<'_>) -> Option<String> {
        match m {
            Match::Rule { rule, .. } => Some(rule.path.clone()),
            _ => None,
        }
    }

    #[test]
    fn windows_align_to_the_epoch_as_upstream_divides_them() {
        assert_eq!(Unit::Minute.window_start(125), 120);
        assert_eq!(Unit::Minute.reset_in(125), 55);
        assert_eq!(Unit::Minute.reset_in(120), 60);
        assert_eq!(Unit::Second.reset_in(7), 1);
        assert_eq!(Unit::Week.seconds(), 604_800);
        assert_eq!(Unit::Month.seconds(), 2_592_000);
        assert_eq!(Unit::Year.seconds(), 31_536_000);
        // A day starts at midnight UTC: 2026-12-03T15:00:00Z is 1796310000.
        assert_eq!(Unit::Day.window_start(1_796_310_000), 1_796_256_000);
        for u in Unit::ALL {
            assert_eq!(Unit::from_proto(u.proto()), Some(u));
            assert_eq!(Unit::parse(&u.name().to_uppercase()), Some(u));
        }
        assert_eq!(Unit::from_proto(0), None);
        assert_eq!(Unit::parse("fortnight"), None);
    }

    #[test]
    fn the_most_specific_descriptor_wins() {
        let r = rules(vec![
            node("tenant", "", Some(rule("tenant", 10)), vec![]),
            node("tenant", "acme", Some(rule("tenant_acme", 100)), vec![]),
            node("tenant", "beta*", Some(rule("tenant_beta*", 50)), vec![]),
            node("tenant", "*-eu", Some(rule("tenant_*-eu", 5)), vec![]),
        ]);
        let at = |v: &str| path_of(r.lookup("d", &entries(&[("tenant", v)])));
        assert_eq!(at("acme").as_deref(), Some("tenant_acme"));
        assert_eq!(at("beta-7").as_deref(), Some("tenant_beta*"));
        assert_eq!(
            at("beta").as_deref(),
            Some("tenant_beta*"),
            "* matches nothing too"
        );
        assert_eq!(at("shop-eu").as_deref(), Some("tenant_*-eu"));
        assert_eq!(at("other").as_deref(), Some("tenant"));
        assert_eq!(
            r.lookup("x", &entries(&[("tenant", "a")])),
            Match::UnknownDomain
        );
        assert_eq!(r.lookup("d", &entries(&[("user", "a")])), Match::NoRule);
    }

    #[test]
    fn a_rule_applies_only_at_the_descriptors_last_entry() {
        let r = rules(vec![node(
            "tenant",
            "",
            Some(rule("tenant", 10)),
            vec![node("model", "", Some(rule("tenant.model", 3)), vec![])],
        )]);
        let tm = entries(&[("tenant", "a"), ("model", "m")]);
        assert_eq!(path_of(r.lookup("d", &tm)).as_deref(), Some("tenant.model"));
        assert_eq!(
            path_of(r.lookup("d", &entries(&[("tenant", "a")]))).as_deref(),
            Some("tenant")
        );
        // Deeper than configured: no rule (upstream ignores a limit not at the last entry).
        let deeper = entries(&[("tenant", "a"), ("model", "m"), ("user", "u")]);
        assert_eq!(r.lookup("d", &deeper), Match::NoRule);
        // A first entry the tree does not know stops the walk.
        assert_eq!(
            r.lookup("d", &entries(&[("user", "u"), ("model", "m")])),
            Match::NoRule
        );
    }

    #[test]
    fn shared_wildcards_name_their_pattern() {
        let mut n = node("path", "/api/*", Some(rule("path_/api/*", 3)), vec![]);
        n.share_threshold = true;
        let r = rules(vec![n]);
        match r.lookup("d", &entries(&[("path", "/api/x")])) {
            Match::Rule { shared, .. } => assert_eq!(shared, vec![Some("/api/*")]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicates_are_refused_with_their_key() {
        let mut level = Level::default();
        level.insert(node("k", "v", None, vec![])).unwrap();
        assert_eq!(
            level.insert(node("k", "v", None, vec![])),
            Err("k_v".into())
        );
        let mut r = Rules::default();
        r.insert(DomainRules {
            domain: "d".into(),
            source: "a.yaml".into(),
            ..DomainRules::default()
        })
        .unwrap();
        let again = DomainRules {
            domain: "d".into(),
            source: "b.yaml".into(),
            ..DomainRules::default()
        };
        assert_eq!(r.insert(again), Err("a.yaml".into()));
    }

    #[test]
    fn wildcards_match_as_upstream_does() {
        let split = |p: &str| p.split('*').map(str::to_string).collect::<Vec<_>>();
        assert!(wildcard_match(&split("k_a*"), "k_abc"));
        assert!(wildcard_match(&split("k_a*c*e"), "k_abcde"));
        assert!(!wildcard_match(&split("k_a*c*e"), "k_abde"));
        assert!(
            !wildcard_match(&split("k_ab*ba"), "k_aba"),
            "fixed parts may not overlap"
        );
        assert!(wildcard_match(&split("k_*"), "k_"));
        assert!(!wildcard_match(&split("k_x"), "k_xy"));
    }
}
