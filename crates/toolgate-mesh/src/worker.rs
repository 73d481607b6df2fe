//! One task per tool: pull its calls only as fast as admission can start them.
//!
//! Each tool has its own durable pull consumer on `toolgate.calls.<tool>`, so a
//! rate-limited or broken tool leaves its calls in the stream and never delays
//! another tool's. The consumer's `max_ack_pending` is the tool's `concurrency` (or
//! the mesh's `max_in_flight`), and the worker never has more calls in flight.
//!
//! - **Idle** (nothing was pending at the last pull): one pull of one call, waiting
//!   up to [`IDLE_PULL`], holding no admission; the call is admitted as it arrives.
//! - **Busy**, for a tool whose quotas depend on nothing in the call (no per-tenant
//!   partition, no token budget): the worker first *admits* — it waits in the
//!   engine's FIFO queue for the first admission (every gate included: rate,
//!   concurrency, adaptive limit, circuit breaker, upstream pauses) and takes what
//!   else is free now as a reservation — then pulls at most that many calls, each of
//!   which runs on its admission. Reserved admissions left over are given back as if
//!   they never were taken ([`Permit::cancel`]). The first, waited-for admission is
//!   given back too, but its requests stay spent (an admission the engine made after
//!   a wait cannot be taken back), so the worker waits for one only when the last
//!   pull left calls in the stream: it then finds none only when another replica
//!   took them first. No call is pulled that cannot start, and nothing polls: the
//!   engine's wait ends at the next conforming time.
//! - **Busy**, for a tool with per-tenant partitions or a token budget (whose
//!   admission depends on the call's tenant or cost): the worker pulls what its
//!   in-flight room allows, and each call is admitted with its own tenant and cost,
//!   waiting up to half the `ack_wait`; a call still refused is handed back to the
//!   broker with the engine's `retry_after` as the delay.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::Config;
use async_nats::jetstream::consumer::{AckPolicy, Consumer, DeliverPolicy};
use async_nats::jetstream::Message;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use toolgate::compile::{CostOf, Limit};
use toolgate::{Call, Permit};

use crate::shared::Shared;
use crate::stats::ToolStats;
use crate::subject;

/// How long an idle worker's pull waits for a call before it asks again.
///
/// Also the client's bound on a pull the broker never answers (it died with the pull
/// in hand): the client gives up `IDLE_PULL` + 5 s after asking, and the worker asks
/// again, so a broker restart stalls an idle tool for at most that long.
pub const IDLE_PULL: Duration = Duration::from_secs(5);

/// A busy pull does not wait for calls, but it still carries an expiry: without one,
/// a pull whose answer died with the broker would never end.
const BUSY_PULL: Duration = Duration::from_secs(1);

/// How long the worker pauses after a refusal that names no retry time.
const UNTIMED_PAUSE: Duration = Duration::from_millis(100);

/// The longest one wait for admission, before the worker checks for a stop.
const ADMIT_WAIT: Duration = Duration::from_secs(30);

/// The durable consumer of `tool`: `toolgate-<16 hex digits of SHA-256(tool)>`
/// (consumer names allow fewer characters than tool names).
pub fn consumer_name(tool: &str) -> String {
    let digest = Sha256::digest(tool.as_bytes());
    format!("toolgate-{}", &hex::encode(digest)[..16])
}

