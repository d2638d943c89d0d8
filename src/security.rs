//! Who is calling, and what they may do (docs/security.md).
//!
//! A request is authenticated once, by the interceptor in front of both services: a bearer token
//! (`authorization: Bearer <token>`) is hashed with SHA-256 and compared in constant time with
//! every configured digest; without a token, a TLS client certificate whose DNS name a
//! credential names stands for that credential. The resulting [`Caller`] travels in the
//! request's extensions, and each handler asks it once whether it may act for the host_id it
//! names. With no credentials configured every caller is [`Caller::Open`] (the embedded,
//! loopback-only default).
//!
//! Tokens are never logged and never echoed in an error message.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName};
use tonic::{Request, Status};

/// What a credential may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Admission RPCs for its host_ids (and auth buckets, which are installation-wide), and
    /// Envoy's rate limit service for its domains.
    Gateway,
    /// Operator RPCs, and GetStats of any host.
    Operator,
}

impl Role {
    pub const NAMES: [&'static str; 2] = ["gateway", "operator"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "gateway" => Some(Role::Gateway),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Gateway => "gateway",
            Role::Operator => "operator",
        }
    }
}

/// How a credential is presented.
#[derive(Clone, PartialEq, Eq)]
pub enum Proof {
    /// SHA-256 of a bearer token (from `token_sha256`, or hashed from `token_env` / `token_file`
    /// at load time, so the token itself is not kept).
    TokenSha256([u8; 32]),
    /// A TLS client certificate valid for this DNS name (mTLS).
    ClientCertDns(String),
}

impl std::fmt::Debug for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proof::TokenSha256(_) => f.write_str("TokenSha256(<redacted>)"),
            Proof::ClientCertDns(name) => write!(f, "ClientCertDns({name:?})"),
        }
    }
}

/// One configured credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub name: String,
    pub role: Role,
    /// The hosts a gateway credential may act for (empty for operators).
    pub host_ids: BTreeSet<String>,
    /// The rate limit domains a gateway credential may ask `ShouldRateLimit` about (an
    /// Envoy's credential); `*` for every domain; empty for operators.
    pub domains: BTreeSet<String>,
    /// The HTTP admission policies a gateway credential may use (an Envoy's external
    /// processing filter); `*` for every policy; empty for operators.
    pub http_policies: BTreeSet<String>,
    pub proof: Proof,
}

/// The authenticated caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// No credentials are configured: everything is allowed.
    Open,
    Gateway {
        name: String,
        host_ids: BTreeSet<String>,
        domains: BTreeSet<String>,
        http_policies: BTreeSet<String>,
    },
    Operator {
        name: String,
    },
}

/// Why a caller may not do what it asked (PERMISSION_DENIED).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

impl Caller {
    /// May this caller act for `host_id` (submit, renew, release, wait, authorize, settle)?
    ///
    /// Fails for a gateway not bound to the host, and for operators.
    pub fn act_for(&self, host_id: &str) -> Result<(), Denied> {
        match self {
            Caller::Open => Ok(()),
            Caller::Gateway { host_ids, .. } if host_ids.contains(host_id) => Ok(()),
            Caller::Gateway { name, .. } => Err(Denied(format!(
                "credential {name:?} may not act for host_id {host_id:?}"
            ))),
            Caller::Operator { name } => Err(Denied(format!(
                "credential {name:?} is an operator credential; acting for a host takes a \
                 gateway credential"
            ))),
        }
    }

    /// May this caller release `host_id`'s tickets? Its gateways, and operators (the manual
    /// release of a stuck slot, as the console offers it).
    pub fn release_for(&self, host_id: &str) -> Result<(), Denied> {
        match self {
            Caller::Operator { .. } => Ok(()),
            _ => self.act_for(host_id),
        }
    }

    /// The operator credential's name, for the log line of what an operator did.
    pub fn operator_name(&self) -> Option<&str> {
        match self {
            Caller::Operator { name } => Some(name),
            _ => None,
        }
    }

    /// May this caller read `host_id`'s stats? Operators read any host's.
    pub fn read_host(&self, host_id: &str) -> Result<(), Denied> {
        match self {
            Caller::Operator { .. } => Ok(()),
            _ => self.act_for(host_id),
        }
    }

