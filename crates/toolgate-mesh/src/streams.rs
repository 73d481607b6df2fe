//! The streams and the idempotency bucket, created at start-up when missing.
//!
//! Creation is idempotent: every replica runs it, and an existing stream is kept.
//! What toolgate relies on is checked — the calls stream must be a work queue on
//! `toolgate.calls.>` (each call is delivered to one consumer and removed once
//! acknowledged) — and refused with a clear error otherwise; limits the config sets
//! (replicas, ages, duplicate windows) are brought in line with an update.

use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{Config, DiscardPolicy, RetentionPolicy, StorageType};
use async_nats::jetstream::Context;

use crate::config::MeshConfig;
use crate::subject;

/// What toolgate keeps in the broker.
#[derive(Debug, Clone)]
pub(crate) struct Streams {
    pub(crate) calls: async_nats::jetstream::stream::Stream,
    pub(crate) claims: kv::Store,
}

/// The config of each stream, as toolgate wants it.
pub(crate) fn wanted(c: &MeshConfig) -> [Config; 3] {
    let base = |name: &str, prefix: &str| Config {
        name: name.to_string(),
        subjects: vec![format!("{prefix}.>")],
        storage: StorageType::File,
        num_replicas: c.replicas,
        duplicate_window: c.duplicate_window,
        ..Config::default()
    };
    [
        Config {
            retention: RetentionPolicy::WorkQueue,
            description: Some("toolgate: tool calls, one subject per tool".into()),
            ..base(&c.calls_stream, subject::CALLS)
        },
        Config {
            max_age: c.result_max_age,
            description: Some("toolgate: the result of each call, by call id".into()),
            ..base(&c.results_stream, subject::RESULTS)
        },
        Config {
            max_age: c.dlq_max_age,
            duplicate_window: c.duplicate_window.min(c.dlq_max_age),
            description: Some("toolgate: calls that cannot succeed, with the reason".into()),
            ..base(&c.dlq_stream, subject::DLQ)
        },
    ]
}

/// Creates (or checks and updates) the three streams and the bucket.
///
/// # Errors
///
/// A message naming the stream and the problem: the broker is unreachable, JetStream
/// is off, or an existing stream cannot serve (wrong retention or subjects).
pub(crate) async fn ensure(js: &Context, c: &MeshConfig) -> Result<Streams, String> {
    let [calls, results, dlq] = wanted(c);
    let calls = ensure_stream(js, calls).await?;
    ensure_stream(js, results).await?;
    ensure_stream(js, dlq).await?;
    let claims = ensure_bucket(js, c).await?;
    Ok(Streams { calls, claims })
}

async fn ensure_stream(
    js: &Context,
    want: Config,
) -> Result<async_nats::jetstream::stream::Stream, String> {
    let name = want.name.clone();
    let mut stream = js
        .get_or_create_stream(want.clone())
        .await
        .map_err(|e| format!("stream {name}: cannot create or read it: {e}"))?;
    let have = stream
        .info()
        .await
        .map_err(|e| format!("stream {name}: cannot read its config: {e}"))?
        .config
        .clone();
    if have.retention != want.retention || have.subjects != want.subjects {
        return Err(format!(
            "stream {name} exists with retention {:?} on {:?}; toolgate needs retention {:?} \
             on {:?} (remove it or name another stream in [mesh])",
            have.retention, have.subjects, want.retention, want.subjects
        ));
    }
    let drifted = have.num_replicas != want.num_replicas
        || have.max_age != want.max_age
        || have.duplicate_window != want.duplicate_window;
    if drifted {
        let update = Config {
            num_replicas: want.num_replicas,
            max_age: want.max_age,
            duplicate_window: want.duplicate_window,
            ..have
        };
        match js.update_stream(update).await {
            Ok(_) => tracing::info!(target: "toolgate::mesh", stream = %name,
                "stream limits updated to the [mesh] settings"),
            Err(e) => tracing::warn!(target: "toolgate::mesh", stream = %name, error = %e,
                "stream limits differ from the [mesh] settings and cannot be updated; \
                 the stream's own limits stay in force"),
        }
    }
    Ok(stream)
}

/// The bucket's stream is created here, as a key-value store's stream is laid out
/// (`KV_<bucket>` on `$KV.<bucket>.>`, one value per key, rollups, direct gets),
/// rather than by the client library's bucket creation, which first reads account
/// details that NATS servers before 2.10 do not send.
async fn ensure_bucket(js: &Context, c: &MeshConfig) -> Result<kv::Store, String> {
    let name = &c.idempotency_bucket;
    let config = Config {
        name: format!("KV_{name}"),
        description: Some("toolgate: idempotency records (in progress, then the result)".into()),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_age: c.idempotency_ttl,
        storage: StorageType::File,
        num_replicas: c.replicas,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        duplicate_window: c.idempotency_ttl.min(std::time::Duration::from_secs(120)),
        ..Config::default()
    };
    js.get_or_create_stream(config)
        .await
        .map_err(|e| format!("key-value bucket {name}: cannot create it: {e}"))?;
    js.get_key_value(name.as_str())
        .await
        .map_err(|e| format!("key-value bucket {name}: cannot open it: {e}"))
}
