//! The README and the docs say what is true: every YAML block they show is a configuration
//! `check-config` accepts, and what `check-config` prints loads back as the same configuration.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::BIN;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The fenced blocks of `lang` in markdown text, with the line each starts on.
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == format!("```{lang}") => {
                current = Some((i + 1, String::new()))
            }
            Some(_) if line.trim_start().starts_with("```") => out.push(current.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// `check-config FILE` in `dir`: exit code, stdout, stderr.
fn check_config(file: &Path, dir: &Path) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(file)
        .current_dir(dir)
        .env(
            "ADMISSION_OPERATOR_TOKEN",
            "an-operator-token-for-the-docs-test",
        )
        .env("ENVOY_RLS_TOKEN", "an-envoy-token-for-the-docs-test")
        .output()
        .expect("run check-config");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("aa-docs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory holding what the docs' examples refer to: TLS files and a token file next to
/// the config, a token file under secrets/, and a rate limit file under ratelimit/.
fn workspace() -> Scratch {
    let dir = Scratch::new();
    for f in ["server.pem", "server.key", "ca.pem", "ops.token"] {
        std::fs::copy(repo().join("tests/config/tls").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::create_dir(dir.path().join("ratelimit")).unwrap();
    std::fs::copy(
        repo().join("tests/config/ratelimit/api.yaml"),
        dir.path().join("ratelimit/api.yaml"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/gw-two"), "gw-two-token\n").unwrap();
    dir
}

/// `check-config` accepts `yaml`, and its output is a fixed point: fed back, it is accepted and
/// printed unchanged.
fn loads_back(yaml: &str, what: &str) {
    let dir = workspace();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, yaml).unwrap();
    let (code, printed, stderr) = check_config(&file, dir.path());
    assert_eq!(code, 0, "{what}: check-config refused it:\n{stderr}");
    // Fed back from another directory: nothing in it may depend on where it was printed.
    let elsewhere = Scratch::new();
    let again = elsewhere.path().join("printed.yaml");
    std::fs::write(&again, &printed).unwrap();
    let (code, reprinted, stderr) = check_config(&again, elsewhere.path());
    assert_eq!(
        code, 0,
        "{what}: check-config's output does not load back:\n{stderr}\n{printed}"
    );
    assert_eq!(
        reprinted, printed,
        "{what}: loading the output back changed it"
    );
}

#[test]
fn every_yaml_block_in_the_readme_and_docs_is_a_configuration_that_loads_back() {
    let mut checked = 0;
    for page in pages() {
        for (line, yaml) in blocks(&std::fs::read_to_string(&page).unwrap(), "yaml") {
            let name = page.strip_prefix(repo()).unwrap().display().to_string();
            loads_back(&yaml, &format!("{name}:{line}"));
            checked += 1;
        }
    }
    assert!(checked >= 5, "found only {checked} YAML blocks");
}

#[test]
fn check_configs_output_loads_back_for_the_full_fixture_and_for_no_settings() {
    let good = std::fs::read_to_string(repo().join("tests/config/good.yaml")).unwrap();
    // good.yaml names its TLS files under tls/; the workspace has them at its top.
    loads_back(&good.replace("tls/", ""), "tests/config/good.yaml");
    loads_back("{}\n", "an empty file");
}

/// One command of a console block and what the README says it prints.
struct Step {
    line: usize,
    command: String,
    expected: String,
}

/// The `$ ` commands of a console block (a trailing `\` continues a command on the next line)
/// and the lines each prints, up to the next command.
fn steps(start: usize, block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continuing = false;
    for (i, line) in block.lines().enumerate() {
        if continuing {
            let step = steps.last_mut().unwrap();
            step.command.push(' ');
            step.command
                .push_str(line.trim().trim_end_matches('\\').trim_end());
            continuing = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step {
                line: start + i + 1,
                command: cmd.trim_end_matches('\\').trim_end().to_string(),
                expected: String::new(),
            });
            continuing = line.ends_with('\\');
        } else if let Some(step) = steps.last_mut() {
            step.expected.push_str(line);
            step.expected.push('\n');
        }
    }
    steps
}

/// Split a command line as the shell would: words, and single-quoted strings kept whole.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in command.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// Values that differ from run to run (ids, fencing numbers, estimates, ages) become `_`.
fn steady(text: &str) -> String {
    let volatile = [
        "ticketId",
        "grant",
        "etaMs",
        "holdAvgMs",
        "inStateMs",
        "leaseRemainingMs",
        "ageMs",
    ];
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            match volatile
                .iter()
                .find(|k| trimmed.starts_with(&format!("\"{k}\": ")))
            {
                Some(k) => {
                    let indent = &line[..line.len() - trimmed.len()];
                    let comma = if trimmed.ends_with(',') { "," } else { "" };
                    format!("{indent}\"{k}\": _{comma}")
                }
                None => line.trim_end().to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// The ticket ids in a text, in order.
fn ticket_ids(text: &str) -> Vec<String> {
    text.split('"')
        .filter(|w| {
            w.split_once('.').is_some_and(|(_, key)| {
                key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit())
            })
        })
        .map(str::to_string)
        .collect()
}

/// The README's grpcurl session and its continuation in docs/session.md, run as a reader runs
/// them: the server the README's `sh` block starts, then every `$ grpcurl` command of their
/// console blocks in order (with the ticket ids the server really issued in place of the
/// README's), each printing what the page shows.
#[test]
fn the_readmes_grpcurl_session_runs_as_written() {
    let grpcurl = std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".into());
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let heading = "## A five-minute session with grpcurl";
    let offset = readme.find(heading).expect("the README has the session");
    let section = &readme[offset..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let serve = section
        .lines()
        .find_map(|l| l.strip_prefix("cargo run --release -- serve"))
        .expect("the session starts a server");
    let flags = words(serve);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = common::Server::start(&flags);
    let addr = server.addr.to_string();

    // (page, first line of its part, text): the README's section, then the continuation.
    let continued = std::fs::read_to_string(repo().join("docs/session.md")).unwrap();
    let parts = [
        ("README.md", readme[..offset].lines().count(), section),
        ("docs/session.md", 0, continued.as_str()),
    ];
    let mut renamed: Vec<(String, String)> = Vec::new();
    let mut ran = 0;
    for (page, first_line, text) in parts {
        for (line, block) in blocks(text, "console") {
            for step in steps(first_line + line, &block) {
                run_step(&grpcurl, &addr, page, &step, &mut renamed);
                ran += 1;
            }
        }
    }
    assert!(ran >= 18, "ran only {ran} commands of the session");
}

/// Run one command of the session and compare what it prints with what `page` shows.
/// `renamed` maps the page's ticket ids to the ones the server issued, in order of appearance.
fn run_step(
    grpcurl: &str,
    addr: &str,
    page: &str,
    step: &Step,
    renamed: &mut Vec<(String, String)>,
) {
    let mut command = step.command.replace("127.0.0.1:50051", addr);
    for (page_id, real) in renamed.iter() {
        command = command.replace(page_id, real);
    }
    let args = words(&command);
    let at = format!("{page}:{}: {}", step.line, step.command);
    assert_eq!(args[0], "grpcurl", "{at}");
    let out = Command::new(grpcurl)
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("run {grpcurl} (the test command installs it): {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every command the pages show, shows what it prints.
    assert!(
        !step.expected.trim().is_empty(),
        "{at}: the page shows no output; it prints:\n{printed}"
    );
    assert_eq!(steady(&printed), steady(&step.expected), "{at}");
    let new_ids: Vec<String> = ticket_ids(&step.expected)
        .into_iter()
        .filter(|id| !renamed.iter().any(|(p, _)| p == id))
        .collect();
    let issued: Vec<String> = ticket_ids(&printed)
        .into_iter()
        .filter(|id| !renamed.iter().any(|(_, r)| r == id))
        .collect();
    renamed.extend(new_ids.into_iter().zip(issued));
}

/// The `check-config` examples of docs/configuration.md and docs/operations.md print what the
/// pages say: the bad file shown, and the shipped file with its two token variables.
#[test]
fn the_check_config_examples_print_what_the_docs_show() {
    let page = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let (_, block) = blocks(&page, "console")
        .into_iter()
        .find(|(_, b)| b.contains("$ cat bad.yaml"))
        .expect("configuration.md shows bad.yaml");
    let (file, shown) = block
        .strip_prefix("$ cat bad.yaml\n")
        .and_then(|rest| rest.split_once("$ admission-authority check-config bad.yaml\n"))
        .expect("the file, then check-config's output");
    let dir = workspace();
    std::fs::write(dir.path().join("bad.yaml"), file).unwrap();
    let (code, _, err) = check_config(Path::new("bad.yaml"), dir.path());
    assert_eq!(
        (code, err.as_str()),
        (2, shown),
        "configuration.md's example"
    );

    let ops = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let command = ops
        .lines()
        .find_map(|l| l.strip_prefix("$ ADMISSION_GATEWAY_TOKEN="))
        .expect("operations.md shows check-config on the shipped file");
    let words: Vec<&str> = command.split_whitespace().collect();
    let (gateway, operator) = (
        words[0],
        words[1].strip_prefix("ADMISSION_OPERATOR_TOKEN=").unwrap(),
    );
    assert_eq!(
        &words[2..],
        [
            "admission-authority",
            "check-config",
            "deploy/admission.yaml",
            "|",
            "head",
            "-4"
        ]
    );
    let out = Command::new(BIN)
        .args(["check-config", "deploy/admission.yaml"])
        .current_dir(repo())
        .env("ADMISSION_GATEWAY_TOKEN", gateway)
        .env("ADMISSION_OPERATOR_TOKEN", operator)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The page shows the first four lines it prints.
    let (_, block) = blocks(&ops, "console")
        .into_iter()
        .find(|(_, b)| b.contains("check-config deploy/admission.yaml"))
        .unwrap();
    let shown: Vec<&str> = block.lines().skip(1).collect();
    let printed = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = printed.lines().take(4).collect();
    assert_eq!(shown, first, "operations.md's check-config example");
}

/// docs/data-dir.md's `data-dir inspect` example prints what the page shows, on the fixture it
/// names.
#[test]
fn the_data_dir_inspect_example_prints_what_the_page_shows() {
    let page = std::fs::read_to_string(repo().join("docs/data-dir.md")).unwrap();
    let (_, block) = blocks(&page, "console")
        .into_iter()
        .find(|(_, b)| b.contains("data-dir inspect"))
        .expect("data-dir.md shows data-dir inspect");
    let (command, shown) = block.split_once('\n').unwrap();
    let args: Vec<&str> = command
        .strip_prefix("$ admission-authority ")
        .expect("the binary's command")
        .split_whitespace()
        .collect();
    let out = Command::new(BIN)
        .args(&args)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
}
