//! The deploy files parse, and name the same ports, probes, paths and config keys as the code:
//! the configuration they ship passes `check-config`, the compose file and the Kubernetes
//! manifests expose the ports it listens on, and the systemd unit passes
//! `systemd-analyze verify` where systemd is installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::BIN;
use serde_norway::Value;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

fn yaml(file: &str) -> Value {
    let text = std::fs::read_to_string(deploy(file)).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// `check-config` on a configuration text, with the tokens its credentials read set.
fn check_config(name: &str, text: &str) -> String {
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .env("ADMISSION_GATEWAY_TOKEN", "test-gateway-token")
        .env("ADMISSION_OPERATOR_TOKEN", "test-operator-token")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const CONFIG_PATH: &str = "/etc/admission/admission.yaml";
/// Where the single authority keeps its state: the image's volume, the StatefulSet's claim,
/// the systemd unit's StateDirectory.
const DATA_DIR: &str = "/var/lib/admission";

#[test]
fn the_shipped_configuration_passes_check_config_and_listens_where_the_files_say() {
    let text = std::fs::read_to_string(deploy("admission.yaml")).unwrap();
    let resolved = check_config("deploy-admission", &text);
    assert!(resolved.contains("listen: 0.0.0.0:50051"), "{resolved}");
    assert!(
        resolved.contains("admin_listen: 0.0.0.0:9464"),
        "{resolved}"
    );
    // The ConfigMap carries the same configuration.
    let cm = yaml("k8s/configmap.yaml");
    let embedded = cm["data"]["admission.yaml"].as_str().unwrap();
    assert_eq!(check_config("deploy-configmap", embedded), resolved);
}

#[test]
fn the_single_authority_configuration_keeps_its_state_in_the_volume() {
    let text = std::fs::read_to_string(deploy("admission-single.yaml")).unwrap();
    let resolved = check_config("deploy-single", &text);
    assert!(
        resolved.contains(&format!(
            "embedded: {{data_dir: \"{DATA_DIR}\", sync: interval"
        )),
        "{resolved}"
    );
    assert!(resolved.contains("listen: 0.0.0.0:50051"), "{resolved}");
    let cm = yaml("k8s/configmap.yaml");
    let embedded = cm["data"]["admission-single.yaml"].as_str().unwrap();
    assert_eq!(check_config("deploy-configmap-single", embedded), resolved);
}

#[test]
fn the_container_image_runs_the_shipped_configuration() {
    let dockerfile = std::fs::read_to_string(deploy("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("FROM rust:1.95"),
        "builder on the project's toolchain"
    );
    assert!(dockerfile.contains(&format!("COPY deploy/admission-single.yaml {CONFIG_PATH}")));
    assert!(dockerfile.contains(&format!("VOLUME {DATA_DIR}")));
    assert!(dockerfile.contains(&format!("chown 10001 {DATA_DIR}")));
    assert!(dockerfile.contains(&format!(
        "ENTRYPOINT [\"admission-authority\", \"serve\", \"--config\", \"{CONFIG_PATH}\"]"
    )));
    assert!(dockerfile.contains("EXPOSE 50051 9464"));
}

#[test]
fn compose_runs_redis_and_two_replicas_on_the_configured_ports() {
    let c = yaml("compose.yaml");
    let services = c["services"].as_mapping().unwrap();
    assert!(services.contains_key("redis"));
    let config = yaml("admission.yaml");
    assert_eq!(
        config["store"]["redis"]["url"].as_str(),
        Some("redis://redis:6379/0"),
        "the config reaches the compose service named redis"
    );
    for (name, ports) in [
        ("authority-1", ["50051:50051", "9464:9464"]),
        ("authority-2", ["50052:50051", "9465:9464"]),
    ] {
        let s = &services[name];
        let published: Vec<&str> = s["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(published, ports, "{name}");
        let volume = s["volumes"][0].as_str().unwrap();
        assert_eq!(
            volume,
            format!("./admission.yaml:{CONFIG_PATH}:ro"),
            "{name}"
        );
        assert_eq!(s["build"]["dockerfile"].as_str(), Some("deploy/Dockerfile"));
        for token in ["ADMISSION_GATEWAY_TOKEN", "ADMISSION_OPERATOR_TOKEN"] {
            assert!(s["environment"].get(token).is_some(), "{name} sets {token}");
        }
    }
    // The single authority: the image's own configuration, its data dir on a named volume.
    let single = &services["authority"];
    assert_eq!(single["profiles"][0].as_str(), Some("single"));
    assert_eq!(
        single["volumes"][0].as_str(),
        Some(format!("admission-data:{DATA_DIR}").as_str())
    );
    assert!(c["volumes"].get("admission-data").is_some());
}

#[test]
fn the_statefulset_runs_one_authority_with_its_data_dir_on_a_claim() {
    let s = yaml("k8s/statefulset.yaml");
    assert_eq!(s["kind"].as_str(), Some("StatefulSet"));
    assert_eq!(
        s["spec"]["replicas"].as_u64(),
        Some(1),
        "a data dir is one process's"
    );
    let c = &s["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["args"][2].as_str(),
        Some("/etc/admission/admission-single.yaml")
    );
    let claim = s["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        .as_str()
        .unwrap();
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    assert!(
        mounts.iter().any(|m| m["name"].as_str() == Some(claim)
            && m["mountPath"].as_str() == Some(DATA_DIR)),
        "{mounts:?}"
    );
    assert_eq!(c["readinessProbe"]["grpc"]["port"].as_u64(), Some(50051));
    let d = yaml("k8s/deployment.yaml");
    assert_eq!(
        s["spec"]["selector"], d["spec"]["selector"],
        "the Service finds either"
    );
}

#[test]
fn kubernetes_manifests_probe_grpc_health_on_the_configured_ports() {
    let d = yaml("k8s/deployment.yaml");
    assert_eq!(d["kind"].as_str(), Some("Deployment"));
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 30,
        "longer than drain_grace"
    );
    let c = &pod["containers"][0];
    let ports: Vec<(String, u64)> = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [("grpc".to_string(), 50051), ("admin".to_string(), 9464)]
    );
    assert_eq!(c["readinessProbe"]["grpc"]["port"].as_u64(), Some(50051));
    assert_eq!(
        c["readinessProbe"]["grpc"]["service"].as_str(),
        Some("admission.v1.Admission"),
        "a service the health reporter knows"
    );
    assert_eq!(c["livenessProbe"]["grpc"]["port"].as_u64(), Some(50051));
    assert_eq!(
        c["volumeMounts"][0]["mountPath"].as_str(),
        Some("/etc/admission")
    );
    assert_eq!(c["args"][2].as_str(), Some(CONFIG_PATH));
    assert_eq!(
        c["envFrom"][0]["secretRef"]["name"].as_str(),
        Some("admission-authority-tokens")
    );
    let secret = yaml("k8s/secret.yaml");
    assert_eq!(
        secret["metadata"]["name"].as_str(),
        Some("admission-authority-tokens")
    );
    for token in ["ADMISSION_GATEWAY_TOKEN", "ADMISSION_OPERATOR_TOKEN"] {
        assert!(secret["stringData"].get(token).is_some());
    }
    let svc = yaml("k8s/service.yaml");
    let svc_ports: Vec<u64> = svc["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_u64().unwrap())
        .collect();
    assert_eq!(svc_ports, [50051, 9464]);
    let pdb = yaml("k8s/pdb.yaml");
    assert_eq!(pdb["kind"].as_str(), Some("PodDisruptionBudget"));
    assert_eq!(pdb["spec"]["selector"], d["spec"]["selector"]);
}

#[test]
fn the_systemd_unit_is_valid_and_runs_the_shipped_configuration() {
    let unit = std::fs::read_to_string(deploy("admission-authority.service")).unwrap();
    for section in ["[Unit]", "[Service]", "[Install]"] {
        assert!(unit.contains(section), "{section}");
    }
    assert!(unit.contains(&format!(
        "ExecStart=/usr/local/bin/admission-authority serve --config {CONFIG_PATH}"
    )));
    assert!(unit.contains("KillSignal=SIGTERM"));
    assert!(
        unit.contains("StateDirectory=admission"),
        "its data dir, {DATA_DIR}"
    );
    // systemd-analyze checks the unit's syntax and that ExecStart exists: point it at the
    // binary under test.
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join("admission-authority.service");
        std::fs::write(
            &copy,
            unit.replace("/usr/local/bin/admission-authority", BIN),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The build stage's `COPY` lines (without `--from`): every source path with where it lands
/// relative to the stage's `WORKDIR`; and the stage's `RUN` commands.
fn build_stage(dockerfile: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut copies = Vec::new();
    let mut runs = Vec::new();
    let mut stages = 0;
    for line in dockerfile.lines().map(str::trim) {
        if line.starts_with("FROM ") {
            stages += 1;
            continue;
        }
        if stages != 1 {
            continue;
        }
        if let Some(rest) = line.strip_prefix("COPY ") {
            assert!(!rest.starts_with("--"), "a flag in the build stage: {line}");
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (dest, sources) = words.split_last().expect("COPY with a destination");
            for source in sources {
                let to = if dest.ends_with('/') {
                    format!("{dest}{source}")
                } else {
                    assert_eq!(sources.len(), 1, "several sources need a directory: {line}");
                    dest.to_string()
                };
                copies.push((source.to_string(), to));
            }
        } else if let Some(cmd) = line.strip_prefix("RUN ") {
            runs.push(cmd.to_string());
        }
    }
    (copies, runs)
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// No Docker daemon runs here, so the image's build is replayed: exactly the files the build
/// stage copies go into an empty directory, and its `RUN` command builds there. A file the
/// binary needs (a proto, the console it embeds) that the Dockerfile does not copy fails this.
/// The release profile is made cheap by environment (no optimisation, no LTO), so the build
/// takes what a debug build takes; the files it reads are what is tested, not the code.
#[test]
fn the_image_builds_from_exactly_the_files_the_dockerfile_copies() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(deploy("Dockerfile")).unwrap();
    let (copies, runs) = build_stage(&dockerfile);
    assert!(!copies.is_empty(), "the build stage copies nothing");
    let context = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docker-build-context");
    let _ = std::fs::remove_dir_all(&context);
    for (source, to) in &copies {
        copy_tree(&repo.join(source), &context.join(to));
    }
    assert_eq!(runs.len(), 1, "one RUN in the build stage: {runs:?}");
    // Kept apart from the tests' own target dir (whose lock the running `cargo test` holds),
    // and kept between runs so a second run is incremental.
    let target = repo.join("target").join("docker-build");
    let out = Command::new("sh")
        .arg("-c")
        .arg(&runs[0])
        .current_dir(&context)
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "true")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the build from the Dockerfile's files failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The binary it made runs the configuration the image ships.
    let bin = target.join("release").join("admission-authority");
    let check = Command::new(&bin)
        .arg("check-config")
        .arg(deploy("admission-single.yaml"))
        .env("ADMISSION_GATEWAY_TOKEN", "test-gateway-token")
        .env("ADMISSION_OPERATOR_TOKEN", "test-operator-token")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
