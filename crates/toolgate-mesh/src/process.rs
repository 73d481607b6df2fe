//! One delivered call, in this order: read and check it, drop it if its deadline
//! passed, take its idempotency claim, run it, and then either publish its one
//! result (and a dead letter when it cannot succeed) and acknowledge it, or hand it
//! back to the broker for later with the delay the engine knows.
//!
//! A call is acknowledged only after its result is published: delivery is
//! at-least-once, and a call is never lost. See [`crate::outbox`] for how a result
//! published twice (after a crash) is stored once.

use std::time::{Duration, SystemTime};

use async_nats::jetstream::message::Message;
use async_nats::jetstream::AckKind;
use toolgate::{Permit, Reason};

use crate::claims::{Claim, Owned};
use crate::delivery::Delivery;
use crate::envelope::{rfc3339, DeadReason, ErrorBody, MeshCall, MeshResult, Unreadable};
use crate::executor::{Execution, Failure, Job};
use crate::shared::Shared;
use crate::stats::ToolStats;

/// How a call's delivery ends.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Its one result (and a dead letter, when it cannot succeed).
    Final {
        result: Box<MeshResult>,
        dead: Option<DeadReason>,
    },
    /// Deliver it again after this long.
    Later(Duration),
}

/// A call's admission taken before it was pulled; given back (as if it never
/// came) unless the call runs on it.
struct Admission(Option<Permit>);

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.cancel();
        }
    }
}

/// Handles one delivered call of `tool`; `permit` is its admission when the worker
/// admitted it before pulling it.
pub(crate) async fn handle(
    shared: &Shared,
    tool: &str,
    stats: &ToolStats,
    msg: Message,
    permit: Option<Permit>,
) {
    let admission = Admission(permit);
    let delivery = match msg.info() {
        Ok(i) => {
            stats.set_pending(i.pending);
            Delivery {
                number: u64::try_from(i.delivered).unwrap_or(1),
                sequence: i.stream_sequence,
            }
        }
        Err(_) => Delivery {
            number: 1,
            sequence: 0,
        },
    };
    if delivery.number > 1 {
        stats.redelivered();
    }
    let (ending, known) = match MeshCall::parse(&msg.payload) {
        Ok(mut call) => {
            let known = Unreadable::of(&call);
            let ending = decide(shared, tool, &mut call, delivery, admission, &msg).await;
            (ending, known)
        }
        Err(u) => (unreadable(tool, u.clone()), u),
    };
    conclude(shared, tool, stats, &msg, &known, ending, delivery).await;
}

/// A payload that is not a call: a result when its call id could be read, and a
/// dead letter always.
fn unreadable(tool: &str, u: Unreadable) -> Ending {
    let result = MeshResult::failed(
        u.call_id.unwrap_or_default(),
        u.tool.unwrap_or_else(|| tool.to_string()),
        "invalid",
        ErrorBody::new(DeadReason::InvalidEnvelope.as_str(), u.message),
    );
    Ending::Final {
        result: Box::new(result),
        dead: Some(DeadReason::InvalidEnvelope),
    }
}

/// A final ending of a call that did not run.
fn refused(
    call: &MeshCall,
    outcome: &str,
    dead: DeadReason,
    code: &str,
    message: String,
) -> Ending {
    let result = MeshResult::failed(
        call.call_id.clone(),
        call.tool.clone(),
        outcome,
        ErrorBody::new(code, message),
    );
    Ending::Final {
        result: Box::new(result),
        dead: Some(dead),
    }
}

/// Why a readable call cannot run at all, if it cannot.
fn check(shared: &Shared, tool: &str, call: &MeshCall) -> Option<Ending> {
    if call.tool != tool {
        let message = format!(
            "tool {:?} does not match the subject's tool {tool:?}",
            call.tool
        );
        return Some(refused(
            call,
            "invalid",
            DeadReason::InvalidEnvelope,
            "invalid_envelope",
            message,
        ));
    }
    if !shared.executor.runs(tool) {
        let message = format!("no tool {tool:?} with an upstream to run it");
        return Some(refused(
            call,
            "rejected",
            DeadReason::UnknownTool,
            "unknown_tool",
            message,
        ));
    }
    if let Err(e) = shared.executor.check_arguments(tool, &call.arguments) {
        return Some(refused(
            call,
            "invalid_arguments",
            DeadReason::InvalidArguments,
            "invalid_arguments",
            e,
        ));
    }
    if call.time_left(SystemTime::now()) == Some(Duration::ZERO) {
        let message = "the call's deadline passed before it could start".to_string();
        return Some(refused(
            call,
            "deadline_exceeded",
            DeadReason::DeadlineExceeded,
            "deadline_exceeded",
            message,
        ));
    }
    None
}

