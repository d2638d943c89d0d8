//! `admission-authority serve | check-config`: parse flags, load the configuration, and hand
//! over to [`admission_authority::server::run`].

use std::path::PathBuf;
use std::process::ExitCode;

use admission_authority::config::{self, Overrides};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use admission_authority::{server, telemetry};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "admission-authority",
    version,
    about = "The shared admission authority for AI-agent gateway fleets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve gRPC (embedded in-memory store, or Redis with --redis-url / store.redis).
    Serve(Box<ServeArgs>),
    /// Print the resolved configuration, or every problem of FILE (exit 2).
    CheckConfig {
        /// The YAML file to check.
        file: PathBuf,
    },
    /// Read a bearer token from standard input and print its SHA-256, for `token_sha256` in
    /// `credentials` (leading and trailing whitespace, such as a final newline, is ignored).
    HashToken,
    /// Work with a data dir (store.embedded.data_dir).
    DataDir {
        #[command(subcommand)]
        command: DataDirCommand,
    },
}

#[derive(Subcommand)]
enum DataDirCommand {
    /// Print what DIR holds (format, files and sizes, hosts with their tickets, reservations
    /// and limits, auth keys) without changing it; safe beside the server serving from it.
    Inspect {
        /// The data dir.
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// YAML configuration file; flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
    /// Log lines as text (default) or as JSON objects, one per line.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => match config::load(Some(&file), &Overrides::default()) {
            Ok(c) => {
                out(&c.render());
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::from(2)
            }
        },
        Command::Serve(args) => serve(*args),
        Command::DataDir {
            command: DataDirCommand::Inspect { dir, json },
        } => match admission_authority::store::memory::MemoryStore::inspect(&dir) {
            Ok(report) if json => {
                out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&report).expect("a report encodes as JSON")
                ));
                ExitCode::SUCCESS
            }
            Ok(report) => {
                out(&report.to_string());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::HashToken => {
            let mut token = String::new();
            if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut token) {
                eprintln!("cannot read the token from standard input: {e}");
                return ExitCode::from(2);
            }
            let token = token.trim();
            if token.is_empty() {
                eprintln!("no token on standard input");
                return ExitCode::from(2);
            }
            println!(
                "{}",
                admission_authority::security::hex(&admission_authority::security::sha256(
                    token.as_bytes()
                ))
            );
            ExitCode::SUCCESS
        }
    }
}

/// Print a command's output; a reader that went away (`| head`) is not an error.
fn out(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn serve(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let telemetry = match telemetry::start(runtime.handle(), args.log_format == "json") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (config_path, overrides) = (args.config, args.overrides);
    let config = match config::load(config_path.as_deref(), &overrides) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = config.check_exposure() {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let code = runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("listen: cannot bind {}: {e}", config.listen);
                return ExitCode::FAILURE;
            }
        };
        // SIGHUP reads the file again, with the same flags on top; listened to before the
        // process says it is listening, so an early one cannot end it.
        let reload = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hangup) => Some(server::Reload {
                hangup,
                load: Box::new(move || config::load(config_path.as_deref(), &overrides)),
            }),
            Err(e) => {
                eprintln!("cannot listen for SIGHUP, the configuration cannot be reloaded: {e}");
                None
            }
        };
        // SIGTERM too: one that comes right after `listening on` drains as any other.
        #[cfg(unix)]
        let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        #[cfg(not(unix))]
        let term = None;
        let addr = listener.local_addr().map_or(config.listen, |a| a);
        let store = if config.redis.is_some() {
            "redis"
        } else if config.embedded.data_dir.is_some() {
            "embedded (data dir)"
        } else {
            "embedded (in memory)"
        };
        // The state is back (a data dir restored) before the process says it listens.
        let prepared = match server::prepare(config) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = prepared.check_store().await {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
        // One plain line on stdout, for scripts and tests that start the server on port 0.
        println!("listening on {addr}");
        tracing::info!(%addr, store, "admission-authority serving");
        match server::serve_prepared(prepared, listener, shutdown_signal(term), reload).await {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        }
    });
    if let Some(t) = telemetry {
        t.shutdown();
    }
    code
}

/// Resolves on SIGTERM (listened to since before the process said it listens) or ctrl-c.
#[cfg(unix)]
async fn shutdown_signal(term: Option<tokio::signal::unix::Signal>) {
    let ctrl_c = tokio::signal::ctrl_c();
    match term {
        Some(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        None => {
            let _ = ctrl_c.await;
        }
    }
    tracing::info!("shutting down");
}

#[cfg(not(unix))]
async fn shutdown_signal(_term: Option<()>) {
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("shutting down");
}
