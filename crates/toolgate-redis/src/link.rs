//! A gate's link to Redis: what every part of the gate needs of Redis, and nothing of
//! the policy. It runs the scripts over the connection within the store's timeout, on
//! Redis' clock (or a test clock), with leases that live the lease TTL; it names each
//! admission that adds members to a sorted set with a unique id; and it knows
//! whether Redis answers: after an outage it
//! is marked down (admissions then take the `on_store_error` path at once) and probed
//! every 100 ms until it answers again.
//!
//! The gate composes a link with the policy's side (the compiled quotas, the
//! fallback, the grants); permits, grants and waiters hold the link alone, to give
//! back what they took.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use tokio::sync::Semaphore;
use toolgate::config::StoreConfig;
use toolgate::Clock;

use crate::coalesce::Coalescer;
use crate::conn::Conn;
use crate::error::StoreError;
use crate::ids::Ids;
use crate::lease::LeaseTtl;
use crate::op::Op;
use crate::plan::{live, Step};
use crate::quota::Params;
use crate::script::{parse_levels, BucketCall, Reply, Scripts};

/// How often a store that stopped answering is probed.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// The most reads of what quotas have left (`peek.lua`, for state endpoints) one
/// process has in flight at once. Admissions have as many round trips in flight as
/// callers, so state reads, however often clients ask, never take more than this
/// share of Redis from them; reads beyond it wait their turn (within the store's
/// timeout, after which their figures are unknown).
const MAX_PEEKS_IN_FLIGHT: usize = 2;

thread_local! {
    /// The calling thread's id, which tells its lane.
    static THREAD: ThreadId = std::thread::current().id();
}

/// How long a runtime given as a lane has to run its first task of ours.
const LANE_START: Duration = Duration::from_secs(5);

/// A read whose turn comes with less of its timeout left is not sent: it could not
/// be answered in time, and behind a hung server it would only queue up there.
const MIN_PEEK_LEFT: Duration = Duration::from_millis(1);

/// The link of one gate to Redis. Shared (`Arc`) by the gate and by what it hands out;
/// a reload's gate gets a link derived from its predecessor's ([`Link::derived`]).
pub(crate) struct Link {
    conn: Conn,
    scripts: Scripts,
    /// The bound of every round trip.
    timeout: Duration,
    /// How long a concurrency lease lives in Redis unless released.
    lease_ttl: LeaseTtl,
    /// Replaces Redis' clock (tests only).
    clock: Option<Arc<dyn Clock>>,
    /// The runtime that carries the store's I/O and background tasks.
    handle: tokio::runtime::Handle,
    ids: Ids,
    /// Redis stopped answering: admissions take the `on_store_error` path.
    down: AtomicBool,
    /// A probe is running.
    probing: AtomicBool,
    /// Runs the one-bucket admissions, coalesced (`coalesce.rs`).
    coalescer: Arc<Coalescer>,
    /// The runtimes with a connection and a coalescer of their own
    /// ([`crate::Builder::lanes`]); calls from any other thread use `conn` and
    /// `coalescer`.
    lanes: Vec<Lane>,
    /// Turns for reads of what quotas have left ([`MAX_PEEKS_IN_FLIGHT`]); shared
    /// with the links derived from this one.
    peeks: Arc<Semaphore>,
}

/// The connection and the coalescer of the runtime that runs on `thread`: its
/// admissions' round trips and their answers stay on that thread.
#[derive(Debug)]
struct Lane {
    thread: ThreadId,
    conn: Conn,
    coalescer: Arc<Coalescer>,
}

// === impl Link ===

impl Link {
    /// Connects to the Redis of `store` (see `conn.rs`), on the current Tokio runtime,
    /// and, for a single server, once more for each runtime of `lanes`.
    ///
    /// # Errors
    ///
    /// When the URL cannot be parsed, or a cluster cannot be reached.
    pub(crate) async fn connect(
        store: &StoreConfig,
        lease_ttl: Duration,
        clock: Option<Arc<dyn Clock>>,
        lanes: &[tokio::runtime::Handle],
    ) -> Result<Self, StoreError> {
        let conn = Conn::connect(&store.url, store.timeout).await?;
        let scripts = Scripts::new();
        let handle = tokio::runtime::Handle::current();
        let lanes = if conn.is_cluster() {
            Vec::new()
        } else {
            Lane::connect(&conn, store, &scripts, lanes).await?
        };
        Ok(Self {
            lanes,
            coalescer: Coalescer::new(conn.clone(), scripts.clone(), store.timeout, handle.clone()),
            conn,
            scripts,
            timeout: store.timeout,
            lease_ttl: LeaseTtl::new(lease_ttl),
            clock,
            handle,
            ids: Ids::new(),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            peeks: Arc::new(Semaphore::new(MAX_PEEKS_IN_FLIGHT)),
        })
    }

