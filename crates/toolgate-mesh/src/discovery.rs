//! Calls no worker consumes: a tool this gateway cannot run, or a subject that
//! names no tool (`toolgate.calls.a.b`, a token that does not decode).
//!
//! A work-queue stream keeps such calls forever, so every [`EVERY`] the mesh asks
//! the calls stream which subjects hold calls, leaves out those some consumer (of
//! any replica) filters on, and drains the rest to the dead-letter stream —
//! `unknown_tool`, or `invalid_envelope` when the subject names no tool — through a
//! short-lived durable consumer per subject, deleted once the subject is empty so a
//! worker can take the subject over when the tool appears.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::Config;
use async_nats::jetstream::consumer::AckPolicy;
use futures_util::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::shared::Shared;
use crate::subject;

/// How often the calls stream is searched for calls no worker takes.
pub(crate) const EVERY: Duration = Duration::from_secs(2);

/// Calls drained per subject and round.
const DRAIN: usize = 256;

const PREFIX: &str = "toolgate-dead-";

/// Drains calls no worker takes until `stop`.
pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        match orphans(&shared).await {
            Ok(subjects) => {
                for s in subjects {
                    if let Err(e) = drain(&shared, &s).await {
                        tracing::debug!(target: "toolgate::mesh", subject = %s, error = %e, "dead-letter drain failed; next round");
                    }
                }
            }
            Err(e) => {
                tracing::debug!(target: "toolgate::mesh", error = %e, "cannot list the calls stream's subjects")
            }
        }
    }
}

/// Subjects holding calls that no consumer (but a drain) filters on, and no
/// worker of this gateway would take.
async fn orphans(shared: &Shared) -> Result<Vec<String>, String> {
    let stream = &shared.streams.calls;
    let subjects: Vec<(String, usize)> = stream
        .info_with_subjects(format!("{}.>", subject::CALLS))
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut taken: HashSet<String> = shared
        .executor
        .tools()
        .iter()
        .map(|t| subject::calls(t))
        .collect();
    let mut consumers = stream.consumers();
    while let Some(info) = consumers.next().await {
        let info = info.map_err(|e| e.to_string())?;
        if !info.name.starts_with(PREFIX) && !info.config.filter_subject.is_empty() {
            taken.insert(info.config.filter_subject);
        }
    }
    Ok(subjects
        .into_iter()
        .filter(|(s, n)| *n > 0 && !taken.contains(s))
        .map(|(s, _)| s)
        .collect())
}

fn drain_name(subject: &str) -> String {
    format!(
        "{PREFIX}{}",
        &hex::encode(Sha256::digest(subject.as_bytes()))[..16]
    )
}

/// Dead-letters what `subject` holds, then deletes its drain consumer.
async fn drain(shared: &Shared, subject: &str) -> Result<(), String> {
    let name = drain_name(subject);
    let config = Config {
        durable_name: Some(name.clone()),
        description: Some(format!("toolgate: dead-letter drain of {subject}")),
        filter_subject: subject.to_string(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: shared.config.ack_wait,
        inactive_threshold: Duration::from_secs(60),
        ..Config::default()
    };
    let stream = &shared.streams.calls;
    let consumer = stream
        .get_or_create_consumer(&name, config)
        .await
        .map_err(|e| e.to_string())?;
    let tool = subject::tool_of(subject).unwrap_or_default();
    let stats = shared.stats.tool("_");
    let mut messages = consumer
        .fetch()
        .max_messages(DRAIN)
        .messages()
        .await
        .map_err(|e| e.to_string())?;
    while let Some(m) = messages.next().await {
        let msg = m.map_err(|e| e.to_string())?;
        crate::process::handle(shared, &tool, &stats, msg, None).await;
    }
    release(shared, subject).await;
    Ok(())
}

/// Deletes the drain consumer of `subject`, if any (a worker wants the subject).
pub(crate) async fn release(shared: &Shared, subject: &str) {
    let _ = shared
        .streams
        .calls
        .delete_consumer(&drain_name(subject))
        .await;
}
