//! The access-control sections of the file: `credentials`, `tls` and `grpc` (message and
//! stream limits). Tokens given through `token_env` or `token_file` are hashed as they are read;
//! only digests are kept, and nothing here renders a token or a digest.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use serde_norway::Value;

use super::{Config, Cx, check_id, join, kind, yaml_key};
use crate::security::{Credential, Proof, Role, sha256};

/// Certificate and key files for TLS, checked to be readable PEM when the file is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA that client certificates must chain to; present = mTLS (a certificate is required).
    pub client_ca: Option<PathBuf>,
}

/// The limits of the gRPC edge: what one caller, or a flood of them, can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcLimits {
    /// Largest request message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Open connections at most; further ones are closed at once (and counted). Lowered at
    /// start to what the process's file-descriptor limit allows.
    pub max_connections: usize,
    /// Concurrent HTTP/2 streams per connection (calls and Wait streams together).
    pub max_streams_per_connection: u32,
    /// Most Wait streams one connection may hold open at once.
    pub max_wait_streams_per_connection: usize,
    /// Most Wait streams open at once over every connection.
    pub max_wait_streams: usize,
    /// A call other than Wait still running after this is cancelled (DEADLINE_EXCEEDED),
    /// which also bounds how long a half-sent request holds its buffers.
    pub unary_timeout_ms: u64,
    /// HTTP/2 PING sent after this long without a frame from the client...
    pub keepalive_interval_ms: u64,
    /// ...and the connection closed when it is not answered within this: a frozen client's
    /// Wait streams then stop keeping its tickets alive.
    pub keepalive_timeout_ms: u64,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            max_message_bytes: 256 * 1024,
            max_connections: 10_000,
            max_streams_per_connection: 10_100,
            max_wait_streams_per_connection: 10_000,
            max_wait_streams: 50_000,
            unary_timeout_ms: 10_000,
            keepalive_interval_ms: 10_000,
            keepalive_timeout_ms: 20_000,
        }
    }
}

const PROOFS: [&str; 4] = ["token_sha256", "token_env", "token_file", "client_cert_dns"];

/// What a credential's list of names names, for its checks' messages.
#[derive(Clone, Copy)]
struct Names {
    key: &'static str,
    one: &'static str,
    all: &'static str,
    every: &'static str,
    not_for_operators: &'static str,
}

const DOMAINS: Names = Names {
    key: "domains",
    one: "a rate limit domain",
    all: "rate limit domains",
    every: "every domain",
    not_for_operators: "operator credentials ask no rate limits; leave domains out",
};

const POLICIES: Names = Names {
    key: "http_policies",
    one: "an HTTP admission policy",
    all: "HTTP admission policies",
    every: "every policy",
    not_for_operators: "operator credentials admit no HTTP requests; leave http_policies out",
};