    /// The link of a reload's gate: the same connection, scripts, timeout, clock and
    /// lease TTL (a new TTL applies to both), its own ids, and believed up.
    pub(crate) fn derived(&self) -> Self {
        let lanes = self
            .lanes
            .iter()
            .map(|l| Lane {
                thread: l.thread,
                conn: l.conn.clone(),
                coalescer: l.coalescer.fresh(),
            })
            .collect();
        Self {
            coalescer: self.coalescer.fresh(),
            lanes,
            conn: self.conn.clone(),
            scripts: self.scripts.clone(),
            timeout: self.timeout,
            lease_ttl: self.lease_ttl.clone(),
            clock: self.clock.clone(),
            handle: self.handle.clone(),
            ids: Ids::new(),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            peeks: self.peeks.clone(),
        }
    }

    /// The test clock that replaces Redis', if any.
    pub(crate) fn clock(&self) -> Option<&Arc<dyn Clock>> {
        self.clock.as_ref()
    }

    /// Sets how long concurrency leases admitted from now on live in Redis unless
    /// released (clamped as [`crate::Builder::lease_ttl`]); leases already held keep
    /// theirs. Every link derived from this one, or that it derives from, shares it.
    pub(crate) fn set_lease_ttl(&self, ttl: Duration) {
        self.lease_ttl.set(ttl);
    }

    /// The id of an admission of `steps`: a new one, unique across processes, when a
    /// step adds members to a sorted set (a concurrency lease, a sliding window's
    /// entries), which the id names; else none (buckets keep no member).
    pub(crate) fn id_for(&self, steps: &[Step]) -> Arc<str> {
        let members = steps
            .iter()
            .any(|s| s.cost > 0 && !matches!(s.quota.params, Params::Bucket { .. }));
        if members {
            self.ids.next().into()
        } else {
            self.ids.none()
        }
    }

