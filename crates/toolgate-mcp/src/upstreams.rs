//! The upstream servers: each kept connected by a supervisor task (a child process
//! is started, and started again with backoff when it dies; an HTTP server is
//! reached again the same way), their tools aggregated into one [`Catalog`].
//!
//! A server that is down keeps its last tool list: its tools stay listed, and a call
//! to one fails at once with a clear error until the server is back. Every change of
//! the catalog is announced through [`Upstreams::changes`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rmcp::model::{ServerNotification, SubscriptionFilter, Tool};
use rmcp::service::{Peer, Subscription};
use rmcp::RoleClient;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::catalog::Catalog;
use crate::client::UpstreamClient;
use crate::config::McpConfig;
use crate::link;
use crate::progress::Relays;
use crate::server_config::ServerConfig;

/// The first restart delay; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long starts the backoff over.
const STABLE: Duration = Duration::from_secs(10);

/// The upstream servers, cheap to clone.
#[derive(Debug, Clone)]
pub struct Upstreams(Arc<Shared>);

/// What the supervisors and the servers share.
#[derive(Debug)]
struct Shared {
    config: McpConfig,
    catalog: RwLock<Arc<Catalog>>,
    servers: Mutex<BTreeMap<String, ServerState>>,
    /// The catalog's version: bumped on every change.
    changes: watch::Sender<u64>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Progress of calls in flight, relayed to their clients.
    relays: Arc<Relays>,
}

/// One server's state.
#[derive(Debug, Default)]
struct ServerState {
    peer: Option<Peer<RoleClient>>,
    tools: Vec<Tool>,
    /// Connected at least once, or failed at least once.
    attempted: bool,
    /// Why it is down, when it is.
    error: Option<String>,
    /// Connections made after the first.
    restarts: u64,
}

/// A snapshot of one server, for status pages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerView {
    /// The server's name.
    pub name: String,
    /// Whether it is connected now.
    pub connected: bool,
    /// How many tools it lists (before filters).
    pub tools: usize,
    /// Why it is down.
    pub error: Option<String>,
    /// How often it was connected again.
    pub restarts: u64,
}

// === impl Upstreams ===

impl Upstreams {
    /// Starts a supervisor per server (inside a tokio runtime); connections are made
    /// in the background ([`Upstreams::ready`] waits for the first round).
    pub fn start(config: McpConfig) -> Self {
        let servers = config
            .servers
            .keys()
            .map(|k| (k.clone(), ServerState::default()))
            .collect();
        let shared = Arc::new(Shared {
            config,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            servers: Mutex::new(servers),
            changes: watch::channel(0).0,
            stop: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
            relays: Arc::new(Relays::default()),
        });
        let mut tasks = Vec::new();
        for (name, server) in &shared.config.servers {
            let (shared2, name, server) = (shared.clone(), name.clone(), server.clone());
            tasks.push(tokio::spawn(supervise(shared2, name, server)));
        }
        *shared.tasks.lock() = tasks;
        Self(shared)
    }

    /// Waits until every server was connected or failed once, at most `limit`.
    /// Returns whether they all were.
    pub async fn ready(&self, limit: Duration) -> bool {
        let mut rx = self.0.changes.subscribe();
        let all = |s: &Shared| s.servers.lock().values().all(|v| v.attempted);
        tokio::time::timeout(limit, async {
            while !all(&self.0) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok()
    }

    /// The progress relays of calls in flight.
    pub(crate) fn relays(&self) -> &Arc<Relays> {
        &self.0.relays
    }

    /// The settings.
    pub fn config(&self) -> &McpConfig {
        &self.0.config
    }

    /// The tools exposed now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.0.catalog.read().clone()
    }

    /// Announces every change of the catalog (the value is its version).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes.subscribe()
    }

    /// The connection to `server`.
    ///
    /// # Errors
    ///
    /// When the server is down, with why.
    pub fn peer(&self, server: &str) -> Result<Peer<RoleClient>, String> {
        let servers = self.0.servers.lock();
        let s = servers
            .get(server)
            .ok_or_else(|| format!("no upstream server {server:?}"))?;
        match (&s.peer, &s.error) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(e)) => Err(format!("upstream {server:?} is not connected: {e}")),
            (None, None) => Err(format!("upstream {server:?} is not connected yet")),
        }
    }

    /// A snapshot of every server.
    pub fn view(&self) -> Vec<ServerView> {
        self.0
            .servers
            .lock()
            .iter()
            .map(|(name, s)| ServerView {
                name: name.clone(),
                connected: s.peer.is_some(),
                tools: s.tools.len(),
                error: s.error.clone(),
                restarts: s.restarts,
            })
            .collect()
    }

    /// Stops every supervisor: connections are closed and child processes stopped.
    pub async fn shutdown(&self) {
        let _ = self.0.stop.send(true);
        let tasks = std::mem::take(&mut *self.0.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
    }
}

// === impl Shared ===