/// Checks, claims and runs a readable call.
async fn decide(
    shared: &Shared,
    tool: &str,
    call: &mut MeshCall,
    delivery: Delivery,
    admission: Admission,
    msg: &Message,
) -> Ending {
    if let Some(ending) = check(shared, tool, call) {
        return ending;
    }
    let owned = match &call.idempotency_key {
        None => None,
        Some(key) => match shared.claims.claim(tool, key).await {
            Ok(Claim::Mine(o)) => Some(o),
            Ok(Claim::Done(stored)) => return replay(call, *stored),
            Ok(Claim::Busy(wait)) => return later(shared, call, delivery, wait, None),
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", tool, error = %e,
                    "the idempotency bucket did not answer; the call is delivered again later");
                return Ending::Later(Duration::from_secs(1));
            }
        },
    };
    let ending = run(shared, call, delivery, admission, owned.clone(), msg).await;
    match (owned, &ending) {
        (Some(o), Ending::Final { result, .. }) => {
            if let Err(e) = shared.claims.finish(o, result).await {
                // Not stored: not acknowledged either, so a duplicate cannot miss it.
                tracing::warn!(target: "toolgate::mesh", tool, error = %e,
                    "the result could not be stored for its idempotency key; the call is delivered again later");
                return Ending::Later(Duration::from_secs(1));
            }
        }
        (Some(o), Ending::Later(_)) => shared.claims.release(o).await,
        (None, _) => {}
    }
    ending
}

/// A stored result, answering a call with the same key.
fn replay(call: &MeshCall, mut stored: MeshResult) -> Ending {
    stored.call_id.clone_from(&call.call_id);
    Ending::Final {
        result: Box::new(stored),
        dead: None,
    }
}

/// Delivers the call again after `wait`, unless its deliveries or its deadline run
/// out first: then `last` (or a `deadline_exceeded`) is final.
fn later(
    shared: &Shared,
    call: &MeshCall,
    delivery: Delivery,
    wait: Duration,
    last: Option<Ending>,
) -> Ending {
    let left = call.time_left(SystemTime::now());
    if left.is_some_and(|l| l <= wait) {
        let message = format!(
            "the call could not run before its deadline (the next try was {}ms away)",
            wait.as_millis()
        );
        return refused(
            call,
            "deadline_exceeded",
            DeadReason::DeadlineExceeded,
            "deadline_exceeded",
            message,
        );
    }
    if delivery.number >= u64::from(shared.config.max_deliver) {
        return match last {
            Some(Ending::Final { result, .. }) => Ending::Final {
                result,
                dead: Some(DeadReason::MaxDeliver),
            },
            _ => {
                let message = format!(
                    "delivered {} times without a chance to run",
                    delivery.number
                );
                refused(
                    call,
                    "rejected",
                    DeadReason::MaxDeliver,
                    "max_deliver",
                    message,
                )
            }
        };
    }
    Ending::Later(wait)
}

/// Runs a checked call, with in-progress acknowledgements (and claim renewals) while
/// it runs.
async fn run(
    shared: &Shared,
    call: &mut MeshCall,
    delivery: Delivery,
    mut admission: Admission,
    mut owned: Option<Owned>,
    msg: &Message,
) -> Ending {
    let left = call.time_left(SystemTime::now());
    let half_ack = shared.config.ack_wait / 2;
    let job = Job {
        tool: call.tool.clone(),
        tenant: call.tenant.clone(),
        // The call's arguments go to the job: nothing after this reads them.
        arguments: std::mem::take(&mut call.arguments),
        idempotency_key: call.idempotency_key.clone(),
        tokens: call.tokens,
        deadline: left,
        max_wait: left.map_or(half_ack, |l| l.min(half_ack)),
        permit: admission.0.take(),
    };
    let execution = {
        let mut fut = std::pin::pin!(shared.executor.execute(job));
        let every = (shared.config.ack_wait / 3).max(Duration::from_millis(100));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                e = &mut fut => break e,
                _ = tick.tick() => {
                    let _ = msg.ack_with(AckKind::Progress).await;
                    if let Some(o) = owned.as_mut() {
                        shared.claims.renew(o).await;
                    }
                }
            }
        }
    };
    ending_of(shared, call, delivery, execution)
}