impl Cx {
    /// The `credentials` list; `mtls` says whether client certificates are verified (a
    /// `client_cert_dns` credential needs them).
    pub(super) fn credentials(&mut self, v: &Value, mtls: bool) -> Vec<Credential> {
        let items = match v {
            Value::Null => return Vec::new(),
            Value::Sequence(items) => items,
            other => {
                self.err(
                    "credentials",
                    format_args!("must be a list of credentials, got {}", kind(other)),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        let mut names = HashSet::new();
        let mut digests = HashSet::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("credentials[{i}]");
            let mut known = vec!["name", "role", "host_ids", "domains", "http_policies"];
            known.extend(PROOFS);
            let Some(m) = self.mapping(item, &path, &known) else {
                continue;
            };
            let name = match m.get("name").map(|v| (v.as_str(), v)) {
                Some((Some(n), _)) => match check_id(n) {
                    Ok(()) if names.insert(n.to_string()) => Some(n.to_string()),
                    Ok(()) => {
                        self.err(&join(&path, "name"), format_args!("{n:?} is used twice"));
                        None
                    }
                    Err(rule) => {
                        self.err(&join(&path, "name"), rule);
                        None
                    }
                },
                Some((None, v)) => {
                    self.err(
                        &join(&path, "name"),
                        format_args!("must be a string, got {}", kind(v)),
                    );
                    None
                }
                None => {
                    self.err(&path, "name is required");
                    None
                }
            };
            let role = match m.get("role").map(|v| (v.as_str().and_then(Role::parse), v)) {
                Some((Some(r), _)) => Some(r),
                Some((None, v)) => {
                    let got = v
                        .as_str()
                        .map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"));
                    self.err(
                        &join(&path, "role"),
                        format_args!("must be one of {}, got {got}", Role::NAMES.join(", ")),
                    );
                    None
                }
                None => {
                    self.err(&path, "role is required (gateway or operator)");
                    None
                }
            };
            let domains = self.gateway_names(m.get("domains"), &path, role, DOMAINS);
            let http_policies = self.gateway_names(m.get("http_policies"), &path, role, POLICIES);
            let host_ids = self.host_ids(
                m.get("host_ids"),
                &path,
                role,
                domains.as_ref().is_some_and(|d| !d.is_empty())
                    || http_policies.as_ref().is_some_and(|p| !p.is_empty()),
            );
            let proof = self.proof(m, &path);
            if matches!(proof, Some(Proof::ClientCertDns(_))) && !mtls {
                self.err(
                    &join(&path, "client_cert_dns"),
                    "needs tls.client_ca: client certificates are only verified under mTLS",
                );
            }
            if let Some(Proof::TokenSha256(d)) = &proof
                && !digests.insert(*d)
            {
                self.err(&path, "has the same token as an earlier credential");
                continue;
            }
            if let (
                Some(name),
                Some(role),
                Some(host_ids),
                Some(domains),
                Some(http_policies),
                Some(proof),
            ) = (name, role, host_ids, domains, http_policies, proof)
            {
                out.push(Credential {
                    name,
                    role,
                    host_ids,
                    domains,
                    http_policies,
                    proof,
                });
            }
        }
        out
    }

    /// A gateway credential's `domains` (the rate limit domains it may ask about) or
    /// `http_policies` (the HTTP admission policies it may use), as `names` says.
    fn gateway_names(
        &mut self,
        v: Option<&Value>,
        path: &str,
        role: Option<Role>,
        names: Names,
    ) -> Option<BTreeSet<String>> {
        let dpath = join(path, names.key);
        match (v, role) {
            (None, _) => Some(BTreeSet::new()),
            (Some(_), Some(Role::Operator)) => {
                self.err(&dpath, names.not_for_operators);
                None
            }
            (Some(Value::Sequence(items)), _) if !items.is_empty() => {
                let mut out = BTreeSet::new();
                for (i, d) in items.iter().enumerate() {
                    match d.as_str() {
                        Some(s) if !s.is_empty() => {
                            out.insert(s.to_string());
                        }
                        _ => self.err(
                            &format!("{dpath}[{i}]"),
                            format_args!(
                                "must be {} (a non-empty string, or \"*\" for {}), got {}",
                                names.one,
                                names.every,
                                kind(d)
                            ),
                        ),
                    }
                }
                (out.len() == items.len()).then_some(out)
            }
            (Some(_), _) => {
                self.err(
                    &dpath,
                    format_args!(
                        "must be a non-empty list of {} (\"*\": {})",
                        names.all, names.every
                    ),
                );
                None
            }
        }
    }

    fn host_ids(
        &mut self,
        v: Option<&Value>,
        path: &str,
        role: Option<Role>,
        has_domains: bool,
    ) -> Option<BTreeSet<String>> {
        let hpath = join(path, "host_ids");
        match (v, role) {
            (None, Some(Role::Gateway)) if has_domains => Some(BTreeSet::new()),
            (None, Some(Role::Gateway)) => {
                self.err(
                    path,
                    "host_ids is required for a gateway credential (or domains or \
                     http_policies, for an Envoy that only asks ShouldRateLimit or admits HTTP \
                     requests)",
                );
                None
            }
            (None, _) => Some(BTreeSet::new()),
            (Some(_), Some(Role::Operator)) => {
                self.err(
                    &hpath,
                    "operator credentials act for no host; leave host_ids out",
                );
                None
            }
            (Some(Value::Sequence(items)), _) if !items.is_empty() => {
                let mut out = BTreeSet::new();
                for (i, h) in items.iter().enumerate() {
                    match h.as_str().map(|s| (s, check_id(s))) {
                        Some((s, Ok(()))) => {
                            out.insert(s.to_string());
                        }
                        Some((_, Err(rule))) => self.err(&format!("{hpath}[{i}]"), rule),
                        None => self.err(
                            &format!("{hpath}[{i}]"),
                            format_args!("must be a string, got {}", kind(h)),
                        ),
                    }
                }
                (out.len() == items.len()).then_some(out)
            }
            (Some(_), _) => {
                self.err(&hpath, "must be a non-empty list of host ids");
                None
            }
        }
    }

    /// Exactly one of the proofs, read and hashed.
    fn proof(&mut self, m: &serde_norway::Mapping, path: &str) -> Option<Proof> {
        let given: Vec<&str> = PROOFS.into_iter().filter(|k| m.contains_key(*k)).collect();
        let key = match given.as_slice() {
            [one] => *one,
            [] => {
                self.err(path, format_args!("give one of {}", PROOFS.join(", ")));
                return None;
            }
            many => {
                self.err(
                    path,
                    format_args!(
                        "give only one of {} (got {})",
                        PROOFS.join(", "),
                        many.join(", ")
                    ),
                );
                return None;
            }
        };
        let kpath = join(path, key);
        let Some(text) = m.get(key).and_then(Value::as_str) else {
            self.err(&kpath, "must be a string");
            return None;
        };
        match key {
            "token_sha256" => match parse_hex32(text) {
                Some(d) => Some(Proof::TokenSha256(d)),
                None => {
                    self.err(
                        &kpath,
                        "must be 64 hex digits: the SHA-256 of the token \
                         (admission-authority hash-token prints it)",
                    );
                    None
                }
            },
            "token_env" => match std::env::var(text) {
                Ok(t) if !t.trim().is_empty() => {
                    Some(Proof::TokenSha256(sha256(t.trim().as_bytes())))
                }
                _ => {
                    self.err(
                        &kpath,
                        format_args!("environment variable {text} is not set or empty"),
                    );
                    None
                }
            },
            "token_file" => match std::fs::read_to_string(self.file_path(text)) {
                Ok(t) if !t.trim().is_empty() => {
                    Some(Proof::TokenSha256(sha256(t.trim().as_bytes())))
                }
                Ok(_) => {
                    self.err(&kpath, format_args!("{text} is empty"));
                    None
                }
                Err(e) => {
                    self.err(&kpath, format_args!("cannot read {text}: {e}"));
                    None
                }
            },
            _ => match rustls_pki_types::ServerName::try_from(text) {
                Ok(rustls_pki_types::ServerName::DnsName(_)) => {
                    Some(Proof::ClientCertDns(text.to_string()))
                }
                _ => {
                    self.err(&kpath, format_args!("must be a DNS name, got {text:?}"));
                    None
                }
            },
        }
    }

    /// A path from the file: relative ones are relative to the file's directory.
    pub(super) fn file_path(&self, path: &str) -> PathBuf {
        match &self.base {
            Some(base) if std::path::Path::new(path).is_relative() => base.join(path),
            _ => PathBuf::from(path),
        }
    }

    /// The `tls` section.
    pub(super) fn tls(&mut self, v: &Value) -> Option<TlsFiles> {
        let m = self.mapping(v, "tls", &["cert", "key", "client_ca"])?;
        let mut pem = |key: &str, required: bool| -> Option<PathBuf> {
            let path = join("tls", key);
            let Some(v) = m.get(key) else {
                if required {
                    self.err("tls", format_args!("{key} is required"));
                }
                return None;
            };
            let Some(file) = v.as_str() else {
                self.err(&path, format_args!("must be a file path, got {}", kind(v)));
                return None;
            };
            let full = self.file_path(file);
            match std::fs::read_to_string(&full) {
                Ok(text) if text.contains("-----BEGIN ") => Some(full),
                Ok(_) => {
                    self.err(&path, format_args!("{file} is not a PEM file"));
                    None
                }
                Err(e) => {
                    self.err(&path, format_args!("cannot read {file}: {e}"));
                    None
                }
            }
        };
        let cert = pem("cert", true);
        let key = pem("key", true);
        let client_ca = pem("client_ca", false);
        Some(TlsFiles {
            cert: cert?,
            key: key?,
            client_ca,
        })
    }

    /// The `grpc` section.
    pub(super) fn grpc(&mut self, v: &Value) -> GrpcLimits {
        let mut g = GrpcLimits::default();
        let Some(m) = self.mapping(
            v,
            "grpc",
            &[
                "max_message_bytes",
                "max_connections",
                "max_streams_per_connection",
                "max_wait_streams_per_connection",
                "max_wait_streams",
                "unary_timeout",
                "keepalive",
            ],
        ) else {
            return g;
        };
        if let Some(v) = m.get("max_connections")
            && let Some(n) = self.count(v, "grpc.max_connections", 1, 1_000_000)
        {
            g.max_connections = n as usize;
        }
        if let Some(v) = m.get("max_streams_per_connection")
            && let Some(n) = self.count(v, "grpc.max_streams_per_connection", 1, 1_000_000)
        {
            g.max_streams_per_connection = n as u32;
        }
        if let Some(v) = m.get("max_wait_streams")
            && let Some(n) = self.count(v, "grpc.max_wait_streams", 1, 10_000_000)
        {
            g.max_wait_streams = n as usize;
        }
        if let Some(v) = m.get("unary_timeout")
            && let Some(ms) = self.duration(v, "grpc.unary_timeout", 100, 3_600_000)
        {
            g.unary_timeout_ms = ms;
        }
        if let Some(v) = m.get("keepalive")
            && let Some(k) = self.mapping(v, "grpc.keepalive", &["interval", "timeout"])
        {
            if let Some(v) = k.get("interval")
                && let Some(ms) = self.duration(v, "grpc.keepalive.interval", 100, 3_600_000)
            {
                g.keepalive_interval_ms = ms;
            }
            if let Some(v) = k.get("timeout")
                && let Some(ms) = self.duration(v, "grpc.keepalive.timeout", 100, 3_600_000)
            {
                g.keepalive_timeout_ms = ms;
            }
        }
        if let Some(v) = m.get("max_message_bytes")
            && let Some(n) = self.count(v, "grpc.max_message_bytes", 1024, 64 * 1024 * 1024)
        {
            g.max_message_bytes = n as usize;
        }
        if let Some(v) = m.get("max_wait_streams_per_connection")
            && let Some(n) = self.count(v, "grpc.max_wait_streams_per_connection", 1, 1_000_000)
        {
            g.max_wait_streams_per_connection = n as usize;
        }
        g
    }
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The access sections for `check-config`: credentials by name, role, hosts and kind of proof
/// (never a token or digest).
pub(super) fn render(out: &mut String, c: &Config) {
    if c.credentials.is_empty() {
        let _ = writeln!(out, "credentials: []   # open: no authentication");
    } else {
        let _ = writeln!(out, "credentials:");
        for cr in &c.credentials {
            let hosts: Vec<String> = cr.host_ids.iter().map(|h| yaml_key(h)).collect();
            // A token is shown as the digest the authority keeps (never the token itself),
            // which loads back as the same credential.
            let proof = match &cr.proof {
                Proof::TokenSha256(d) => format!(
                    "token_sha256: \"{}\"",
                    d.iter().map(|b| format!("{b:02x}")).collect::<String>()
                ),
                Proof::ClientCertDns(dns) => format!("client_cert_dns: {}", yaml_key(dns)),
            };
            let _ = write!(
                out,
                "  - {{name: {}, role: {}",
                yaml_key(&cr.name),
                cr.role.name()
            );
            if !hosts.is_empty() {
                let _ = write!(out, ", host_ids: [{}]", hosts.join(", "));
            }
            if !cr.domains.is_empty() {
                let domains: Vec<String> = cr.domains.iter().map(|d| yaml_key(d)).collect();
                let _ = write!(out, ", domains: [{}]", domains.join(", "));
            }
            if !cr.http_policies.is_empty() {
                let p: Vec<String> = cr.http_policies.iter().map(|d| yaml_key(d)).collect();
                let _ = write!(out, ", http_policies: [{}]", p.join(", "));
            }
            let _ = writeln!(out, ", {proof}}}");
        }
    }
    match &c.tls {
        Some(t) => {
            // Absolute, so the output loads back from any directory.
            let abs = |p: &std::path::Path| {
                std::path::absolute(p)
                    .unwrap_or_else(|_| p.to_path_buf())
                    .display()
                    .to_string()
            };
            let _ = write!(out, "tls: {{cert: {}, key: {}", abs(&t.cert), abs(&t.key));
            if let Some(ca) = &t.client_ca {
                let _ = write!(out, ", client_ca: {}", abs(ca));
            }
            let _ = writeln!(out, "}}");
        }
        None => {
            let _ = writeln!(out, "tls: null   # plaintext");
        }
    }
    match &c.redis {
        Some(r) => {
            // The URL may carry a password: it is replaced (the output still loads, and says
            // that the file's own password must be put back).
            let at = r.url.rsplit('@').next().unwrap_or(&r.url);
            let hidden = at.len() < r.url.len();
            let _ = writeln!(
                out,
                "store:\n  redis: {{url: \"{}\", prefix: {:?}, pool_size: {}, cluster: {}{}}}{}",
                if hidden {
                    format!("redis://:HIDDEN@{at}")
                } else {
                    r.url.clone()
                },
                r.prefix,
                r.pool_size,
                r.cluster,
                if r.replicas_acked > 0 {
                    format!(
                        ", replicas_acked: {}, replication_timeout: {}ms",
                        r.replicas_acked, r.replication_timeout_ms
                    )
                } else {
                    String::new()
                } + &r.sentinel.as_ref().map_or_else(String::new, |s| {
                    format!(
                        ", sentinel: {{master: {:?}, nodes: [{}]{}}}",
                        s.master,
                        s.nodes
                            .iter()
                            .map(|n| format!("{n:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        // Never printed: replaced, as the URL's password is.
                        if s.password.is_some() {
                            ", password: HIDDEN"
                        } else {
                            ""
                        }
                    )
                }),
                if hidden {
                    "   # the file's password is not shown"
                } else {
                    ""
                }
            );
        }
        None => {
            let e = &c.embedded;
            let dir = match &e.data_dir {
                Some(d) => format!(
                    "{:?}",
                    std::path::absolute(d)
                        .unwrap_or_else(|_| d.clone())
                        .display()
                        .to_string()
                ),
                None => "null".into(),
            };
            let _ = writeln!(
                out,
                "store:\n  embedded: {{data_dir: {dir}, sync: {}, sync_interval: {}, \
                 snapshot_after: {}}}{}",
                e.sync.name(),
                super::format_ms(e.sync_interval_ms),
                super::walker::format_size(e.snapshot_after_bytes),
                if e.data_dir.is_none() {
                    "   # in memory: the state ends with the process"
                } else {
                    ""
                }
            );
        }
    }
    let g = &c.grpc;
    let _ = writeln!(
        out,
        "grpc:\n  max_message_bytes: {}\n  max_connections: {}\n  \
         max_streams_per_connection: {}\n  max_wait_streams_per_connection: {}\n  \
         max_wait_streams: {}\n  unary_timeout: {}\n  \
         keepalive: {{interval: {}, timeout: {}}}",
        g.max_message_bytes,
        g.max_connections,
        g.max_streams_per_connection,
        g.max_wait_streams_per_connection,
        g.max_wait_streams,
        super::format_ms(g.unary_timeout_ms),
        super::format_ms(g.keepalive_interval_ms),
        super::format_ms(g.keepalive_timeout_ms),
    );
}
