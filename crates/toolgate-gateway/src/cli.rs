//! Command-line parsing and dispatch.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::config::Config;

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
        /// The config file (TOML, or JSON when it ends in .json).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the customer-service scenario in-process and show each decision.
    Demo,
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
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    match Config::from_path(path) {
        Ok(c) => {
            println!(
                "{}: ok ({} tools, {} pools)",
                path.display(),
                c.tools.len(),
                c.pools.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{}: {} error(s)", path.display(), errors.errors().len());
            for e in errors.errors() {
                eprintln!("  {e}");
            }
            ExitCode::from(EXIT_INVALID_CONFIG)
        }
    }
}
