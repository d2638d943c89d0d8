//! The admin endpoint: `/metrics` after a known sequence of RPCs, `/healthz`, `/readyz`.

mod common;

use admission_authority::api;
use common::{Server, free_port, http_get as get, release, submit_req};

#[tokio::test]
async fn metrics_count_a_known_sequence_of_rpcs() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start(&[
        "--total",
        "1",
        "--queue-total",
        "1",
        "--admin-listen",
        &admin,
    ]);
    let mut c = server.client().await;
    // One admitted, one queued, one QUEUE_FULL, one BUSY (TRY); then the holder leaves.
    let holder = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    c.submit(submit_req("h", "bob", "r2")).await.unwrap();
    c.submit(submit_req("h", "carol", "r3")).await.unwrap_err();
    let mut try_req = submit_req("h", "dave", "r4");
    try_req.mode = api::SubmitMode::Try as i32;
    c.submit(try_req).await.unwrap_err();
    release(&mut c, &holder.ticket_id).await;
    for _ in 0..6 {
        c.check_auth_attempt(api::AuthAttemptRequest {
            endpoint: "magic_link".into(),
            identity: "mallory@example.com".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    c.authorize(api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: "run".into(),
        step: 1,
        subject: "alice".into(),
        account_id: String::new(),
        model: String::new(),
        requested_output_tokens: 10,
        estimated_input_tokens: 0,
        estimated_cost_usd: 0.0,
    })
    .await
    .unwrap();

    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "admission_decisions_total{rpc=\"Submit\",decision=\"admitted\",reason=\"\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"queued\",reason=\"\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"refused\",reason=\"QUEUE_FULL\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"refused\",reason=\"BUSY\"} 1",
        "admission_decisions_total{rpc=\"Authorize\",decision=\"allow\",reason=\"\"} 1",
        "admission_auth_attempts_total{endpoint=\"magic_link\",outcome=\"allowed\"} 5",
        "admission_auth_attempts_total{endpoint=\"magic_link\",outcome=\"locked_out\"} 1",
        "admission_tickets_in_flight{host_id=\"h\"} 1",
        "admission_queue_wait_seconds_count{host_id=\"h\"} 1",
        "admission_queue_wait_seconds_bucket{host_id=\"h\",le=\"+Inf\"} 1",
        "admission_tickets_queued{host_id=\"h\"} 0",
        "admission_tickets_total{host_id=\"h\",outcome=\"admitted\"} 2",
        "admission_tickets_total{host_id=\"h\",outcome=\"rejected\"} 2",
        "admission_tickets_total{host_id=\"h\",outcome=\"released\"} 1",
        "admission_reservations_open{host_id=\"h\"} 1",
        "admission_store_errors_total 0",
        "admission_auth_fallback_active 0",
        "admission_draining 0",
        // The RPCs' latency by method and code: 2 Submits answered, 2 refused.
        "admission_grpc_server_handling_seconds_count{grpc_service=\"admission.v1.Admission\",grpc_method=\"Submit\",grpc_code=\"OK\"} 2",
        "admission_grpc_server_handling_seconds_count{grpc_service=\"admission.v1.Admission\",grpc_method=\"Submit\",grpc_code=\"RESOURCE_EXHAUSTED\"} 2",
        "admission_grpc_server_handling_seconds_count{grpc_service=\"admission.v1.Admission\",grpc_method=\"CheckAuthAttempt\",grpc_code=\"OK\"} 6",
        "admission_grpc_server_handling_seconds_bucket{grpc_service=\"admission.v1.Admission\",grpc_method=\"Authorize\",grpc_code=\"OK\",le=\"+Inf\"} 1",
        // The store calls' latency by operation: 4 Submits reached the store.
        "admission_store_call_duration_seconds_count{operation=\"submit\",result=\"ok\"} 4",
        "admission_store_call_duration_seconds_count{operation=\"auth_attempt\",result=\"ok\"} 6",
        "admission_store_call_duration_seconds_count{operation=\"authorize\",result=\"ok\"} 1",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    assert!(
        !body.contains("mallory") && !body.contains("alice"),
        "no identity or subject labels"
    );
    // The Wait stream is not timed (its answer's headers only say it opened).
    assert!(!body.contains("grpc_method=\"Wait\""), "{body}");
    assert_eq!(get(port, "/healthz").0, 200);
    assert_eq!(get(port, "/readyz").0, 200);
    server
        .operator()
        .await
        .drain(api::DrainRequest {})
        .await
        .unwrap();
    assert_eq!(get(port, "/readyz").0, 503, "draining is not ready");
    assert_eq!(get(port, "/healthz").0, 200);
    assert_eq!(get(port, "/nope").0, 404);
}

/// Per-host series stay bounded however many host ids callers invent: the first
/// `metrics.max_hosts` by name get their own, the rest are summed under `_other`.
#[tokio::test]
async fn per_host_series_are_bounded_by_metrics_max_hosts() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start_with_config(
        "max-hosts",
        "metrics: { max_hosts: 2 }\n",
        &["--admin-listen", &admin],
    );
    let mut c = server.client().await;
    for host in ["h1", "h2", "h3", "h4", "h5"] {
        c.submit(submit_req(host, "alice", "r1")).await.unwrap();
    }
    let body = common::eventually(
        "the admin port",
        std::time::Duration::from_secs(5),
        || async {
            let (status, body) = get(port, "/metrics");
            (status == 200).then_some(body)
        },
    )
    .await;
    for line in [
        "admission_tickets_in_flight{host_id=\"h1\"} 1",
        "admission_tickets_in_flight{host_id=\"h2\"} 1",
        "admission_tickets_in_flight{host_id=\"_other\"} 3",
        "admission_tickets_total{host_id=\"_other\",outcome=\"admitted\"} 3",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    assert!(!body.contains("host_id=\"h3\""), "{body}");
}

/// The metric names and labels one PromQL expression uses: identifiers that name an
/// `admission_*` metric (or `up`), and the label names of matchers (`{label="..."}`) and of
/// `by` / `on` / `without` / `ignoring` lists. Strings and range selectors are skipped.
fn promql_names(expr: &str) -> (Vec<String>, Vec<String>) {
    let (mut metrics, mut labels) = (Vec::new(), Vec::new());
    let b = expr.as_bytes();
    let (mut i, mut in_braces, mut label_list) = (0, false, false);
    let mut last_ident = String::new();
    while i < b.len() {
        let c = b[i] as char;
        if c == '"' || c == '\'' {
            i += 1;
            while i < b.len() && b[i] as char != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            while i < b.len() && b[i] != b']' {
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                i += 1;
            }
            let word = &expr[start..i];
            if word.starts_with('$') {
                // A Grafana variable ($__rate_interval, $host).
            } else if in_braces || label_list {
                labels.push(word.to_string());
            } else if word.starts_with("admission_") || word == "up" {
                metrics.push(word.to_string());
            }
            last_ident = word.to_string();
        } else {
            match c {
                '{' => in_braces = true,
                '}' => in_braces = false,
                '(' => {
                    label_list = [
                        "by",
                        "on",
                        "without",
                        "ignoring",
                        "group_left",
                        "group_right",
                    ]
                    .contains(&last_ident.as_str());
                }
                ')' => label_list = false,
                _ => {}
            }
            if !c.is_whitespace() && c != '(' {
                last_ident.clear();
            }
            i += 1;
        }
    }
    (metrics, labels)
}

#[test]
fn promql_names_reads_metrics_matchers_and_groupings() {
    let (m, l) = promql_names(
        "histogram_quantile(0.99, sum by (host_id, le) (rate(admission_queue_wait_seconds_bucket{host_id=~\"$host\"}[$__rate_interval]))) and on (instance) up == 0",
    );
    assert_eq!(m, ["admission_queue_wait_seconds_bucket", "up"]);
    assert_eq!(l, ["host_id", "le", "host_id", "instance"]);
}

/// Every query of the Grafana dashboard and every alert rule names metrics the binary exports
/// and labels those metrics carry, checked against a real scrape after RPCs that give every
/// family a sample; and `promtool check metrics` accepts that scrape.
#[tokio::test]
async fn the_dashboard_and_alert_rules_query_only_what_a_scrape_shows() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start_with_config(
        "dashboard",
        "scheduling:\n  total: 2\n  queue: { total: 1 }\n  accounts:\n    provider: { adaptive: { min: 1, max: 4 } }\n",
        &["--admin-listen", &admin],
    );
    let mut c = server.client().await;
    let mut with_account = submit_req("h", "alice", "r1");
    with_account.account_id = "provider".into();
    // The holder stays (an adaptive cap is shown while its account has live tickets); dave
    // leaves, and bob, queued behind him, is admitted (a queue wait is observed).
    let holder = c.submit(with_account).await.unwrap().into_inner();
    let dave = c
        .submit(submit_req("h", "dave", "r0"))
        .await
        .unwrap()
        .into_inner();
    c.submit(submit_req("h", "bob", "r2")).await.unwrap();
    c.submit(submit_req("h", "carol", "r3")).await.unwrap_err();
    // A reclaim of a run that never ran here is refused (admission_reclaim_refused_total).
    c.reclaim(api::ReclaimRequest {
        ticket_id: holder.ticket_id.clone(),
        host_id: "h".into(),
        run_id: "another-run".into(),
        subject: "alice".into(),
        instance_id: "replica-1".into(),
        grant: holder.grant,
        ..Default::default()
    })
    .await
    .unwrap_err();
    c.check_auth_attempt(api::AuthAttemptRequest {
        endpoint: "approval".into(),
        identity: "someone".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.authorize(api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: "run".into(),
        step: 1,
        subject: "alice".into(),
        requested_output_tokens: 10,
        ..Default::default()
    })
    .await
    .unwrap();
    release(&mut c, &dave.ticket_id).await;
    let (status, scrape) = get(port, "/metrics");
    assert_eq!(status, 200);

    // What the scrape shows: each family's samples' names, with the labels they carry.
    let mut exported: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap();
        let labels = exported.entry(line[..name_end].to_string()).or_default();
        if let Some(set) = line[name_end..].strip_prefix('{') {
            for pair in set[..set.find('}').unwrap()].split("\",") {
                labels.insert(pair.split('=').next().unwrap().to_string());
            }
        }
    }
    // Labels Prometheus adds to every scraped series.
    let target = ["instance", "job"];

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut queries: Vec<(String, String)> = Vec::new();
    let rules: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(root.join("deploy/prometheus-rules.yaml")).unwrap(),
    )
    .unwrap();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"].as_str().unwrap().to_string();
            queries.push((name, rule["expr"].as_str().unwrap().to_string()));
        }
    }
    // JSON is YAML: the dashboard reads with the same parser.
    let dashboard: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_sequence().unwrap() {
        let title = panel["title"].as_str().unwrap();
        for t in panel["targets"].as_sequence().into_iter().flatten() {
            queries.push((title.to_string(), t["expr"].as_str().unwrap().to_string()));
        }
    }
    for var in dashboard["templating"]["list"].as_sequence().unwrap() {
        if let Some(q) = var["query"]["query"].as_str() {
            queries.push((
                format!("variable {}", var["name"].as_str().unwrap()),
                q.into(),
            ));
        }
    }
    assert!(queries.len() > 20, "{queries:?}");
    for (what, expr) in &queries {
        let (metrics, labels) = promql_names(expr);
        assert!(!metrics.is_empty(), "{what}: no metric in {expr}");
        for m in &metrics {
            assert!(
                m == "up" || exported.contains_key(m),
                "{what}: {m} is not exported (query: {expr})"
            );
        }
        for l in &labels {
            let carried = metrics
                .iter()
                .any(|m| exported.get(m).is_some_and(|ls| ls.contains(l)));
            assert!(
                carried || target.contains(&l.as_str()),
                "{what}: no metric of {metrics:?} carries the label {l} (query: {expr})"
            );
        }
    }

    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (the test command installs Debian's prometheus package)");
    use std::io::Write as _;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