/// Runs `tool`'s worker until `stop` turns true; calls in flight finish first.
pub(crate) async fn run(shared: Arc<Shared>, tool: String, mut stop: watch::Receiver<bool>) {
    let stats = shared.stats.tool(&tool);
    let limit = in_flight_limit(&shared, &tool);
    let Some(consumer) = connect(&shared, &tool, &stats, limit, &mut stop).await else {
        return;
    };
    let room = Arc::new(Semaphore::new(limit));
    let mut tasks = JoinSet::new();
    // Idle until a pull shows calls waiting: an idle pull holds no admission.
    let mut busy = false;
    while !*stop.borrow() {
        while tasks.try_join_next().is_some() {}
        let pulled = tokio::select! {
            biased;
            _ = stop.changed() => break,
            p = pull(&shared, &tool, &consumer, &room, limit, busy) => p,
        };
        match pulled {
            Ok(batch) => {
                stats.error(None);
                busy = batch.pending > 0;
                for (msg, slot, permit) in batch.calls {
                    let (shared, tool, stats) = (shared.clone(), tool.clone(), stats.clone());
                    tasks.spawn(async move {
                        stats
                            .in_flight
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        crate::process::handle(&shared, &tool, &stats, msg, permit).await;
                        stats
                            .in_flight
                            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        drop(slot);
                    });
                }
            }
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", tool, error = %e, "pull failed; trying again");
                stats.error(Some(e));
                busy = false;
                pause(Duration::from_secs(1), &mut stop).await;
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// The calls of one pull, each with its in-flight slot and admission.
struct Batch {
    calls: Vec<(Message, OwnedSemaphorePermit, Option<Permit>)>,
    /// Calls left in the stream after the last one pulled.
    pending: u64,
}

/// The most calls of `tool` in flight: its `concurrency` (an adaptive limit the
/// engine keeps, else the policy's, which a shared store enforces), or the mesh's
/// default.
fn in_flight_limit(shared: &Shared, tool: &str) -> usize {
    let engine = &shared.engine;
    let local = engine.tool_state(tool, None).and_then(|s| {
        s.quotas
            .into_iter()
            .find(|q| q.kind == "concurrency" && q.quota.starts_with("tools."))
            .map(|q| q.capacity)
    });
    let policy = || {
        engine
            .tool_quotas(tool)?
            .into_iter()
            .find(|q| q.pool.is_none() && matches!(q.limit, Limit::Concurrency { .. }))
            .map(|q| q.capacity())
    };
    local
        .or_else(policy)
        .and_then(|c| usize::try_from(c).ok())
        .unwrap_or(shared.config.max_in_flight)
        .clamp(1, shared.config.max_in_flight.max(1))
}

/// Whether `tool`'s admission depends on nothing in the call (no partition per
/// tenant, no token budget): it can then be admitted before its call is pulled.
/// Asked of the policy's quotas, which are the same whether they live in this
/// process or in a shared store (where the engine keeps none of them), and of the
/// engine's own (an adaptive limit, partitioned with its tool).
fn admits_blind(shared: &Shared, tool: &str) -> bool {
    let engine = &shared.engine;
    let own = engine.tool_state(tool, None).is_none_or(|s| {
        s.quotas
            .iter()
            .all(|q| q.partitions.is_none() && q.kind != "tokens")
    });
    let policy = engine.tool_quotas(tool).is_none_or(|quotas| {
        quotas
            .iter()
            .all(|q| q.partition.is_none() && q.cost_of != CostOf::Tokens)
    });
    own && policy
}

async fn pull(
    shared: &Shared,
    tool: &str,
    consumer: &Consumer<Config>,
    room: &Arc<Semaphore>,
    limit: usize,
    busy: bool,
) -> Result<Batch, String> {
    if !busy {
        let first = room
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        return fetch(consumer, vec![first], Vec::new(), true).await;
    }
    // While calls keep coming, wait for a quarter of a pull's worth of room rather
    // than pull one call at a time as each finishes: fewer, fuller round trips.
    let chunk = (shared.config.batch.min(limit) / 4).max(1);
    let mut first = room
        .clone()
        .acquire_many_owned(u32::try_from(chunk).unwrap_or(1))
        .await
        .map_err(|e| e.to_string())?;
    let mut slots: Vec<OwnedSemaphorePermit> = (1..chunk).filter_map(|_| first.split(1)).collect();
    slots.push(first);
    while slots.len() < shared.config.batch {
        match room.clone().try_acquire_owned() {
            Ok(s) => slots.push(s),
            Err(_) => break,
        }
    }
    if !admits_blind(shared, tool) {
        return fetch(consumer, slots, Vec::new(), false).await;
    }
    let permits = admit(shared, tool, slots.len()).await;
    slots.truncate(permits.len());
    fetch(consumer, slots, permits, false).await
}

/// Admissions for up to `n` calls of `tool`: the first waits (FIFO, bounded by
/// [`ADMIT_WAIT`] per round), the rest are what is free now, each taken as a
/// reservation ([`toolgate::Engine::admit_all`]) so that one left unused gives back
/// everything it charged.
async fn admit(shared: &Shared, tool: &str, n: usize) -> Vec<Permit> {
    let engine = &shared.engine;
    let first = loop {
        match engine.admit(&Call::new(tool).max_wait(ADMIT_WAIT)).await {
            Ok(p) => break p,
            // The engine knows when it will conform (a pause, an open circuit, a
            // wait beyond the bound): sleep until then. A refusal without a time
            // (a full wait queue, say) pauses briefly rather than spin.
            Err(no) => {
                let d = no.retry_after().unwrap_or(UNTIMED_PAUSE);
                tokio::time::sleep(d.clamp(Duration::from_millis(1), ADMIT_WAIT)).await;
            }
        }
    };
    let mut permits = vec![first];
    // As many as the tool's quotas show free (asking for more would only count
    // refusals in its figures), in one all-or-nothing reservation.
    let free = engine.tool_state(tool, None).map_or(0, |s| {
        s.quotas
            .iter()
            .filter_map(|q| q.available)
            .min()
            .map_or(n, |a| usize::try_from(a).unwrap_or(n))
    });
    let more = free.min(n - 1);
    if more > 0 {
        let calls = vec![Call::new(tool); more];
        if let Ok(extra) = engine.admit_all(&calls).await {
            permits.extend(extra);
        }
    }
    permits
}

/// Pulls up to `slots.len()` calls (waiting up to [`IDLE_PULL`] when `idle`);
/// admissions and slots left over are given back. A pull that fails part-way keeps
/// what it got (the error is the broker's end of the pull, such as a full
/// `max_ack_pending`); one that is cancelled (the worker stops) hands back what it
/// got at once instead of leaving it to `ack_wait`.
async fn fetch(
    consumer: &Consumer<Config>,
    slots: Vec<OwnedSemaphorePermit>,
    mut permits: Vec<Permit>,
    idle: bool,
) -> Result<Batch, String> {
    let n = slots.len();
    let mut messages = if idle {
        consumer
            .batch()
            .max_messages(n)
            .expires(IDLE_PULL)
            .messages()
            .await
    } else {
        consumer
            .fetch()
            .max_messages(n)
            .expires(BUSY_PULL)
            .messages()
            .await
    }
    .map_err(|e| format!("pull: {e}"))?;
    let mut got = Unclaimed(Vec::with_capacity(n));
    let mut pending = 0;
    while got.0.len() < n {
        match messages.next().await {
            Some(Ok(msg)) => {
                pending = msg.info().map_or(0, |i| i.pending);
                got.0.push(msg);
            }
            Some(Err(e)) if got.0.is_empty() => return Err(format!("pull: {e}")),
            Some(Err(e)) => {
                tracing::debug!(target: "toolgate::mesh", error = %e, "a pull ended early; its calls run");
                break;
            }
            None => break,
        }
    }
    let msgs = std::mem::take(&mut got.0);
    // The reservations left over are the last ones: the first, waited-for admission
    // is the one kept longest.
    for p in permits.drain(msgs.len().min(permits.len())..) {
        p.cancel();
    }
    let mut permits = permits
        .into_iter()
        .map(Some)
        .chain(std::iter::repeat_with(|| None));
    let calls = msgs
        .into_iter()
        .zip(slots)
        .map(|(msg, slot)| (msg, slot, permits.next().flatten()))
        .collect();
    Ok(Batch { calls, pending })
}

/// Calls pulled but not yet handed to a task: given back to the broker (a NAK
/// without delay) if the pull is abandoned.
struct Unclaimed(Vec<Message>);

impl Drop for Unclaimed {
    fn drop(&mut self) {
        let msgs = std::mem::take(&mut self.0);
        if msgs.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for m in msgs {
                    let _ = m.ack_with(async_nats::jetstream::AckKind::Nak(None)).await;
                }
            });
        }
    }
}

