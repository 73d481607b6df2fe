//! A running mesh: connects (and reconnects), creates the streams, and runs one
//! worker per tool the executor can run, plus the dead-letter drain of calls no
//! worker takes. HTTP and everything else keep working while NATS is away: the
//! mesh only reports itself `degraded`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use toolgate::Engine;

use crate::claims::Claims;
use crate::config::{redact, MeshConfig};
use crate::executor::Executor;
use crate::outbox::Outbox;
use crate::shared::Shared;
use crate::stats::{Stats, ToolView};

/// How often consumer lag is read and the worker set checked.
const REFRESH: Duration = Duration::from_secs(2);

/// A running mesh. Cheap to clone.
#[derive(Clone)]
pub struct Mesh {
    inner: Arc<Inner>,
}

struct Inner {
    config: MeshConfig,
    url: String,
    stats: Arc<Stats>,
    status: Mutex<Status>,
    reload: Notify,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Clone, Default)]
struct Status {
    connected: bool,
    ready: bool,
    error: Option<String>,
}

/// `GET /v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeshView {
    /// `ok` (connected, streams ready), `connecting` or `degraded`.
    pub status: &'static str,
    /// The broker (no credentials).
    pub url: String,
    /// The last problem, if any since the mesh last worked.
    pub error: Option<String>,
    /// Stream and bucket names.
    pub streams: StreamNames,
    /// Per tool.
    pub tools: Vec<ToolView>,
}

/// The names of the mesh's streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamNames {
    /// Calls.
    pub calls: String,
    /// Results.
    pub results: String,
    /// Dead letters.
    pub dlq: String,
    /// The idempotency bucket.
    pub idempotency: String,
}

// === impl Mesh ===

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl Mesh {
    /// Starts the mesh in the background on the current tokio runtime; `url` wins
    /// over the config's. Returns at once: connecting, creating streams and
    /// reconnecting happen in the background.
    ///
    /// # Errors
    ///
    /// When there is no URL, or the credentials cannot be read.
    pub async fn start(
        config: MeshConfig,
        url: Option<&str>,
        engine: Engine,
        executor: Arc<dyn Executor>,
    ) -> Result<Self, String> {
        let client = crate::connect::client(&config, url).await?;
        let shown = redact(url.or(config.url.as_deref()).unwrap_or_default());
        let (stop, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            config,
            url: shown,
            stats: Arc::new(Stats::default()),
            status: Mutex::new(Status::default()),
            reload: Notify::new(),
            stop,
            task: Mutex::new(None),
        });
        // Subscribed before the task starts, so that a shutdown sent at once is seen.
        let stop = inner.stop.subscribe();
        let task = tokio::spawn(supervise(inner.clone(), stop, client, engine, executor));
        *inner.task.lock() = Some(task);
        Ok(Self { inner })
    }

    /// The tools the executor can run may have changed (a config reload): start
    /// and stop workers to match.
    pub fn reload(&self) {
        self.inner.reload.notify_one();
    }

    /// The mesh's state.
    pub fn view(&self) -> MeshView {
        let s = self.inner.status.lock().clone();
        let c = &self.inner.config;
        MeshView {
            status: match (s.connected, s.ready) {
                (true, true) => "ok",
                (false, false) if s.error.is_none() => "connecting",
                _ => "degraded",
            },
            url: self.inner.url.clone(),
            error: s.error,
            streams: StreamNames {
                calls: c.calls_stream.clone(),
                results: c.results_stream.clone(),
                dlq: c.dlq_stream.clone(),
                idempotency: c.idempotency_bucket.clone(),
            },
            tools: self.inner.stats.view(),
        }
    }

    /// Stops pulling, lets calls in flight finish for up to `grace`, then stops.
    /// Calls cut off are delivered again by the broker after `ack_wait`.
    pub async fn shutdown(&self, grace: Duration) {
        let _ = self.inner.stop.send(true);
        let task = self.inner.task.lock().take();
        if let Some(mut task) = task {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                // Aborting the supervisor drops its workers, which aborts them and
                // their calls: unacknowledged, they are delivered again.
                task.abort();
                tracing::warn!(target: "toolgate::mesh", "calls still in flight at the end of the grace period were cut off; the broker delivers them again");
            }
        }
    }
}

