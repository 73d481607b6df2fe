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
//! uncoalesced call does (a batch's round trip records nothing itself). The bounds
//! are kept with one timer per round trip, not one per caller: a lone call's round
//! trip ends at its caller's deadline; a batch's group waits until the last of its
//! callers' deadlines, answering each caller a timeout at its own deadline if Redis
//! has not answered by then, and a caller whose deadline passed while it queued is
//! answered a timeout without being sent (nothing charged).
//!
//! Cancellation: a caller dropped (or timed out) while it queues is left out of its
//! batch (nothing charged); one dropped after its call went out leaves the charge in
//! Redis, as the uncoalesced round trip does (see [`crate::gate::Gate::admit_now`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::conn::Conn;
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

/// Where a queued call's answer goes.
type Answer = oneshot::Sender<Result<Decision, StoreError>>;

/// A queued call: its time argument (empty: Redis' clock), what it asks, when its
/// caller stops waiting (its arrival plus the store's timeout), and where its answer
/// goes.
#[derive(Debug)]
struct Pending {
    now: String,
    call: BucketCall,
    deadline: Instant,
    tx: Answer,
}

/// Consecutive calls on one bucket with the same time argument: one script run.
/// `callers` are its callers in order (one per call of its runs): where each answer
/// goes (`None` once answered) and each caller's deadline.
#[derive(Debug)]
struct Group {
    now: String,
    key: Arc<str>,
    den: u64,
    runs: Vec<(Costs, u64)>,
    callers: Vec<(Option<Answer>, Instant)>,
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

    /// A coalescer of its own on the same connection, scripts, timeout and runtime
    /// (a reload's link).
    pub(crate) fn fresh(&self) -> Arc<Self> {
        Self::new(
            self.conn.clone(),
            self.scripts.clone(),
            self.timeout,
            self.handle.clone(),
        )
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
        let timed = self.conn.timed("admit");
        let deadline = Instant::now() + self.timeout;
        let turn = {
            let mut st = self.lock();
            if st.queue.is_empty() && st.in_flight < MAX_IN_FLIGHT {
                st.in_flight += 1;
                Turn::Now(now, call)
            } else {
                let (tx, rx) = oneshot::channel();
                st.queue.push_back(Pending {
                    now,
                    call,
                    deadline,
                    tx,
                });
                Turn::Queued(rx)
            }
        };
        match turn {
            Turn::Now(now, call) => {
                // Boxed: a lone call's round trip (the connection's send and the
                // timer) is most of this future's size, and a queued caller, the
                // common one under load, would otherwise carry it, moved at every
                // level of the admission's futures (docs/benchmarks.md, round
                // eighteen).
                let result = Box::pin(self.alone(now, call, deadline)).await;
                timed.done(result.as_ref().err());
                result
            }
            Turn::Queued(rx) => {
                // Answered by the batch by this caller's deadline (`run_group`).
                let result = match rx.await {
                    Ok(answer) => answer,
                    // The sender is dropped unanswered only when the runtime shuts down.
                    Err(_) => Err(StoreError::Reply {
                        op: "admit",
                        reply: "the batch was dropped".into(),
                    }),
                };
                timed.done(result.as_ref().err());
                result
            }
        }
    }

    /// Decides `call` at `now` in a round trip of its own, by `deadline`; the queue
    /// goes out when it ends.
    async fn alone(
        self: &Arc<Self>,
        now: String,
        call: BucketCall,
        deadline: Instant,
    ) -> Result<Decision, StoreError> {
        let _flight = Flight(self);
        let runs = [(call.costs, 1)];
        let trip = self.round_trip(&now, &call.key, call.den, &runs);
        let result = match tokio::time::timeout_at(deadline, trip).await {
            Ok(result) => result,
            Err(_) => Err(self.timed_out()),
        };
        result.and_then(|mut d| {
            d.pop().ok_or_else(|| StoreError::Reply {
                op: "admit",
                reply: "no decision".into(),
            })
        })
    }

