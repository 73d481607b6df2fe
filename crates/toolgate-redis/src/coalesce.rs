//! Coalesced admissions: the calls `admit_bucket.lua` decides (one enforced bucket,
//! now or never) that wait at the same moment go to Redis together, one script run
//! per bucket, which decides them in arrival order, each exactly as if it had run
//! alone (the same state, the same answer). Redis then reads and writes a bucket once
//! per run instead of once per call, which is what bounds a shared quota's
//! throughput.
//!
//! Group commit, so that nothing waits when there is nothing to batch: a call goes
//! out at once, alone, while fewer than [`MAX_IN_FLIGHT`] round trips of this link's
//! admissions are in flight; otherwise it queues, and when a round trip returns, the
//! queue (up to [`MAX_BATCH`] calls) goes out as the next one, from a spawned task.
//! One round trip in flight: with 64 callers on one connection (`scripts/bench-redis`)
//! it admitted more per second than two or four (larger batches: less work for the
//! client and for Redis), at a lower median latency.
//!
//! Every caller waits at most the store's timeout from its arrival, queueing
//! included, and records its own latency and error in the store's metrics, as an
//! uncoalesced call does (a batch's round trip records nothing itself).
//!
//! Cancellation: a caller dropped (or timed out) while it queues is left out of its
//! batch (nothing charged); one dropped after its call went out leaves the charge in
//! Redis, as the uncoalesced round trip does (see [`crate::gate::Gate::admit_now`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::oneshot;

use crate::conn::{Conn, Timed};
use crate::error::StoreError;
use crate::script::{BucketCall, Costs, Decision, Scripts};

/// Round trips of admissions in flight at once per link before calls queue.
pub(crate) const MAX_IN_FLIGHT: usize = 1;
/// Calls per batch at most.
pub(crate) const MAX_BATCH: usize = 64;

/// The calls of one link waiting to go out, its round trips in flight, and what
/// it runs them with (the link's connection, scripts, timeout and runtime).
#[derive(Debug)]
pub(crate) struct Coalescer {
    state: Mutex<State>,
    conn: Conn,
    scripts: Scripts,
    timeout: Duration,
    handle: tokio::runtime::Handle,
}

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    queue: VecDeque<Pending>,
}

/// A queued call: its time argument (empty: Redis' clock), what it asks, and where
/// its answer goes.
#[derive(Debug)]
struct Pending {
    now: String,
    call: BucketCall,
    tx: oneshot::Sender<Result<Decision, StoreError>>,
}

/// Consecutive calls on one bucket with the same time argument: one script run.
#[derive(Debug)]
struct Group {
    now: String,
    key: Arc<str>,
    den: u64,
    runs: Vec<(Costs, u64)>,
    txs: Vec<oneshot::Sender<Result<Decision, StoreError>>>,
}

/// Whether a call goes out at once (with what it asks) or waits in the queue for
/// its answer.
enum Turn {
    Now(String, BucketCall),
    Queued(oneshot::Receiver<Result<Decision, StoreError>>),
}

/// A round trip in flight; when it ends (or its caller is dropped), the queue goes
/// out.
struct Flight<'a>(&'a Arc<Coalescer>);

// === impl Coalescer ===