impl Shared {
    /// Replaces the tools of `server` and rebuilds the catalog.
    fn publish_tools(&self, server: &str, tools: Vec<Tool>) {
        if let Some(s) = self.servers.lock().get_mut(server) {
            s.tools = tools;
        }
        self.rebuild();
    }

    fn rebuild(&self) {
        let lists: BTreeMap<String, Vec<Tool>> = self
            .servers
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.tools.clone()))
            .collect();
        let (catalog, warnings) =
            Catalog::build(&lists, &self.config.servers, self.config.max_tools);
        for w in warnings {
            tracing::warn!("{w}");
        }
        let changed = {
            let mut current = self.catalog.write();
            let changed = !same_tools(&current, &catalog);
            *current = Arc::new(catalog);
            changed
        };
        if changed {
            self.changes.send_modify(|v| *v += 1);
        } else {
            // Wakes `ready` waiters; listeners compare versions.
            self.changes.send_modify(|_| {});
        }
    }

    fn set_link(&self, server: &str, peer: Option<Peer<RoleClient>>, error: Option<String>) {
        if let Some(s) = self.servers.lock().get_mut(server) {
            if peer.is_some() && s.attempted && s.error.is_some() {
                s.restarts += 1;
            }
            s.peer = peer;
            s.error = error;
            s.attempted = true;
        }
    }
}

/// Whether two catalogs list the same tools (names and definitions).
fn same_tools(a: &Catalog, b: &Catalog) -> bool {
    a.len() == b.len()
        && a.tools()
            .iter()
            .zip(b.tools())
            .all(|(x, y)| x.tool == y.tool && x.policy_key == y.policy_key)
}

/// Resolves when told to stop (or when the sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Keeps `name` connected until told to stop.
async fn supervise(shared: Arc<Shared>, name: String, config: ServerConfig) {
    let mut stop = shared.stop.subscribe();
    let mut backoff = MIN_BACKOFF;
    loop {
        let (tools_tx, relisted) = watch::channel(None);
        let handler = UpstreamClient::new(&name, shared.relays.clone(), tools_tx);
        let connected = tokio::select! {
            r = link::connect(&config, handler) => r,
            () = stopped(&mut stop) => return,
        };
        let started = tokio::time::Instant::now();
        match connected {
            Ok(link) => {
                if serve_link(&shared, &name, link, relisted, &mut stop).await == Ended::Stopped {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "upstream not connected");
                shared.set_link(&name, None, Some(e));
                shared.rebuild();
            }
        }
        if started.elapsed() >= STABLE {
            backoff = MIN_BACKOFF;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stopped(&mut stop) => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Waits for the next `notifications/tools/list_changed` on a listen stream (`false`
/// when the stream ended, which is then dropped); pending for ever without one.
async fn next_list_change(listen: &mut Option<Subscription>) -> bool {
    let Some(sub) = listen.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match sub.next().await {
            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => return true,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                *listen = None;
                return false;
            }
        }
    }
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The process exited or the server closed it: connect again.
    Lost,
    /// toolgate is stopping: it was closed.
    Stopped,
}

/// Lists the tools of a new connection, then keeps its tool list current until it
/// ends or toolgate stops.
async fn serve_link(
    shared: &Shared,
    name: &str,
    link: link::Link,
    mut relisted: watch::Receiver<Option<Vec<Tool>>>,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    tracing::info!(server = %name, "upstream connected");
    let peer = link.peer().clone();
    match peer.list_all_tools().await {
        Ok(tools) => {
            shared.set_link(name, Some(peer.clone()), None);
            shared.publish_tools(name, tools);
        }
        Err(e) => {
            let e = format!("cannot list its tools: {e}");
            tracing::warn!(server = %name, error = %e, "upstream");
            shared.set_link(name, Some(peer.clone()), Some(e));
            shared.rebuild();
        }
    }
    // A 2026-07-28 upstream announces changes on a `subscriptions/listen` stream; an
    // older one sends them unasked (to `UpstreamClient`), and refuses the listen.
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut listen = peer.listen(filter).await.ok();
    let ct = link.cancellation_token();
    let waiting = link.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            _ = &mut waiting => break,
            Ok(()) = relisted.changed() => {
                let list = relisted.borrow_and_update().clone();
                if let Some(tools) = list {
                    shared.publish_tools(name, tools);
                }
            }
            changed = next_list_change(&mut listen) => {
                if changed {
                    match peer.list_all_tools().await {
                        Ok(tools) => shared.publish_tools(name, tools),
                        Err(e) => tracing::warn!(server = %name, error = %e, "cannot read the tool list"),
                    }
                }
            }
            () = stopped(stop) => {
                ct.cancel();
                let _ = waiting.await;
                shared.set_link(name, None, Some("stopped".into()));
                return Ended::Stopped;
            }
        }
    }
    let why = "the connection ended (the process exited or the server closed it); reconnecting";
    tracing::warn!(server = %name, "upstream {why}");
    shared.set_link(name, None, Some(why.into()));
    shared.rebuild();
    Ended::Lost
}
