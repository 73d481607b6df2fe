//! Command-line parsing and dispatch.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code of `check` (and of `serve`) for an invalid config.
pub const EXIT_INVALID_CONFIG: u8 = 1;

/// Admission control and flow control for AI-agent tool calls.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a config file: exit 0, or exit 1 listing every error.
    Check {
        /// The config file (TOML, or JSON: named *.json or starting with `{`).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the customer-service scenario in-process and show each decision.
    Demo,
    /// Run the gateway: admission, leases, reservations, invoke, metrics, dashboard.
    Serve {
        /// The config file (TOML, or JSON: named *.json or starting with `{`);
        /// default: the bundled example (the customer-service agent).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The address to listen on, `IP:PORT` or `HOST:PORT` such as `localhost:8787`
        /// [default: 127.0.0.1:8787, or `[gateway] listen`].
        #[arg(long, short, value_parser = crate::settings::parse_listen)]
        listen: Option<std::net::SocketAddr>,
        /// Where quota state lives: `memory` (default) or `redis://host:port`.
        #[arg(long)]
        store: Option<String>,
        /// Serve a non-loopback address even though no tokens are configured.
        #[arg(long)]
        allow_unauthenticated: bool,
    },
}

/// Runs the command line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Demo => {
            let out = crate::demo::run();
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Command::Serve {
            config,
            listen,
            store,
            allow_unauthenticated,
        } => crate::serve::run(crate::serve::Options {
            config,
            listen,
            store,
            allow_unauthenticated,
        }),
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    // The same loader as `serve`, so a `[gateway]` table is accepted and checked too.
    match crate::settings::Loaded::from_path(path) {
        Ok(l) => {
            println!(
                "{}: ok ({} tools, {} pools)",
                path.display(),
                l.policy.tools.len(),
                l.policy.pools.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{}: {} error(s)", path.display(), errors.0.len());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            ExitCode::from(EXIT_INVALID_CONFIG)
        }
    }
}