    /// May this caller use the installation-wide auth buckets? Gateways only.
    pub fn use_auth_buckets(&self) -> Result<(), Denied> {
        match self {
            Caller::Open | Caller::Gateway { .. } => Ok(()),
            Caller::Operator { name } => Err(Denied(format!(
                "credential {name:?} is an operator credential; auth buckets take a gateway \
                 credential (operators unlock with Operator/UnlockAuth)"
            ))),
        }
    }

    /// May this caller ask Envoy's rate limit service about `domain`? Gateways whose
    /// credential names the domain (or `*`).
    pub fn rate_limit(&self, domain: &str) -> Result<(), Denied> {
        match self {
            Caller::Open => Ok(()),
            Caller::Gateway { domains, .. }
                if domains.contains(domain) || domains.contains("*") =>
            {
                Ok(())
            }
            Caller::Gateway { name, .. } => Err(Denied(format!(
                "credential {name:?} may not ask about rate limit domain {domain:?}: name it \
                 in the credential's domains"
            ))),
            Caller::Operator { name } => Err(Denied(format!(
                "credential {name:?} is an operator credential; ShouldRateLimit takes a \
                 gateway credential with domains"
            ))),
        }
    }

    /// May this caller admit HTTP requests under `policy` (Envoy's external processing filter)?
    pub fn http_policy(&self, policy: &str) -> Result<(), Denied> {
        match self {
            Caller::Open => Ok(()),
            Caller::Gateway { http_policies, .. }
                if http_policies.contains(policy) || http_policies.contains("*") =>
            {
                Ok(())
            }
            Caller::Gateway { name, .. } => Err(Denied(format!(
                "credential {name:?} may not use HTTP admission policy {policy:?}: name it in \
                 the credential's http_policies"
            ))),
            Caller::Operator { name } => Err(Denied(format!(
                "credential {name:?} is an operator credential; the external processor takes \
                 a gateway credential with http_policies"
            ))),
        }
    }

    /// May this caller call Operator RPCs?
    pub fn operate(&self) -> Result<(), Denied> {
        match self {
            Caller::Open | Caller::Operator { .. } => Ok(()),
            Caller::Gateway { name, .. } => Err(Denied(format!(
                "credential {name:?} is a gateway credential; Operator RPCs take an operator \
                 credential"
            ))),
        }
    }
}

/// The configured credentials, and the authentication of requests against them.
#[derive(Clone, Debug, Default)]
pub struct Authenticator {
    credentials: Arc<Vec<Credential>>,
}

impl Authenticator {
    pub fn new(credentials: Vec<Credential>) -> Self {
        Authenticator {
            credentials: Arc::new(credentials),
        }
    }

    /// True when no credentials are configured (every caller is [`Caller::Open`]).
    pub fn is_open(&self) -> bool {
        self.credentials.is_empty()
    }

    /// The interceptor of the Operator service: as [`Authenticator::intercept`], and the caller
    /// must hold an operator credential.
    ///
    /// Fails with UNAUTHENTICATED as `intercept` does, and with PERMISSION_DENIED for gateways.
    pub fn intercept_operator(&self, request: Request<()>) -> Result<Request<()>, Status> {
        let request = self.intercept(request)?;
        caller(request.extensions())?
            .operate()
            .map_err(|d| Status::permission_denied(d.0))?;
        Ok(request)
    }

    /// The tonic interceptor: authenticate and put the [`Caller`] into the request's
    /// extensions.
    ///
    /// Fails with UNAUTHENTICATED when credentials are configured and the request carries none
    /// that matches.
    pub fn intercept(&self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let caller = self.authenticate(&request)?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }

    fn authenticate(&self, request: &Request<()>) -> Result<Caller, Status> {
        if self.is_open() {
            return Ok(Caller::Open);
        }
        let credential = match request.metadata().get("authorization") {
            Some(value) => {
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .ok_or_else(|| {
                        Status::unauthenticated(
                            "authorization: must be \"Bearer <token>\" (printable ASCII)",
                        )
                    })?;
                self.by_token(token.trim())
            }
            None => request
                .peer_certs()
                .and_then(|certs| self.by_certificate(certs.first()?)),
        };
        let c = credential.ok_or_else(|| {
            Status::unauthenticated(
                "missing or unknown credential: send \"authorization: Bearer <token>\", or a \
                 client certificate that a credential names",
            )
        })?;
        Ok(match c.role {
            Role::Gateway => Caller::Gateway {
                name: c.name.clone(),
                host_ids: c.host_ids.clone(),
                domains: c.domains.clone(),
                http_policies: c.http_policies.clone(),
            },
            Role::Operator => Caller::Operator {
                name: c.name.clone(),
            },
        })
    }

