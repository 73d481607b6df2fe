//! The gateway's shared state: the engine, open leases and what a reload swaps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use metrics_exporter_prometheus::PrometheusHandle;
use toolgate::Engine;

use crate::activity::Activity;
use crate::auth::Auth;
use crate::connections::Connections;
use crate::leases::Leases;
use crate::ratelimit::Headers;
use crate::reload::{Fixed, Reloaded};
use crate::settings::{LoadErrors, Loaded, Settings};
use crate::upstream::Upstream;

/// Where the config comes from, and is read again on reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The bundled example config.
    Bundled,
    /// A config file.
    File(PathBuf),
    /// A config given as text (tests); reload reads it again unchanged.
    Text(String),
}

/// The gateway's state, cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    engine: Engine,
    activity: Arc<Activity>,
    leases: Arc<Leases>,
    live: ArcSwap<Live>,
    source: Source,
    http: reqwest::Client,
    metrics: PrometheusHandle,
    body_limit: usize,
    request_timeout: Duration,
    connection_keys: crate::reload::ConnectionKeys,
    connections: Arc<Connections>,
    mesh: std::sync::OnceLock<toolgate_mesh::Mesh>,
    mcp: std::sync::OnceLock<Arc<toolgate_mcp::http::Endpoint>>,
}

/// What a reload replaces at once.
#[derive(Debug)]
pub struct Live {
    /// The gateway's settings.
    pub settings: Settings,
    /// Who may call.
    pub auth: Auth,
    /// Upstreams by tool.
    pub upstreams: HashMap<String, Arc<Upstream>>,
    /// `RateLimit-Policy` by tool.
    pub headers: Headers,
}

// === impl Source ===

impl Source {
    /// Reads and validates the config.
    ///
    /// # Errors
    ///
    /// Every problem of the config, each with its path.
    pub fn load(&self) -> Result<Loaded, LoadErrors> {
        match self {
            Self::Bundled => Loaded::from_toml_str(crate::EXAMPLE_CONFIG),
            Self::File(p) => Loaded::from_path(p),
            Self::Text(t) => Loaded::from_toml_str(t),
        }
    }
}

// === impl Live ===

impl Live {
    fn new(loaded: &Loaded, upstreams: HashMap<String, Arc<Upstream>>) -> Self {
        Self {
            settings: loaded.settings.clone(),
            auth: Auth::new(loaded.settings.tokens.clone()),
            upstreams,
            headers: Headers::new(&loaded.policy),
        }
    }
}

// === impl AppState ===

impl AppState {
    /// Builds the state from a loaded config, and starts the lease reaper (so it must
    /// run inside a tokio runtime). Install the metrics recorder first
    /// ([`crate::metrics::install`]).
    ///
    /// # Errors
    ///
    /// When a schema of an upstream is invalid.
    pub fn new(source: Source, loaded: Loaded, engine: Engine) -> Result<Self, LoadErrors> {
        let metrics = crate::metrics::install();
        let upstreams = Upstream::compile_all(&loaded.policy).map_err(LoadErrors)?;
        crate::metrics::publish_circuits(&loaded.policy);
        let live = Live::new(&loaded, upstreams);
        crate::store::keep_leases(&engine, &live.settings);
        let leases = Arc::new(Leases::default());
        crate::leases::spawn_reaper(Arc::downgrade(&leases));
        let names = loaded.policy.tools.keys().map(String::as_str);
        let activity = Arc::new(Activity::new(engine.clock().clone(), names));
        Ok(Self(Arc::new(Inner {
            engine,
            activity,
            leases,
            body_limit: live.settings.body_limit,
            request_timeout: live.settings.request_timeout,
            connection_keys: crate::reload::connection_keys(&live.settings),
            live: ArcSwap::from_pointee(live),
            source,
            http: reqwest::Client::new(),
            metrics,
            connections: Arc::new(Connections::new()),
            mesh: std::sync::OnceLock::new(),
            mcp: std::sync::OnceLock::new(),
        })))
    }

    /// A state for a TOML config given as text, on the in-memory store.
    ///
    /// # Errors
    ///
    /// Every problem of the config.
    pub fn from_toml(text: &str) -> Result<Self, LoadErrors> {
        let loaded = Loaded::from_toml_str(text)?;
        crate::metrics::install();
        let engine = Engine::new(loaded.policy.clone());
        Self::new(Source::Text(text.to_string()), loaded, engine)
    }

