//! Credentials, roles, TLS and mTLS, and input limits, through the real server over gRPC.

mod common;

use std::process::Stdio;
use std::time::Duration;

use admission_authority::api::{
    self, admission_client::AdmissionClient, operator_client::OperatorClient,
};
use admission_authority::security::{hex, sha256};
use common::{Server, config_file, eventually, submit_req};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Request};
use tonic_types::StatusExt;

const GW_ONE: &str = "gw-one-token-7d1c9a";
const GW_TWO: &str = "gw-two-token-52be0f";
const OPS: &str = "operator-token-e83a44";

fn credentials_yaml() -> String {
    format!(
        "credentials:
  - {{ name: gw-one, role: gateway, host_ids: [one], token_sha256: \"{}\" }}
  - {{ name: gw-two, role: gateway, host_ids: [two], token_sha256: \"{}\" }}
  - {{ name: ops, role: operator, token_sha256: \"{}\" }}
scheduling: {{ total: 4, queue: {{ total: 4 }} }}
resources:
  reservation_ttl: 10ms
",
        hex(&sha256(GW_ONE.as_bytes())),
        hex(&sha256(GW_TWO.as_bytes())),
        hex(&sha256(OPS.as_bytes())),
    )
}

/// `msg` with `authorization: Bearer <token>` when a token is given.
fn authed<T>(msg: T, token: Option<&str>) -> Request<T> {
    let mut r = Request::new(msg);
    if let Some(t) = token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

/// Step 1 of `run` on host "one".
fn authorize_req(run: &str, subject: &str) -> api::AuthorizeRequest {
    api::AuthorizeRequest {
        host_id: "one".into(),
        run_id: run.into(),
        step: 1,
        subject: subject.into(),
        account_id: String::new(),
        model: String::new(),
        requested_output_tokens: 10,
        estimated_input_tokens: 0,
        estimated_cost_usd: 0.0,
    }
}

/// The status code of every Admission and Operator RPC called with `token`, acting for host
/// "one" and on `ticket` (a ticket of host "one"). Drain is left out: it changes the server for
/// good.
/// A ticket key no store drew (the clock's nanoseconds, distinct per call).
fn rand_key() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

async fn codes(channel: &Channel, token: Option<&str>, ticket: &str) -> Vec<(&'static str, Code)> {
    let mut c = AdmissionClient::new(channel.clone());
    let mut op = OperatorClient::new(channel.clone());
    let code = |r: Result<(), tonic::Status>| r.map_or_else(|s| s.code(), |_| Code::Ok);
    let mut out = Vec::new();
    let run = format!("run-{}", token.unwrap_or("none"));
    out.push((
        "Submit",
        code(
            c.submit(authed(submit_req("one", "alice", &run), token))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "Wait",
        code(
            c.wait(authed(
                api::WaitRequest {
                    ticket_id: ticket.into(),
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    out.push((
        "Renew",
        code(
            c.renew(authed(
                api::RenewRequest {
                    ticket_ids: vec![ticket.into()],
                    rss_mb: None,
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    out.push((
        "Authorize",
        code(
            c.authorize(authed(authorize_req(&run, "alice"), token))
                .await
                .map(drop),
        ),
    ));
    let settle = api::SettleRequest {
        host_id: "one".into(),
        run_id: run.clone(),
        step: 1,
        usage: Some(api::Usage {
            input_tokens: 1,
            output_tokens: 1,
            cost_usd: 0.0,
            coverage: api::Coverage::Complete as i32,
        }),
    };
    out.push((
        "Settle",
        code(c.settle(authed(settle, token)).await.map(drop)),
    ));
    let attempt = api::AuthAttemptRequest {
        endpoint: "approval".into(),
        identity: "203.0.113.9".into(),
        ..Default::default()
    };
    out.push((
        "CheckAuthAttempt",
        code(c.check_auth_attempt(authed(attempt, token)).await.map(drop)),
    ));
    let reset = api::AuthResetRequest {
        endpoint: "approval".into(),
        identity: "203.0.113.9".into(),
        ..Default::default()
    };
    out.push((
        "ResetAuthAttempts",
        code(c.reset_auth_attempts(authed(reset, token)).await.map(drop)),
    ));
    out.push((
        "GetStats",
        code(
            c.get_stats(authed(
                api::GetStatsRequest {
                    host_id: "one".into(),
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    let list = api::ListTicketsRequest {
        host_id: "one".into(),
        limit: 0,
    };
    out.push((
        "ListTickets",
        code(op.list_tickets(authed(list, token)).await.map(drop)),
    ));
    let list = api::ListReservationsRequest {
        host_id: "one".into(),
        limit: 0,
    };
    out.push((
        "ListReservations",
        code(op.list_reservations(authed(list, token)).await.map(drop)),
    ));
    let resolve = api::ResolveReservationRequest {
        host_id: "one".into(),
        run_id: "held".into(),
        step: 1,
        resolution: api::Resolution::Released as i32,
    };
    out.push((
        "ResolveReservation",
        code(
            op.resolve_reservation(authed(resolve, token))
                .await
                .map(drop),
        ),
    ));
    let unlock = api::UnlockAuthRequest {
        endpoint: "approval".into(),
        identity: "203.0.113.9".into(),
    };
    out.push((
        "UnlockAuth",
        code(op.unlock_auth(authed(unlock, token)).await.map(drop)),
    ));
    out.push((
        "ListHosts",
        code(
            op.list_hosts(authed(api::ListHostsRequest {}, token))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "Park",
        code(
            c.park(authed(
                api::ParkRequest {
                    ticket_id: ticket.into(),
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    out.push((
        "Unpark",
        code(
            c.unpark(authed(
                api::UnparkRequest {
                    ticket_id: ticket.into(),
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    out.push((
        "Reclaim",
        code(
            c.reclaim(authed(
                api::ReclaimRequest {
                    ticket_id: format!("one.{:032x}", rand_key()),
                    host_id: "one".into(),
                    run_id: format!("reclaim-{:x}", rand_key()),
                    subject: "alice".into(),
                    instance_id: "replica-1".into(),
                    grant: 7,
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    // Release last, so the ticket lives for the calls above.
    out.push((
        "Release",
        code(
            c.release(authed(
                api::ReleaseRequest {
                    ticket_id: ticket.into(),
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(drop),
        ),
    ));
    out
}

/// An admitted ticket of host "one", and an uncertain reservation "held" step 1 on it.
async fn ticket_of_host_one(channel: &Channel) -> String {
    let mut c = AdmissionClient::new(channel.clone());
    let t = c
        .submit(authed(submit_req("one", "bob", "held"), Some(GW_ONE)))
        .await
        .unwrap()
        .into_inner()
        .ticket_id;
    c.authorize(authed(authorize_req("held", "bob"), Some(GW_ONE)))
        .await
        .unwrap();
    t
}

fn only(codes: &[(&'static str, Code)], code: Code) -> Vec<&'static str> {
    codes
        .iter()
        .filter(|(_, c)| *c == code)
        .map(|(n, _)| *n)
        .collect()
}

#[tokio::test]
async fn every_rpc_needs_a_credential_for_its_host_and_role() {
    let server = Server::start_with_config("sec-matrix", &credentials_yaml(), &[]);
    let channel = server.channel().await;
    let all = [
        "Submit",
        "Wait",
        "Renew",
        "Authorize",
        "Settle",
        "CheckAuthAttempt",
        "ResetAuthAttempts",
        "GetStats",
        "ListTickets",
        "ListReservations",
        "ResolveReservation",
        "UnlockAuth",
        "ListHosts",
        "Park",
        "Unpark",
        "Reclaim",
        "Release",
    ];
    for token in [None, Some("not-a-token")] {
        let ticket = ticket_of_host_one(&channel).await;
        let got = codes(&channel, token, &ticket).await;
        assert_eq!(only(&got, Code::Unauthenticated), all, "token {token:?}");
    }

    // Another host's gateway: only the installation-wide auth buckets are open to it.
    let ticket = ticket_of_host_one(&channel).await;
    let got = codes(&channel, Some(GW_TWO), &ticket).await;
    assert_eq!(
        only(&got, Code::PermissionDenied),
        [
            "Submit",
            "Wait",
            "Renew",
            "Authorize",
            "Settle",
            "GetStats",
            "ListTickets",
            "ListReservations",
            "ResolveReservation",
            "UnlockAuth",
            "ListHosts",
            "Park",
            "Unpark",
            "Reclaim",
            "Release"
        ]
    );
    assert_eq!(
        only(&got, Code::Ok),
        ["CheckAuthAttempt", "ResetAuthAttempts"]
    );

    // The right gateway: every Admission RPC; no Operator RPC.
    let got = codes(&channel, Some(GW_ONE), &ticket).await;
    assert_eq!(
        only(&got, Code::PermissionDenied),
        [
            "ListTickets",
            "ListReservations",
            "ResolveReservation",
            "UnlockAuth",
            "ListHosts"
        ]
    );
    assert_eq!(
        only(&got, Code::Ok),
        [
            "Submit",
            "Wait",
            "Renew",
            "Authorize",
            "Settle",
            "CheckAuthAttempt",
            "ResetAuthAttempts",
            "GetStats",
            "Park",
            "Unpark",
            "Reclaim",
            "Release"
        ]
    );

    // The operator: Operator RPCs, any host's stats and a manual Release; acting for a host
    // otherwise takes a gateway.
    let ticket = ticket_of_host_one(&channel).await;
    let got = codes(&channel, Some(OPS), &ticket).await;
    assert_eq!(
        only(&got, Code::Ok),
        [
            "GetStats",
            "ListTickets",
            "ListReservations",
            "ResolveReservation",
            "UnlockAuth",
            "ListHosts",
            "Release"
        ]
    );
    assert_eq!(
        only(&got, Code::PermissionDenied),
        [
            "Submit",
            "Wait",
            "Renew",
            "Authorize",
            "Settle",
            "CheckAuthAttempt",
            "ResetAuthAttempts",
            "Park",
            "Unpark",
            "Reclaim"
        ]
    );
    let drain = OperatorClient::new(channel.clone())
        .drain(authed(api::DrainRequest {}, Some(GW_ONE)))
        .await
        .unwrap_err();
    assert_eq!(drain.code(), Code::PermissionDenied);
    OperatorClient::new(channel.clone())
        .drain(authed(api::DrainRequest {}, Some(OPS)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stolen_ticket_id_is_useless_to_another_host() {
    let server = Server::start_with_config("sec-stolen", &credentials_yaml(), &[]);
    let mut c = server.client().await;
    let ticket = c
        .submit(authed(submit_req("one", "alice", "r1"), Some(GW_ONE)))
        .await
        .unwrap()
        .into_inner()
        .ticket_id;
    let release = c
        .release(authed(
            api::ReleaseRequest {
                ticket_id: ticket.clone(),
                ..Default::default()
            },
            Some(GW_TWO),
        ))
        .await
        .unwrap_err();
    assert_eq!(release.code(), Code::PermissionDenied);
    assert!(
        release.message().contains("gw-two") && release.message().contains("\"one\""),
        "{}",
        release.message()
    );
    // Nor can another host's gateway release it by its run.
    let by_run = c
        .release(authed(
            api::ReleaseRequest {
                host_id: "one".into(),
                run_id: "r1".into(),
                ..Default::default()
            },
            Some(GW_TWO),
        ))
        .await
        .unwrap_err();
    assert_eq!(by_run.code(), Code::PermissionDenied);
    let stats = c
        .get_stats(authed(
            api::GetStatsRequest {
                host_id: "one".into(),
            },
            Some(GW_ONE),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.in_flight, 1, "the ticket is still held");
    // A ticket id of another host hidden in a batch of one's own is refused as a whole.
    let own = c
        .submit(authed(submit_req("two", "bob", "r2"), Some(GW_TWO)))
        .await
        .unwrap()
        .into_inner()
        .ticket_id;
    let renew = c
        .renew(authed(
            api::RenewRequest {
                ticket_ids: vec![own, ticket],
                rss_mb: None,
            },
            Some(GW_TWO),
        ))
        .await
        .unwrap_err();
    assert_eq!(renew.code(), Code::PermissionDenied);
}

#[tokio::test]
async fn tokens_never_reach_the_logs_or_error_messages() {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sec-log-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let config = config_file("sec-log", &credentials_yaml());
    let server = Server::spawn(
        &["--config", config.to_str().unwrap()],
        "debug",
        Stdio::from(file),
    );
    let channel = server.channel().await;
    let ticket = ticket_of_host_one(&channel).await;
    let mut messages = String::new();
    for token in [
        Some(GW_ONE),
        Some(GW_TWO),
        Some(OPS),
        Some("wrong-secret-91f3"),
    ] {
        codes(&channel, token, &ticket).await;
        let err = AdmissionClient::new(channel.clone())
            .submit(authed(submit_req("one", "", "x"), token))
            .await
            .unwrap_err();
        messages.push_str(err.message());
    }
    drop(channel);
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("DEBUG"), "debug logging was on: {logged}");
    for secret in [GW_ONE, GW_TWO, OPS, "wrong-secret-91f3"] {
        assert!(!logged.contains(secret), "{secret} in the log");
        assert!(!messages.contains(secret), "{secret} in an error message");
    }
}

#[tokio::test]
async fn credentials_allow_a_non_loopback_address_without_insecure() {
    let config = config_file("sec-exposed", &credentials_yaml());
    let server = Server::spawn(
        &[
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ],
        "warn",
        Stdio::null(),
    );
    assert!(server.addr.ip().is_unspecified());
}

/// A CA, a server certificate for localhost, and a client certificate for `gw-two.example`,
/// written as PEM files; returns (directory, CA PEM, client identity).
fn certificates(name: &str) -> (std::path::PathBuf, String, Identity) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |dns: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![dns.to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("gw-two.example");
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server_cert).unwrap();
    std::fs::write(dir.join("server.key"), server_key).unwrap();
    (dir, ca.pem(), Identity::from_pem(client_cert, client_key))
}

async fn tls_channel(
    server: &Server,
    ca: &str,
    identity: Option<Identity>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(id);
    }
    Channel::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn tls_serves_encrypted_and_tokens_work_over_it() {
    let (dir, ca, _) = certificates("sec-tls");
    let yaml = format!(
        "{}tls: {{ cert: {d}/server.pem, key: {d}/server.key }}\n",
        credentials_yaml(),
        d = dir.display()
    );
    let server = Server::start_with_config("sec-tls", &yaml, &[]);
    let channel = tls_channel(&server, &ca, None)
        .await
        .expect("a TLS connection");
    let r = AdmissionClient::new(channel)
        .submit(authed(submit_req("one", "alice", "r1"), Some(GW_ONE)))
        .await
        .unwrap();
    assert_eq!(r.into_inner().state, api::TicketState::Admitted as i32);
    // A plaintext client gets nowhere.
    let plain = Channel::from_shared(server.url()).unwrap().connect().await;
    if let Ok(ch) = plain {
        let err = AdmissionClient::new(ch)
            .submit(authed(submit_req("one", "alice", "r2"), Some(GW_ONE)))
            .await
            .unwrap_err();
        assert_ne!(err.code(), Code::Ok);
    }
}

#[tokio::test]
async fn under_tls_the_console_is_served_over_tls_and_plain_http_keeps_only_the_probes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let (dir, ca, _) = certificates("sec-admin-tls");
    let admin = common::free_port();
    let yaml = format!(
        "{}tls: {{ cert: {d}/server.pem, key: {d}/server.key }}\nadmin_listen: 127.0.0.1:{admin}\n",
        credentials_yaml(),
        d = dir.display()
    );
    let _server = Server::start_with_config("sec-admin-tls", &yaml, &[]);
    // Plain HTTP: the probes and the metrics as before; the console refused, naming TLS.
    assert_eq!(common::http_get(admin, "/readyz").0, 200);
    assert_eq!(common::http_get(admin, "/metrics").0, 200);
    let (status, body) = common::http_get(admin, "/console");
    assert_eq!(status, 403);
    assert!(body.contains("served over TLS"), "{body}");

    // Over TLS, trusting the installation's CA: the page, with its policy.
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", admin))
        .await
        .unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("a TLS handshake with the admin endpoint");
    tls.write_all(b"GET /console HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    let _ = tls.read_to_string(&mut text).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_lowercase()
            .contains("content-security-policy: default-src 'none'"),
        "{text}"
    );
    assert!(text.contains("admission-authority console"), "{text}");
}

#[tokio::test]
async fn mtls_maps_a_client_certificate_to_a_gateway_and_refuses_clients_without_one() {
    let (dir, ca, identity) = certificates("sec-mtls");
    let yaml = format!(
        "credentials:
  - {{ name: gw-cert, role: gateway, host_ids: [two], client_cert_dns: gw-two.example }}
tls: {{ cert: {d}/server.pem, key: {d}/server.key, client_ca: {d}/ca.pem }}
",
        d = dir.display()
    );
    let server = Server::start_with_config("sec-mtls", &yaml, &[]);
    let channel = tls_channel(&server, &ca, Some(identity))
        .await
        .expect("an mTLS connection");
    let mut c = AdmissionClient::new(channel);
    let r = c
        .submit(Request::new(submit_req("two", "alice", "r1")))
        .await
        .expect("the certificate stands for gw-cert");
    assert_eq!(r.into_inner().state, api::TicketState::Admitted as i32);
    let other = c
        .submit(Request::new(submit_req("one", "alice", "r1")))
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::PermissionDenied);

    // Without a client certificate the handshake (or the first call) fails.
    match tls_channel(&server, &ca, None).await {
        Err(_) => {}
        Ok(ch) => {
            let err = AdmissionClient::new(ch)
                .submit(Request::new(submit_req("two", "bob", "r2")))
                .await
                .unwrap_err();
            assert_ne!(err.code(), Code::Ok);
            assert_ne!(err.code(), Code::PermissionDenied);
        }
    }
}

#[tokio::test]
async fn wait_streams_per_connection_and_message_size_are_capped() {
    let server = Server::start_with_config(
        "sec-limits",
        "scheduling: { total: 1, queue: { total: 10 } }\n\
         grpc: { max_wait_streams_per_connection: 2, max_message_bytes: 2048 }\n",
        &[],
    );
    let channel = server.channel().await;
    let mut c = AdmissionClient::new(channel.clone());
    c.submit(submit_req("h", "holder", "hold")).await.unwrap();
    let mut queued = Vec::new();
    for i in 0..3 {
        let t = c
            .submit(submit_req("h", &format!("w{i}"), &format!("w{i}")))
            .await
            .unwrap()
            .into_inner()
            .ticket_id;
        queued.push(t);
    }
    let wait = |t: &str| api::WaitRequest {
        ticket_id: t.to_string(),
    };
    let first = c.wait(wait(&queued[0])).await.unwrap().into_inner();
    let _second = c.wait(wait(&queued[1])).await.unwrap().into_inner();
    let third = c.wait(wait(&queued[2])).await.unwrap_err();
    assert_eq!(third.code(), Code::ResourceExhausted);
    assert_eq!(
        third.get_details_error_info().unwrap().reason,
        "TOO_MANY_STREAMS"
    );
    // Another connection has its own allowance; closing a stream frees a place on this one.
    let mut other = server.client().await;
    other
        .wait(wait(&queued[2]))
        .await
        .expect("another connection");
    drop(first);
    eventually("a place to free up", Duration::from_secs(5), || {
        let mut c = c.clone();
        let req = wait(&queued[2]);
        async move { c.wait(req).await.ok().map(drop) }
    })
    .await;

    // A message over max_message_bytes is refused before it is decoded.
    let huge = api::RenewRequest {
        ticket_ids: vec!["h.00000000000000000000000000000000".into(); 100],
        rss_mb: None,
    };
    let err = c.renew(huge).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
}
