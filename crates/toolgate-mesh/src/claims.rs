//! Idempotent execution across replicas and crashes: one record per tool and
//! idempotency key in a JetStream key-value bucket.
//!
//! A record is `running` (an owner and the time its claim lapses) and then `done`
//! (the result). Taking a claim is an atomic create; taking over a lapsed one is a
//! compare-and-swap on the record's revision, so two replicas never both own a key.
//! The owner renews its claim while the call runs; a crashed owner's claim lapses
//! and the call, delivered again by the broker, is taken over and sent again with
//! the same `Idempotency-Key` — which is the upstream's to honour.
//!
//! Claims lapse by wall-clock time (`SystemTime`): replicas' clocks must agree to
//! well within the claim's length (the mesh's `ack_wait`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::envelope::MeshResult;

/// The idempotency records.
#[derive(Debug, Clone)]
pub(crate) struct Claims {
    kv: kv::Store,
    owner: String,
    length: Duration,
}

/// What a claim attempt found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// This replica owns the key now (at this revision): run the call.
    Mine(Owned),
    /// The call ran already: its stored result.
    Done(Box<MeshResult>),
    /// Another replica is running it: try again after this long.
    Busy(Duration),
}

/// A claim held by this replica.
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    key: String,
    revision: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Record {
    Running { owner: String, until_ms: u64 },
    Done { result: Box<MeshResult> },
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The record key of `tool` and `key`: hex SHA-256, since keys may hold anything.
pub(crate) fn record_key(tool: &str, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    hex::encode(h.finalize())
}

// === impl Claims ===

impl Claims {
    pub(crate) fn new(kv: kv::Store, owner: String, length: Duration) -> Self {
        Self { kv, owner, length }
    }

    fn running(&self) -> Bytes {
        let until_ms = now_ms().saturating_add(u64::try_from(self.length.as_millis()).unwrap_or(0));
        encode(&Record::Running {
            owner: self.owner.clone(),
            until_ms,
        })
    }

    /// Claims `tool`/`key`, or says who has it.
    ///
    /// # Errors
    ///
    /// When the bucket does not answer (the caller delivers the call again later).
    pub(crate) async fn claim(&self, tool: &str, key: &str) -> Result<Claim, String> {
        let k = record_key(tool, key);
        // A record can change between the create and the read: three rounds settle
        // every interleaving of two replicas.
        for _ in 0..3 {
            match self.kv.create(&k, self.running()).await {
                Ok(revision) => return Ok(Claim::Mine(Owned { key: k, revision })),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("idempotency record: {e}")),
            }
            let Some(entry) = self
                .kv
                .entry(&k)
                .await
                .map_err(|e| format!("idempotency record: {e}"))?
            else {
                continue;
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            match serde_json::from_slice::<Record>(&entry.value) {
                Ok(Record::Done { result }) => return Ok(Claim::Done(result)),
                Ok(Record::Running { until_ms, .. }) if until_ms > now_ms() => {
                    return Ok(Claim::Busy(Duration::from_millis(until_ms - now_ms())));
                }
                // Lapsed (its owner died) or unreadable: take it over.
                _ => match self.kv.update(&k, self.running(), entry.revision).await {
                    Ok(revision) => return Ok(Claim::Mine(Owned { key: k, revision })),
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {}
                    Err(e) => return Err(format!("idempotency record: {e}")),
                },
            }
        }
        Ok(Claim::Busy(Duration::from_millis(100)))
    }

    /// Extends a claim while its call runs. `false` when another replica took it
    /// over (this one's claim had lapsed): the call runs on, and whichever result
    /// is stored last answers later duplicates.
    pub(crate) async fn renew(&self, owned: &mut Owned) -> bool {
        match self
            .kv
            .update(&owned.key, self.running(), owned.revision)
            .await
        {
            Ok(revision) => {
                owned.revision = revision;
                true
            }
            Err(e) => {
                tracing::warn!(target: "toolgate::mesh", error = %e, "an idempotency claim could not be renewed");
                false
            }
        }
    }

    /// Stores the result of a claimed call, so that duplicates get it.
    ///
    /// # Errors
    ///
    /// When the bucket does not answer.
    pub(crate) async fn finish(&self, owned: Owned, result: &MeshResult) -> Result<(), String> {
        let record = encode(&Record::Done {
            result: Box::new(result.clone()),
        });
        self.kv
            .put(&owned.key, record)
            .await
            .map(drop)
            .map_err(|e| format!("idempotency record: {e}"))
    }

    /// Gives a claim up (the call will be delivered again), unless someone took it.
    pub(crate) async fn release(&self, owned: Owned) {
        if let Err(e) = self
            .kv
            .delete_expect_revision(&owned.key, Some(owned.revision))
            .await
        {
            tracing::debug!(target: "toolgate::mesh", error = %e, "an idempotency claim was not released (it lapses)");
        }
    }
}

fn encode(r: &Record) -> Bytes {
    Bytes::from(serde_json::to_vec(r).unwrap_or_default())
}