    /// Reads the config again and puts it in force, keeping the state of unchanged
    /// quotas. Returns the number of tools. As [`AppState::reload_report`].
    ///
    /// # Errors
    ///
    /// As [`AppState::reload_report`].
    pub fn reload(&self) -> Result<usize, LoadErrors> {
        self.reload_report().map(|r| r.tools)
    }

    /// Reads the config again and puts it in force (see [`crate::reload`] for what a
    /// reload may change), logging the outcome: a refusal at WARN with its reasons,
    /// and each changed setting that waits for a restart at WARN too.
    ///
    /// # Errors
    ///
    /// The new config's problems, or the reload rules it breaks; the old config stays
    /// in force.
    pub fn reload_report(&self) -> Result<Reloaded, LoadErrors> {
        let result = self.0.source.load().and_then(|l| self.apply(l));
        match &result {
            Ok(r) => {
                tracing::info!(tools = r.tools, "config reloaded");
                for key in &r.needs_restart {
                    tracing::warn!(
                        "config reloaded, but [gateway] {key} changed: it takes effect after \
                         a restart"
                    );
                }
            }
            Err(e) => tracing::warn!(
                reason = %e.0.join("; "),
                "config reload refused; the old config stays in force"
            ),
        }
        result
    }

    /// Puts a loaded config in force (see [`AppState::reload`]).
    ///
    /// # Errors
    ///
    /// When it breaks a reload rule ([`crate::reload::check`]) or a schema of an
    /// upstream is invalid; nothing changes then.
    pub fn apply(&self, loaded: Loaded) -> Result<Reloaded, LoadErrors> {
        let old = self.live();
        crate::reload::check(old.auth.enabled(), &loaded)?;
        let fixed = Fixed {
            listen: old.settings.listen,
            body_limit: self.0.body_limit,
            request_timeout: self.0.request_timeout,
            connections: self.0.connection_keys,
        };
        drop(old);
        let needs_restart = crate::reload::needs_restart(&fixed, &loaded);
        let upstreams = Upstream::compile_all(&loaded.policy).map_err(LoadErrors)?;
        crate::metrics::publish_circuits(&loaded.policy);
        let live = Live::new(&loaded, upstreams);
        let tools = loaded.policy.tools.len();
        let names: Vec<String> = loaded.policy.tools.keys().cloned().collect();
        self.0
            .engine
            .try_apply(loaded.policy)
            .map_err(|e| LoadErrors(vec![format!("store: {e}")]))?;
        crate::store::keep_leases(&self.0.engine, &live.settings);
        self.0.activity.retain(names.iter().map(String::as_str));
        self.0.live.store(Arc::new(live));
        if let Some(mesh) = self.mesh() {
            // Tools may have gained or lost an upstream: start or stop their workers.
            mesh.reload();
        }
        Ok(Reloaded {
            tools,
            needs_restart,
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    /// Who was admitted and rejected, per tool and tenant, second by second.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.0.activity
    }

    /// Open leases.
    pub fn leases(&self) -> &Leases {
        &self.0.leases
    }

    /// Settings, auth and upstreams in force.
    pub fn live(&self) -> Guard<Arc<Live>> {
        self.0.live.load()
    }

    /// The HTTP client for upstreams.
    pub fn http(&self) -> &reqwest::Client {
        &self.0.http
    }

    /// The Prometheus handle.
    pub fn metrics(&self) -> &PrometheusHandle {
        &self.0.metrics
    }

    /// The body limit fixed at startup.
    pub fn body_limit(&self) -> usize {
        self.0.body_limit
    }

    /// The request timeout fixed at startup.
    pub fn request_timeout(&self) -> Duration {
        self.0.request_timeout
    }

    /// The counts of client connections ([`crate::conn::serve`] keeps them).
    pub fn connections(&self) -> &Arc<Connections> {
        &self.0.connections
    }

    /// The event mesh, when one runs.
    pub fn mesh(&self) -> Option<&toolgate_mesh::Mesh> {
        self.0.mesh.get()
    }

    /// Records the running mesh (once): reloads then tell it, and `/healthz` and
    /// `GET /v1/mesh` report it.
    pub fn set_mesh(&self, mesh: toolgate_mesh::Mesh) {
        let _ = self.0.mesh.set(mesh);
    }

    /// The MCP gateway, when `[mcp]` configures one.
    pub fn mcp(&self) -> Option<&Arc<toolgate_mcp::http::Endpoint>> {
        self.0.mcp.get()
    }

    /// Records the running MCP gateway (once): `/mcp` serves it.
    pub fn set_mcp(&self, mcp: Arc<toolgate_mcp::http::Endpoint>) {
        let _ = self.0.mcp.set(mcp);
    }
}