/// Creates (or finds) `tool`'s consumer, retrying until it works or `stop`.
async fn connect(
    shared: &Shared,
    tool: &str,
    stats: &ToolStats,
    limit: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<Consumer<Config>> {
    let mut backoff = Duration::from_millis(200);
    while !*stop.borrow() {
        match consumer(shared, tool, limit).await {
            Ok(c) => return Some(c),
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", tool, error = %e, "cannot create the tool's consumer; trying again");
                stats.error(Some(e));
                pause(backoff, stop).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
    None
}

async fn consumer(shared: &Shared, tool: &str, limit: usize) -> Result<Consumer<Config>, String> {
    let name = consumer_name(tool);
    let config = Config {
        durable_name: Some(name.clone()),
        description: Some(format!("toolgate: calls of {tool}")),
        filter_subject: subject::calls(tool),
        ack_policy: AckPolicy::Explicit,
        ack_wait: shared.config.ack_wait,
        deliver_policy: DeliverPolicy::All,
        // Deliveries are counted by toolgate (`max_deliver`), which dead-letters
        // the call: the broker must never drop one silently.
        max_deliver: -1,
        max_ack_pending: i64::try_from(limit).unwrap_or(i64::MAX),
        ..Config::default()
    };
    let stream = &shared.streams.calls;
    match stream.get_or_create_consumer(&name, config.clone()).await {
        Ok(c)
            if c.cached_info().config.max_ack_pending == config.max_ack_pending
                && c.cached_info().config.ack_wait == config.ack_wait =>
        {
            Ok(c)
        }
        // Created with other limits (an older config, or another replica's): a
        // create with the same name updates it where the server allows.
        Ok(c) => match stream.create_consumer(config).await {
            Ok(updated) => Ok(updated),
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", tool, error = %e,
                    "the tool's consumer keeps its old limits (max_ack_pending, ack_wait)");
                Ok(c)
            }
        },
        Err(e) => {
            // A dead-letter drain of a subject no worker had (discovery) may hold
            // the filter: work queues allow one consumer per subject.
            crate::discovery::release(shared, &subject::calls(tool)).await;
            Err(format!("consumer {name}: {e}"))
        }
    }
}

async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}