/// The ending of an execution.
fn ending_of(shared: &Shared, call: &MeshCall, delivery: Delivery, e: Execution) -> Ending {
    match e {
        Execution::Success {
            result,
            status,
            attempts,
            admitted_at,
        } => {
            let mut r = MeshResult::new(call.call_id.clone(), call.tool.clone(), "success");
            r.result = Some(result);
            r.status = status;
            r.attempts = attempts;
            r.admitted_at = Some(rfc3339(admitted_at));
            Ending::Final {
                result: Box::new(r),
                dead: None,
            }
        }
        Execution::Rejected(no) => {
            let (code, message) = (no.reason().as_str(), no.to_string());
            let dead = match no.reason() {
                // Admitted too late to finish by its deadline: no later try is earlier.
                _ if no.is_past_deadline() => {
                    let dead = DeadReason::DeadlineExceeded;
                    return refused(call, "deadline_exceeded", dead, code, message);
                }
                Reason::UnknownTool => DeadReason::UnknownTool,
                Reason::CostExceedsCapacity => DeadReason::InvalidEnvelope,
                _ => {
                    let final_ = refused(call, "rejected", DeadReason::MaxDeliver, code, message);
                    // Concurrency refusals carry no time: the worker's FIFO wait
                    // failed within its bound, so try again a little later.
                    let wait = no.retry_after().unwrap_or(Duration::from_secs(1));
                    return later(shared, call, delivery, wait, Some(final_));
                }
            };
            refused(call, "rejected", dead, code, message)
        }
        Execution::Failed(f) => failed(shared, call, delivery, f),
    }
}

fn failed(shared: &Shared, call: &MeshCall, delivery: Delivery, f: Failure) -> Ending {
    let mut r = MeshResult::failed(
        call.call_id.clone(),
        call.tool.clone(),
        f.outcome,
        ErrorBody::new(&f.code, f.message.clone()),
    );
    r.status = f.status;
    r.attempts = f.attempts;
    r.admitted_at = f.admitted_at.map(rfc3339);
    let final_ = Ending::Final {
        result: Box::new(r),
        dead: Some(f.dead),
    };
    match f.retry_in {
        Some(hint) => later(
            shared,
            call,
            delivery,
            hint.max(backoff(delivery)),
            Some(final_),
        ),
        None => final_,
    }
}

/// The least delay before a failed call's next delivery: 500 ms, doubling with each
/// delivery, at most 30 s (what the engine knows — an open circuit, a pause — may be
/// longer and wins).
fn backoff(delivery: Delivery) -> Duration {
    let doublings = u32::try_from(delivery.number.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(6);
    (Duration::from_millis(500) * (1 << doublings)).min(Duration::from_secs(30))
}

/// Publishes the result (and dead letter) of a final ending and acknowledges the
/// call, or hands it back for later.
async fn conclude(
    shared: &Shared,
    tool: &str,
    stats: &ToolStats,
    msg: &Message,
    known: &Unreadable,
    ending: Ending,
    delivery: Delivery,
) {
    match ending {
        Ending::Later(wait) => {
            stats.handled("redelivered");
            if let Err(e) = msg.ack_with(AckKind::Nak(Some(wait))).await {
                tracing::debug!(target: "toolgate::mesh", tool, error = %e, "nak not sent; the call comes back after ack_wait");
            }
        }
        Ending::Final { result, dead } => {
            let published = shared
                .outbox
                .finish(&result, known, dead, &msg.payload, delivery)
                .await;
            match published {
                Ok(()) => {
                    stats.handled(&result.outcome);
                    if let Some(reason) = dead {
                        stats.dead_letter(reason);
                    }
                    if let Err(e) = msg.double_ack().await {
                        tracing::debug!(target: "toolgate::mesh", tool, error = %e,
                            "ack not confirmed; a redelivery is answered from the stored result");
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "toolgate::mesh", tool, error = %e,
                        "the result could not be published; the call is delivered again later");
                    let _ = msg
                        .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                        .await;
                }
            }
        }
    }
}
