//! `toolgate serve`: load the config, bind, serve until SIGTERM/SIGINT, reload on
//! SIGHUP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::settings::{Loaded, DEFAULT_LISTEN};
use crate::state::{AppState, Source};
use crate::store::Store;

/// Exit code for an invalid config (as `check`).
pub const EXIT_INVALID_CONFIG: u8 = 1;
/// Exit code when the gateway cannot start as asked (store not available, unsafe
/// listen address, address in use).
pub const EXIT_CANNOT_START: u8 = 2;

/// What `toolgate serve` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file; `None`: the bundled example.
    pub config: Option<PathBuf>,
    /// The listen address (wins over `[gateway] listen`).
    pub listen: Option<SocketAddr>,
    /// The store URL (wins over `[store] url`).
    pub store: Option<String>,
    /// Allow a non-loopback address with no tokens configured.
    pub allow_unauthenticated: bool,
    /// The event mesh's NATS URL (wins over `[mesh] url`).
    pub mesh: Option<String>,
}

/// Runs the gateway until it is told to stop.
pub fn run(opts: Options) -> ExitCode {
    match runtime() {
        Ok(rt) => rt.block_on(serve(opts)),
        Err(code) => code,
    }
}

/// Logs to stderr (filtered by `RUST_LOG`, default `info`) and a multi-thread
/// runtime, for `serve` and `mcp`.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("toolgate: cannot start a runtime: {e}");
            ExitCode::from(EXIT_CANNOT_START)
        })
}