impl Coalescer {
    /// Runs round trips on `conn` with `scripts`, each within `timeout`, batches on
    /// `handle`'s runtime.
    pub(crate) fn new(
        conn: Conn,
        scripts: Scripts,
        timeout: Duration,
        handle: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            conn,
            scripts,
            timeout,
            handle,
        })
    }

    /// Decides `call` at `now` (the link's time argument): at once when few round
    /// trips are in flight, else with the calls queued beside it.
    ///
    /// # Errors
    ///
    /// When Redis did not answer, or answered what the script never does.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        now: String,
        call: BucketCall,
    ) -> Result<Decision, StoreError> {
        let timed = Timed::start("admit");
        let turn = {
            let mut st = self.lock();
            if st.queue.is_empty() && st.in_flight < MAX_IN_FLIGHT {
                st.in_flight += 1;
                Turn::Now(now, call)
            } else {
                let (tx, rx) = oneshot::channel();
                st.queue.push_back(Pending { now, call, tx });
                Turn::Queued(rx)
            }
        };
        match turn {
            Turn::Now(now, call) => {
                let _flight = Flight(self);
                let runs = [(call.costs, 1)];
                let result = self.round_trip(&now, &call.key, call.den, &runs).await;
                let result = result.and_then(|mut d| {
                    d.pop().ok_or_else(|| StoreError::Reply {
                        op: "admit",
                        reply: "no decision".into(),
                    })
                });
                timed.done(result.as_ref().err());
                result
            }
            Turn::Queued(rx) => {
                let result = match tokio::time::timeout(self.timeout, rx).await {
                    Ok(Ok(answer)) => answer,
                    // The sender is dropped unanswered only when the runtime shuts down.
                    Ok(Err(_)) => Err(StoreError::Reply {
                        op: "admit",
                        reply: "the batch was dropped".into(),
                    }),
                    Err(_) => Err(StoreError::Timeout {
                        op: "admit",
                        timeout: self.timeout,
                    }),
                };
                timed.done(result.as_ref().err());
                result
            }
        }
    }

    /// Runs `admit_bucket.lua` on bucket `key` (denominator `den`) at `now` for
    /// `runs` of calls: one round trip, bounded by the store's timeout; a decision
    /// per call, in order. Unrecorded: its callers record.
    async fn round_trip(
        &self,
        now: &str,
        key: &str,
        den: u64,
        runs: &[(Costs, u64)],
    ) -> Result<Vec<Decision>, StoreError> {
        let inv = self.scripts.admit_bucket(now, key, den, runs);
        let value = self
            .conn
            .invoke_unrecorded("admit", &inv, self.timeout)
            .await?;
        Decision::parse(&value, runs)
    }

    /// A round trip ended: sends the queue as the next one, or frees its place.
    fn next(self: &Arc<Self>) {
        let batch: Vec<Pending> = {
            let mut st = self.lock();
            // Callers that left while queued are not sent (nothing is charged).
            st.queue.retain(|p| !p.tx.is_closed());
            if st.queue.is_empty() {
                st.in_flight = st.in_flight.saturating_sub(1);
                return;
            }
            let n = st.queue.len().min(MAX_BATCH);
            st.queue.drain(..n).collect()
        };
        let me = self.clone();
        drop(self.handle.spawn(async move {
            let _flight = Flight(&me);
            me.run(batch).await;
        }));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a batch: one script run per group, the groups of one bucket one after
    /// the other (in arrival order), different buckets side by side (one round trip
    /// when the connection pipelines them).
    async fn run(&self, batch: Vec<Pending>) {
        join_all(lanes(batch).into_iter().map(|lane| self.run_lane(lane))).await;
    }

    async fn run_lane(&self, lane: Vec<Group>) {
        for g in lane {
            // A decision per call of the group's runs (`Decision::parse` checks it),
            // so one per caller, in order.
            match self.round_trip(&g.now, &g.key, g.den, &g.runs).await {
                Ok(ds) => {
                    for (tx, d) in g.txs.into_iter().zip(ds) {
                        let _ = tx.send(Ok(d));
                    }
                }
                Err(e) => answer_all(g.txs, &e),
            }
        }
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.next();
    }
}

fn answer_all(txs: Vec<oneshot::Sender<Result<Decision, StoreError>>>, e: &StoreError) {
    for tx in txs {
        let _ = tx.send(Err(e.clone()));
    }
}

/// The batch as lanes, one per bucket key: its groups in arrival order (a new group
/// whenever the time argument or the bucket's denominator changes), each group's
/// calls as runs of equal costs.
fn lanes(batch: Vec<Pending>) -> Vec<Vec<Group>> {
    let mut lanes: Vec<Vec<Group>> = Vec::new();
    for p in batch {
        let lane = match lanes
            .iter()
            .position(|l| l.first().is_some_and(|g| g.key == p.call.key))
        {
            Some(i) => &mut lanes[i],
            None => {
                lanes.push(Vec::new());
                let last = lanes.len() - 1;
                &mut lanes[last]
            }
        };
        let same = lane
            .last()
            .is_some_and(|g| g.now == p.now && g.den == p.call.den);
        if !same {
            lane.push(Group {
                now: p.now,
                key: p.call.key,
                den: p.call.den,
                runs: Vec::new(),
                txs: Vec::new(),
            });
        }
        let Some(g) = lane.last_mut() else { continue };
        match g.runs.last_mut() {
            Some((c, n)) if *c == p.call.costs => *n += 1,
            _ => g.runs.push((p.call.costs, 1)),
        }
        g.txs.push(p.tx);
    }
    lanes
}