/// Connects, readies the streams, then keeps the worker set in step until stopped.
async fn supervise(
    inner: Arc<Inner>,
    mut stop: watch::Receiver<bool>,
    client: async_nats::Client,
    engine: Engine,
    executor: Arc<dyn Executor>,
) {
    if *stop.borrow() {
        return;
    }
    let js = async_nats::jetstream::new(client.clone());
    let mut backoff = Duration::from_millis(200);
    let streams = loop {
        match crate::streams::ensure(&js, &inner.config).await {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", error = %e, "mesh not ready; trying again");
                inner.set(client_up(&client), false, Some(e));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    };
    let owner = format!("{}-{:016x}", std::process::id(), rand_tag());
    let shared = Arc::new(Shared {
        claims: Claims::new(streams.claims.clone(), owner, inner.config.ack_wait),
        outbox: Outbox {
            js: js.clone(),
            client: client.clone(),
        },
        config: inner.config.clone(),
        engine,
        executor,
        stats: inner.stats.clone(),
        streams,
    });
    inner.set(true, true, None);
    tracing::info!(target: "toolgate::mesh", url = %inner.url, "mesh ready: consuming tool calls");
    run(&inner, &shared, &client, stop).await;
}

/// The steady state: workers per tool, the drain, status and lag.
async fn run(
    inner: &Inner,
    shared: &Arc<Shared>,
    client: &async_nats::Client,
    mut stop: watch::Receiver<bool>,
) {
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let (halt, halted) = watch::channel(false);
    let drain = Worker {
        stop: halt,
        task: Some(tokio::spawn(crate::discovery::run(shared.clone(), halted))),
    };
    let mut tick = tokio::time::interval(REFRESH);
    while !*stop.borrow() {
        sync_workers(shared, &mut workers);
        let up = client_up(client);
        let error = (!up).then(|| "disconnected from NATS; reconnecting".to_string());
        inner.set(up, true, error);
        if up {
            refresh_lag(shared, workers.keys()).await;
        }
        tokio::select! {
            _ = stop.changed() => break,
            () = inner.reload.notified() => {}
            _ = tick.tick() => {}
        }
    }
    for w in workers.values().chain(std::iter::once(&drain)) {
        let _ = w.stop.send(true);
    }
    for w in workers.into_values().chain(std::iter::once(drain)) {
        w.finish().await;
    }
}

/// A task the supervisor runs (a tool's worker, the drain): told to stop through
/// `stop`, awaited by [`Worker::finish`], and aborted if dropped unfinished (the
/// supervisor was aborted at the end of a shutdown's grace period).
struct Worker {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Worker {
    async fn finish(mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts a worker for each tool the executor can run, stops the others.
fn sync_workers(shared: &Arc<Shared>, workers: &mut HashMap<String, Worker>) {
    let tools = shared.executor.tools();
    let gone: Vec<String> = workers
        .keys()
        .filter(|t| !tools.contains(t))
        .cloned()
        .collect();
    for tool in gone {
        if let Some(w) = workers.remove(&tool) {
            // Its calls in flight finish; the task ends by itself.
            let _ = w.stop.send(true);
            tokio::spawn(w.finish());
        }
    }
    for tool in tools {
        if workers.contains_key(&tool) {
            continue;
        }
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(crate::worker::run(shared.clone(), tool.clone(), rx));
        workers.insert(
            tool,
            Worker {
                stop,
                task: Some(task),
            },
        );
    }
}

async fn refresh_lag<'a>(shared: &Shared, tools: impl Iterator<Item = &'a String>) {
    let stream = &shared.streams.calls;
    for tool in tools {
        let name = crate::worker::consumer_name(tool);
        let consumer: Result<async_nats::jetstream::consumer::PullConsumer, _> =
            stream.get_consumer(&name).await;
        if let Ok(mut c) = consumer {
            if let Ok(info) = c.info().await {
                shared.stats.tool(tool).set_pending(info.num_pending);
            }
        }
    }
}

fn client_up(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

fn rand_tag() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

// === impl Inner ===

impl Inner {
    fn set(&self, connected: bool, ready: bool, error: Option<String>) {
        *self.status.lock() = Status {
            connected,
            ready,
            error,
        };
    }
}
