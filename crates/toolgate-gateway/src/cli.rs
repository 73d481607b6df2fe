//! Command-line parsing and dispatch: `serve`, `mcp`, `check`, `demo` and `call`.

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
        /// Also consume tool calls from NATS JetStream (`nats://host:port`; wins
        /// over `[mesh] url`): see docs/mesh.md.
        #[arg(long, value_parser = mesh_url)]
        mesh: Option<String>,
    },
    /// Serve the MCP gateway of a config's `[mcp]` over stdio (for MCP clients that
    /// launch a command); logs go to stderr.
    Mcp {
        /// The config file, with `[mcp.servers.NAME]`.
        #[arg(long, short)]
        config: PathBuf,
        /// Where quota state lives: `memory` (default) or `redis://host:port`.
        #[arg(long)]
        store: Option<String>,
        /// The tenant of every call (for `partition = "tenant"` quotas).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Publish one tool call on the event mesh (and, with --wait, print its result).
    Call {
        /// The NATS server (`nats://host:port`).
        #[arg(long, value_parser = mesh_url)]
        mesh: String,
        /// The tool.
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// An idempotency key: calls with one key run the upstream once.
        #[arg(long)]
        key: Option<String>,
        /// The call's deadline from now, such as `5s`.
        #[arg(long, value_parser = humantime::parse_duration)]
        deadline: Option<std::time::Duration>,
        /// Wait for the result and print it.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
        /// The call id [default: random].
        #[arg(long)]
        call_id: Option<String>,
        /// The results stream, when the gateways use another name.
        #[arg(long, default_value = "TOOLGATE_RESULTS")]
        results_stream: String,
    },
}

fn mesh_url(s: &str) -> Result<String, String> {
    toolgate_mesh::config::url(s)
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
            mesh,
        } => crate::serve::run(crate::serve::Options {
            config,
            listen,
            store,
            allow_unauthenticated,
            mesh,
        }),
        Command::Mcp {
            config,
            store,
            tenant,
        } => crate::mcp_stdio::run(crate::mcp_stdio::Options {
            config,
            store,
            tenant,
        }),
        Command::Call {
            mesh,
            tool,
            args,
            tenant,
            key,
            deadline,
            wait,
            timeout,
            call_id,
            results_stream,
        } => crate::call::run(crate::call::Options {
            mesh,
            tool,
            args,
            tenant,
            key,
            deadline,
            wait,
            timeout,
            call_id,
            results_stream,
        }),
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    // The same loader as `serve`, so a `[gateway]` table is accepted and checked too.
    match crate::settings::Loaded::from_path(path) {
        Ok(l) => {
            let servers = l.mcp.as_ref().map_or(0, |m| m.servers.len());
            let mcp = if servers > 0 {
                format!(", {servers} MCP servers")
            } else {
                String::new()
            };
            println!(
                "{}: ok ({} tools, {} pools{mcp})",
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