    /// Whether the connection is to a Redis Cluster (a script's keys must then share
    /// a hash slot).
    pub(crate) fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Whether Redis is believed down (until a probe answers).
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Marks Redis down after an outage (not after a script or cluster error) and
    /// starts probing it.
    pub(crate) fn failed(self: &Arc<Self>, e: &StoreError) {
        let outage = match e {
            StoreError::Timeout { .. } => true,
            StoreError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_connection_refusal()
                    || source.is_connection_dropped()
            }
            _ => false,
        };
        tracing::warn!(error = %e, outage, "redis store error");
        if !outage {
            return;
        }
        self.down.store(true, Ordering::Release);
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        self.spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                if me.conn.ping(me.timeout).await.is_ok() {
                    me.down.store(false, Ordering::Release);
                    me.probing.store(false, Ordering::Release);
                    tracing::info!("redis store answers again");
                    return;
                }
            }
        });
    }

    /// Runs the admission script on `steps` (those with a cost) for admission `id`:
    /// one round trip, bounded by the store's timeout; `max_wait_us` < 0 means now or
    /// never. Steps that all cost nothing are admitted without asking Redis. The
    /// common call, one enforced bucket now or never, runs `admit_bucket.lua`,
    /// coalesced with the calls waiting beside it (`coalesce.rs`).
    ///
    /// # Errors
    ///
    /// When Redis did not answer, or answered what the script never does.
    pub(crate) async fn run_admit(
        &self,
        steps: &[Step],
        id: &str,
        max_wait_us: i64,
    ) -> Result<Reply, StoreError> {
        let live = live(steps);
        if live.is_empty() {
            return Ok(Reply::Admitted {
                at: 0,
                wait: 0,
                shadow_ok: true,
                shadow_blame: 0,
            });
        }
        let now = self.now_arg();
        let (conn, coalescer) = self.here();
        if let Some(call) = BucketCall::of(&live, max_wait_us) {
            let decision = coalescer.admit(now, call).await?;
            return Ok(decision.reply());
        }
        let ttl = self.lease_ttl.micros();
        let inv = self.scripts.admit(&now, &live, id, max_wait_us, ttl);
        // Boxed, as a lone coalesced call's is (`Coalescer::alone`): the coalesced
        // callers' futures stay small.
        let value = Box::pin(conn.invoke("admit", &inv, self.timeout)).await?;
        Reply::parse(value, live.len())
    }

    /// What each of `quotas` (a key and its parameters, all in one hash slot) has
    /// left now: one round trip of `peek.lua`, which changes nothing in Redis, taken
    /// in turn with the process's other reads ([`MAX_PEEKS_IN_FLIGHT`]); waiting
    /// for the turn and the round trip together are bounded by the store's timeout.
    ///
    /// # Errors
    ///
    /// When no turn came or Redis did not answer within the timeout, or Redis
    /// answered what the script never does.
    pub(crate) async fn peek(&self, quotas: &[(Arc<str>, Params)]) -> Result<Vec<u64>, StoreError> {
        if quotas.is_empty() {
            return Ok(Vec::new());
        }
        let timeout = StoreError::Timeout {
            op: "peek",
            timeout: self.timeout,
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        // A read given up before it is sent (its turn or its time ran out) is counted
        // as a timeout, as one Redis did not answer is (`Conn::invoke`).
        let given_up = |e: StoreError| {
            crate::latency::count_error("peek", &e);
            Err(e)
        };
        let Ok(Ok(_turn)) = tokio::time::timeout_at(deadline, self.peeks.acquire()).await else {
            return given_up(timeout);
        };
        let now = self.now_arg();
        let inv = self
            .scripts
            .peek(&now, quotas.iter().map(|(k, p)| (&**k, *p)));
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left < MIN_PEEK_LEFT {
            return given_up(timeout);
        }
        let value = match self.conn.invoke("peek", &inv, left).await {
            Err(StoreError::Timeout { .. }) => return Err(timeout),
            other => other?,
        };
        parse_levels(&value, quotas.len())
    }

    /// Runs release operations in one round trip, bounded by the store's timeout.
    ///
    /// # Errors
    ///
    /// When Redis did not answer.
    pub(crate) async fn release(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let inv = self.scripts.release(&self.now_arg(), &ops);
        self.here()
            .0
            .invoke("release", &inv, self.timeout)
            .await
            .map(drop)
    }

    /// Runs release operations in a spawned task (from `Drop`).
    pub(crate) fn release_in_background(self: &Arc<Self>, ops: Vec<Op>) {
        let me = self.clone();
        let task = async move {
            if let Err(e) = me.release(ops).await {
                tracing::warn!(error = %e, "release failed; leases expire after their TTL");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn(task)),
            Err(_) => drop(self.handle.spawn(task)),
        }
    }

    /// Sleeps until `at`, a time an admission reserved (Redis µs), `wait` from now:
    /// on the test clock when one replaces Redis', else on Tokio's timer.
    pub(crate) async fn sleep_until(&self, at: i64, wait: Duration) {
        match &self.clock {
            Some(c) => c.sleep_until(u64::try_from(at).unwrap_or(0) * 1000).await,
            None => tokio::time::sleep(wait).await,
        }
    }

    /// Runs `task` on the store's runtime.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(task));
    }

    /// The connection and the coalescer of the calling thread's runtime: its lane's,
    /// or the link's own.
    fn here(&self) -> (&Conn, &Arc<Coalescer>) {
        if !self.lanes.is_empty() {
            // Read from the thread's own copy: `thread::current()` would clone the
            // thread's `Arc` (two locked instructions) on every admission. None
            // while the thread is torn down: the link's own is used then.
            let me = THREAD.try_with(|t| *t).ok();
            if let Some(l) = self.lanes.iter().find(|l| Some(l.thread) == me) {
                return (&l.conn, &l.coalescer);
            }
        }
        (&self.conn, &self.coalescer)
    }

    /// The scripts' time argument: Redis' clock unless a test clock is set.
    fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map(|c| (c.now() / 1000).to_string())
            .unwrap_or_default()
    }
}

// === impl Lane ===

impl Lane {
    /// A lane for each runtime of `handles`, each connection made on its runtime
    /// (its I/O is driven there), all at once. A runtime that does not run a task of
    /// ours within [`LANE_START`] of the first (it stopped, or nothing drives it)
    /// gets none: its calls use the link's own connection.
    async fn connect(
        main: &Conn,
        store: &StoreConfig,
        scripts: &Scripts,
        handles: &[tokio::runtime::Handle],
    ) -> Result<Vec<Self>, StoreError> {
        let deadline = tokio::time::Instant::now() + LANE_START;
        let made: Vec<_> = handles
            .iter()
            .map(|h| {
                let (main, url, timeout) = (main.clone(), store.url.clone(), store.timeout);
                h.spawn(async move {
                    let conn = main.beside(&url, timeout).await;
                    (THREAD.with(|t| *t), conn)
                })
            })
            .collect();
        let mut lanes = Vec::with_capacity(handles.len());
        for (h, made) in handles.iter().zip(made) {
            let Ok(Ok((thread, conn))) = tokio::time::timeout_at(deadline, made).await else {
                tracing::warn!("a runtime given as a lane did not run: its calls use the store's own connection");
                continue;
            };
            let conn = conn?;
            let coalescer = Coalescer::new(conn.clone(), scripts.clone(), store.timeout, h.clone());
            lanes.push(Self {
                thread,
                conn,
                coalescer,
            });
        }
        Ok(lanes)
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("conn", &self.conn)
            .field("timeout", &self.timeout)
            .field("degraded", &self.is_down())
            .finish_non_exhaustive()
    }
}