async fn serve(opts: Options) -> ExitCode {
    let source = opts.config.clone().map_or(Source::Bundled, Source::File);
    let name = opts
        .config
        .as_ref()
        .map_or("the bundled example config".to_string(), |p| {
            p.display().to_string()
        });
    let loaded = match source.load() {
        Ok(l) => l,
        Err(e) => return invalid(&name, &e.0),
    };
    let store = match store_of(&opts, &loaded) {
        Ok(s) => s,
        Err(msg) => return cannot_start(&msg),
    };
    let listen = match listen_of(&opts, &loaded) {
        Ok(a) => a,
        Err(msg) => return cannot_start(&msg),
    };
    let auth = !loaded.settings.tokens.is_empty();
    let mesh = match mesh_of(&opts, &loaded) {
        Ok(m) => m,
        Err(msg) => return cannot_start(&msg),
    };
    let grace = loaded.settings.shutdown_grace;
    let mcp_config = loaded.mcp.clone();
    let limits = crate::conn::fit_to_fd_limit(crate::conn::Limits::new(&loaded.settings));
    // The engine registers its metric handles: the recorder comes first.
    crate::metrics::install();
    // A runtime per core where requests wait for Redis: each has its own link, and
    // no thread wakes another for an answer. In memory nothing waits, and the shared
    // worker pool serves more per CPU (docs/gateway.md, connections).
    let cores = match &store {
        Store::Memory => None,
        Store::Redis(_) => match crate::conn::Cores::per_cpu() {
            Ok(c) => Some(std::sync::Arc::new(c)),
            Err(e) => return cannot_start(&format!("cannot start the connections' runtimes: {e}")),
        },
    };
    let runtimes = cores
        .as_deref()
        .map_or_else(Vec::new, crate::conn::Cores::handles);
    let engine = match store.engine_for(loaded.policy.clone(), runtimes).await {
        Ok(e) => e,
        Err(e) => return cannot_start(&e.0),
    };
    tracing::info!(store = %store.describe(), "quota store");
    let state = match AppState::new(source, loaded, engine) {
        Ok(s) => s,
        Err(e) => return invalid(&name, &e.0),
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => return cannot_start(&format!("cannot listen on {listen}: {e}")),
    };
    if let Some(config) = mesh {
        // Connects in the background: HTTP serves while NATS is away.
        if let Err(e) = crate::mesh::start(&state, config, None).await {
            return cannot_start(&format!("mesh: {e}"));
        }
    }
    let mcp = match mcp_config {
        Some(config) => Some(crate::mcp::start(&state, config).await),
        None => None,
    };
    let addr = listener.local_addr().unwrap_or(listen);
    announce(addr, &name, auth, state.mesh());
    if let Some(u) = &mcp {
        announce_mcp(addr, u);
    }
    spawn_reload_on_hangup(state.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mesh_down = async {
        if let Some(mesh) = state.mesh() {
            until_stopped(stopped.clone()).await;
            mesh.shutdown(grace).await;
        }
    };
    let http = crate::conn::serve_on(
        listener,
        state.clone(),
        limits,
        cores,
        until_stopped(stopped.clone()),
    );
    let (served, ()) = tokio::join!(http, mesh_down);
    if let Some(u) = &mcp {
        // Child processes are stopped, connections closed.
        u.shutdown().await;
    }
    let released = state.leases().drain();
    tracing::info!(
        released,
        cut_off = served.cut_off,
        "stopped; open leases released"
    );
    ExitCode::SUCCESS
}

/// The mesh's settings: `[mesh]` with `--mesh` as its URL, or `--mesh` alone.
fn mesh_of(opts: &Options, loaded: &Loaded) -> Result<Option<toolgate_mesh::MeshConfig>, String> {
    let mut config = match (&loaded.mesh, &opts.mesh) {
        (None, None) => return Ok(None),
        (Some(c), _) => c.clone(),
        (None, Some(url)) => toolgate_mesh::MeshConfig::new(url.clone()),
    };
    if let Some(url) = &opts.mesh {
        config.url = Some(url.clone());
    }
    if config.url.is_none() {
        return Err("[mesh] has no url: set [mesh] url or pass --mesh nats://HOST:PORT".into());
    }
    Ok(Some(config))
}

fn invalid(name: &str, errors: &[String]) -> ExitCode {
    eprintln!("{name}: {} error(s)", errors.len());
    for e in errors {
        eprintln!("  {e}");
    }
    ExitCode::from(EXIT_INVALID_CONFIG)
}

fn cannot_start(msg: &str) -> ExitCode {
    eprintln!("toolgate: {msg}");
    ExitCode::from(EXIT_CANNOT_START)
}

pub(crate) fn store_of(opts: &Options, loaded: &Loaded) -> Result<Store, String> {
    let url = opts
        .store
        .clone()
        .or_else(|| loaded.policy.store.as_ref().map(|s| s.url.clone()))
        .unwrap_or_else(|| "memory".into());
    Store::parse(&url, loaded.policy.store.as_ref()).map_err(|e| e.0)
}

fn listen_of(opts: &Options, loaded: &Loaded) -> Result<SocketAddr, String> {
    let s = &loaded.settings;
    let addr = match opts.listen.or(s.listen) {
        Some(a) => a,
        None => DEFAULT_LISTEN
            .parse()
            .map_err(|e| format!("bad default listen address: {e}"))?,
    };
    let open = s.tokens.is_empty() && !(opts.allow_unauthenticated || s.allow_unauthenticated);
    if open && !addr.ip().is_loopback() {
        return Err(format!(
            "refusing to listen on {addr} without authentication: no [[gateway.tokens]] are \
             configured, so the gateway listens on loopback only. Configure tokens, or pass \
             --allow-unauthenticated to serve {addr} without them"
        ));
    }
    Ok(addr)
}

fn announce(addr: SocketAddr, name: &str, auth: bool, mesh: Option<&toolgate_mesh::Mesh>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "toolgate listening on http://{addr} (config: {name})");
    if auth {
        let _ = writeln!(out, "auth: bearer tokens required (GET /healthz is open)");
    } else {
        let _ = writeln!(
            out,
            "auth: none configured; listening on loopback only unless --allow-unauthenticated"
        );
    }
    let bearer = if auth {
        "-H 'Authorization: Bearer <token>' "
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "try:  curl -s {bearer}-X POST http://{addr}/v1/admit -d '{{\"tool\":\"lookup_customer\"}}'"
    );
    let _ = writeln!(out, "dashboard: http://{addr}/");
    if let Some(m) = mesh {
        let v = m.view();
        let _ = writeln!(
            out,
            "mesh: consuming toolgate.calls.<tool> from {} (state: GET /v1/mesh)",
            v.url
        );
    }
    let _ = out.flush();
}

fn announce_mcp(addr: SocketAddr, upstreams: &toolgate_mcp::Upstreams) {
    use std::io::Write;
    let servers = upstreams.view();
    let up = servers.iter().filter(|s| s.connected).count();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "mcp: http://{addr}/mcp ({} tools from {up} of {} upstream servers)",
        upstreams.catalog().len(),
        servers.len()
    );
    let _ = out.flush();
}

/// Resolves on SIGTERM or SIGINT (for `toolgate mcp` too).
#[cfg(unix)]
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("shutdown signal received");
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub(crate) async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(unix)]
fn spawn_reload_on_hangup(state: AppState) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; reload with POST /v1/admin/reload");
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // The reload logs its outcome; a refused config's errors also go to stderr,
            // one per line, for the operator who sent the signal.
            if let Err(e) = state.reload() {
                for line in &e.0 {
                    eprintln!("  {line}");
                }
            }
        }
    });
}

#[cfg(not(unix))]
fn spawn_reload_on_hangup(_state: AppState) {}