    /// The credential whose digest matches the token's. Every digest is compared, each in
    /// constant time, so timing says nothing about which (if any) matched.
    fn by_token(&self, token: &str) -> Option<&Credential> {
        let digest = sha256(token.as_bytes());
        let mut found = None;
        for c in self.credentials.iter() {
            if let Proof::TokenSha256(d) = &c.proof
                && constant_time_eq(d, &digest)
            {
                found = Some(c);
            }
        }
        found
    }

    /// The first credential whose DNS name the (already CA-verified) certificate is valid for.
    fn by_certificate(&self, cert: &CertificateDer<'static>) -> Option<&Credential> {
        let end_entity = webpki::EndEntityCert::try_from(cert).ok()?;
        self.credentials.iter().find(|c| match &c.proof {
            Proof::ClientCertDns(dns) => ServerName::try_from(dns.as_str())
                .ok()
                .is_some_and(|name| end_entity.verify_is_valid_for_subject_name(&name).is_ok()),
            Proof::TokenSha256(_) => false,
        })
    }
}

/// The caller the interceptor authenticated, from a request's extensions. Requests reach
/// handlers only through the interceptor, so a missing caller is a wiring bug; it is refused
/// rather than let through.
pub fn caller(extensions: &tonic::Extensions) -> Result<&Caller, Status> {
    extensions
        .get::<Caller>()
        .ok_or_else(|| Status::internal("request reached a handler without authentication"))
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Lowercase hex of a digest.
pub fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(name: &str, hosts: &[&str], token: &str) -> Credential {
        Credential {
            name: name.into(),
            role: Role::Gateway,
            host_ids: hosts.iter().map(|h| h.to_string()).collect(),
            domains: ["envoy-domain".to_string()].into(),
            http_policies: BTreeSet::new(),
            proof: Proof::TokenSha256(sha256(token.as_bytes())),
        }
    }

    fn with_token(token: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", t.parse().expect("ascii"));
        }
        r
    }

    #[test]
    fn tokens_authenticate_by_digest_and_bind_hosts() {
        let auth = Authenticator::new(vec![
            gateway("gw-one", &["one"], "s3cret-one"),
            Credential {
                name: "ops".into(),
                role: Role::Operator,
                host_ids: BTreeSet::new(),
                domains: BTreeSet::new(),
                http_policies: BTreeSet::new(),
                proof: Proof::TokenSha256(sha256(b"s3cret-ops")),
            },
        ]);
        let gw = auth
            .authenticate(&with_token(Some("Bearer s3cret-one")))
            .unwrap();
        assert!(gw.act_for("one").is_ok());
        assert!(gw.act_for("two").is_err());
        assert!(gw.operate().is_err() && gw.use_auth_buckets().is_ok());
        assert!(gw.rate_limit("envoy-domain").is_ok() && gw.rate_limit("other").is_err());
        let ops = auth
            .authenticate(&with_token(Some("Bearer s3cret-ops")))
            .unwrap();
        assert!(ops.operate().is_ok() && ops.read_host("any").is_ok());
        assert!(ops.act_for("one").is_err() && ops.use_auth_buckets().is_err());
        assert!(ops.rate_limit("envoy-domain").is_err());
        for bad in [
            None,
            Some("Bearer wrong"),
            Some("Basic s3cret-one"),
            Some("s3cret-one"),
        ] {
            let err = auth.authenticate(&with_token(bad)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{bad:?}");
            assert!(!err.message().contains("s3cret"), "{}", err.message());
        }
    }

    #[test]
    fn no_credentials_means_open() {
        let auth = Authenticator::default();
        let c = auth.authenticate(&with_token(None)).unwrap();
        assert_eq!(c, Caller::Open);
        assert!(c.act_for("x").is_ok() && c.operate().is_ok());
    }

    #[test]
    fn a_digest_never_prints() {
        let c = gateway("gw", &["h"], "tok");
        assert!(!format!("{c:?}").contains(&hex(&sha256(b"tok"))));
    }
}