    /// Runs `admit_bucket.lua` on bucket `key` (denominator `den`) at `now` for
    /// `runs` of calls: one round trip, unbounded (its caller bounds it); a
    /// decision per call, in order. Unrecorded: its callers record.
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
            .invoke_unbounded("admit", &inv, self.timeout)
            .await?;
        Decision::parse(&value, runs)
    }

    /// What a caller gets when Redis has not answered by its deadline.
    fn timed_out(&self) -> StoreError {
        StoreError::Timeout {
            op: "admit",
            timeout: self.timeout,
        }
    }

    /// A round trip ended: sends the queue as the next one, or frees its place.
    fn next(self: &Arc<Self>) {
        let now = Instant::now();
        let (batch, expired) = {
            let mut st = self.lock();
            // Callers that left while queued are not sent (nothing is charged), nor
            // are those whose deadline passed while they queued: the first ones, in
            // arrival order (answered below).
            st.queue.retain(|p| !p.tx.is_closed());
            let late = st.queue.iter().take_while(|p| p.deadline <= now).count();
            let expired: Vec<Pending> = st.queue.drain(..late).collect();
            let batch = if st.queue.is_empty() {
                st.in_flight = st.in_flight.saturating_sub(1);
                None
            } else {
                let n = st.queue.len().min(MAX_BATCH);
                Some(st.queue.drain(..n).collect::<Vec<Pending>>())
            };
            (batch, expired)
        };
        for p in expired {
            let _ = p.tx.send(Err(self.timed_out()));
        }
        let Some(batch) = batch else { return };
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
        join_all(
            by_bucket(batch)
                .into_iter()
                .map(|groups| self.run_bucket(groups)),
        )
        .await;
    }

    async fn run_bucket(&self, groups: Vec<Group>) {
        for g in groups {
            self.run_group(g).await;
        }
    }

    /// One group's round trip, with one timer: each caller is answered the decision
    /// if Redis answers by its deadline, else a timeout at its deadline; the round
    /// trip is given up when every caller has been answered. The groups of a bucket are
    /// in arrival order and every deadline is an arrival plus the same timeout, so a
    /// later group's callers have later deadlines than this group's: none of them is
    /// past its deadline while this group's round trip runs.
    async fn run_group(&self, g: Group) {
        let mut callers = g.callers;
        let trip = self.round_trip(&g.now, &g.key, g.den, &g.runs);
        tokio::pin!(trip);
        let Some(first) = earliest(&callers) else {
            return;
        };
        let timer = tokio::time::sleep_until(first);
        tokio::pin!(timer);
        loop {
            tokio::select! {
                biased;
                result = &mut trip => {
                    // A decision per call of the group's runs (`Decision::parse`
                    // checks it), so one per caller, in order.
                    match result {
                        Ok(ds) => {
                            for ((tx, _), d) in callers.into_iter().zip(ds) {
                                if let Some(tx) = tx {
                                    let _ = tx.send(Ok(d));
                                }
                            }
                        }
                        Err(e) => answer_all(callers.into_iter().filter_map(|(tx, _)| tx), &e),
                    }
                    return;
                }
                () = &mut timer => {
                    let now = Instant::now();
                    for (tx, deadline) in &mut callers {
                        if *deadline <= now {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(Err(self.timed_out()));
                            }
                        }
                    }
                    match earliest(&callers) {
                        Some(next) => timer.as_mut().reset(next),
                        None => return,
                    }
                }
            }
        }
    }
}

/// The earliest deadline of the callers still waiting.
fn earliest(callers: &[(Option<Answer>, Instant)]) -> Option<Instant> {
    callers
        .iter()
        .filter(|(tx, _)| tx.is_some())
        .map(|(_, d)| *d)
        .min()
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.next();
    }
}

fn answer_all(txs: impl IntoIterator<Item = Answer>, e: &StoreError) {
    for tx in txs {
        let _ = tx.send(Err(e.clone()));
    }
}

/// The batch by bucket key: each bucket's groups in arrival order (a new group
/// whenever the time argument or the bucket's denominator changes), each group's
/// calls as runs of equal costs.
fn by_bucket(batch: Vec<Pending>) -> Vec<Vec<Group>> {
    let mut buckets: Vec<Vec<Group>> = Vec::new();
    for p in batch {
        let groups = match buckets
            .iter()
            .position(|b| b.first().is_some_and(|g| g.key == p.call.key))
        {
            Some(i) => &mut buckets[i],
            None => {
                buckets.push(Vec::new());
                let last = buckets.len() - 1;
                &mut buckets[last]
            }
        };
        let same = groups
            .last()
            .is_some_and(|g| g.now == p.now && g.den == p.call.den);
        if !same {
            groups.push(Group {
                now: p.now,
                key: p.call.key,
                den: p.call.den,
                runs: Vec::new(),
                callers: Vec::new(),
            });
        }
        let Some(g) = groups.last_mut() else { continue };
        match g.runs.last_mut() {
            Some((c, n)) if *c == p.call.costs => *n += 1,
            _ => g.runs.push((p.call.costs, 1)),
        }
        g.callers.push((Some(p.tx), p.deadline));
    }
    buckets
}
