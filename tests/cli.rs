//! The binary's command line: `check-config` on one fixture file per problem (the exact
//! message asserted), flags over file over defaults, and the refusal to serve openly on a
//! non-loopback address.

mod common;

use std::path::Path;
use std::process::Command;

use common::BIN;

fn check_config(file: &Path) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(file)
        .output()
        .expect("run check-config");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each `tests/config/bad/NAME.yaml` must fail with exit 2 and print exactly `NAME.err` (with
/// the checkout's place written `<repo>`: problems of rate limit files name their file).
#[test]
fn every_bad_fixture_fails_with_its_exact_messages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/config/bad");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let expected = std::fs::read_to_string(path.with_extension("err"))
            .unwrap_or_else(|_| panic!("{} needs a .err file", path.display()));
        let (code, stdout, stderr) = check_config(&path);
        assert_eq!(code, 2, "{}: {stdout}", path.display());
        let stderr = stderr.replace(env!("CARGO_MANIFEST_DIR"), "<repo>");
        assert_eq!(stderr.trim_end(), expected.trim_end(), "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} fixtures found");
}

#[test]
fn a_good_file_prints_the_resolved_configuration() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/config/good.yaml");
    let (code, stdout, stderr) = check_config(&path);
    assert_eq!(code, 0, "{stderr}");
    let expected = std::fs::read_to_string(path.with_extension("resolved")).unwrap();
    // Relative paths in the file resolve against its directory; the checkout's place varies.
    assert_eq!(
        stdout.replace(env!("CARGO_MANIFEST_DIR"), "<repo>"),
        expected
    );
}

#[test]
fn gateway_yaml_aliases_are_accepted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/config/aliases.yaml");
    let (code, stdout, stderr) = check_config(&path);
    assert_eq!(code, 0, "{stderr}");
    for line in [
        "  total: 8\n",
        "  per_subject: 2\n",
        "  queue: {total: 20, per_subject: 0, hard_total: 80}\n",
        "  overflow_policy: shed_oldest\n",
        "  max_rss_mb: 2048\n",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
}

#[test]
fn a_missing_file_is_named() {
    let (code, _, stderr) = check_config(Path::new("/nonexistent/admission.yaml"));
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("/nonexistent/admission.yaml: cannot read"),
        "{stderr}"
    );
}

#[test]
fn flags_are_checked_like_the_file() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--total",
            "0",
            "--lease-ttl",
            "soon",
            "--overflow-policy",
            "drop",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        "--total: must be >= 1\n\
         --overflow-policy: must be one of reject, shed_oldest, queue, got \"drop\"\n\
         --lease-ttl: must be a duration like 500ms, 30s, 10m or 1h, got \"soon\""
    );
}

#[test]
fn serving_openly_on_a_non_loopback_address_needs_insecure() {
    let out = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--insecure"),
        "{stderr}"
    );

    // With --insecure it serves (and we stop it by its PID).
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0", "--insecure"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on 0.0.0.0:"), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn flags_override_the_file_and_hosts_override_the_base() {
    let dir = std::env::temp_dir().join(format!("aa-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        "scheduling: { total: 10, per_subject: 3 }\nhosts:\n  small:\n    scheduling: { total: 2 }\n",
    )
    .unwrap();
    let config = admission_authority::config::load(
        Some(&file),
        &admission_authority::config::Overrides {
            total: Some(20),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(config.limits.default.total, 20, "flag over file");
    assert_eq!(config.limits.default.per_subject, 3, "file over default");
    assert_eq!(
        config.limits.for_host("small").total,
        2,
        "host block over flag"
    );
    assert_eq!(
        config.limits.for_host("small").per_subject,
        3,
        "host inherits the base"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hash_token_prints_the_sha256_that_token_sha256_takes() {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0",
        "SHA-256 of the token without its trailing newline"
    );
}

#[test]
fn serve_help_says_the_defaults_of_the_scheduling_flags() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run serve --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for line in [
        "--total <N>",
        "--per-subject <N>",
        "--lease-ttl <DURATION>",
        "--queue-total <N>",
    ] {
        let at = help
            .find(line)
            .unwrap_or_else(|| panic!("{line} missing:\n{help}"));
        let rest = &help[at..];
        let entry = &rest[..rest.find('\n').unwrap_or(rest.len())];
        assert!(entry.contains("default"), "no default in: {entry}");
    }
    assert!(
        help.contains("default 32") && help.contains("default 30s"),
        "{help}"
    );
}
