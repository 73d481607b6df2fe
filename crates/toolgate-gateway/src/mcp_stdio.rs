//! `toolgate mcp --config FILE`: the MCP gateway over stdio, for clients that launch
//! a command. The config's `[mcp.servers]` are started as for `toolgate serve`, calls
//! are admitted on the config's store (memory, or Redis to share quotas with running
//! gateways); stdout carries only the protocol, logs go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::serve::{EXIT_CANNOT_START, EXIT_INVALID_CONFIG};
use crate::settings::Loaded;

/// How long start-up waits for every upstream's first connection.
const READY_WAIT: Duration = Duration::from_secs(20);

/// What `toolgate mcp` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The config file.
    pub config: PathBuf,
    /// The store URL (wins over `[store] url`).
    pub store: Option<String>,
    /// The tenant of every call (for `partition = "tenant"` quotas).
    pub tenant: Option<String>,
}

/// Serves MCP on stdio until the client closes it or a signal arrives.
pub fn run(opts: Options) -> ExitCode {
    match crate::serve::runtime() {
        Ok(rt) => rt.block_on(serve(opts)),
        Err(code) => code,
    }
}

async fn serve(opts: Options) -> ExitCode {
    let loaded = match Loaded::from_path(&opts.config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{}: {} error(s)", opts.config.display(), e.0.len());
            for line in &e.0 {
                eprintln!("  {line}");
            }
            return ExitCode::from(EXIT_INVALID_CONFIG);
        }
    };
    let Some(config) = loaded.mcp.clone() else {
        eprintln!(
            "toolgate: {} has no [mcp.servers.NAME]: nothing to serve",
            opts.config.display()
        );
        return ExitCode::from(EXIT_INVALID_CONFIG);
    };
    let serve_opts = crate::serve::Options {
        store: opts.store.clone(),
        ..crate::serve::Options::default()
    };
    let engine = match crate::serve::store_of(&serve_opts, &loaded) {
        Ok(store) => match store.engine(loaded.policy.clone()).await {
            Ok(e) => e,
            Err(e) => return cannot_start(&e.0),
        },
        Err(e) => return cannot_start(&e),
    };
    let upstreams = toolgate_mcp::Upstreams::start(config);
    if !upstreams.ready(READY_WAIT).await {
        tracing::warn!("not every MCP upstream answered within {READY_WAIT:?}; still trying");
    }
    let gateway = toolgate_mcp::Gateway::new(engine, upstreams.clone()).with_tenant(opts.tenant);
    let code = tokio::select! {
        r = toolgate_mcp::stdio::serve(gateway) => match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e}");
                ExitCode::from(EXIT_CANNOT_START)
            }
        },
        () = crate::serve::shutdown_signal() => ExitCode::SUCCESS,
    };
    upstreams.shutdown().await;
    code
}

fn cannot_start(msg: &str) -> ExitCode {
    eprintln!("toolgate: {msg}");
    ExitCode::from(EXIT_CANNOT_START)
}
