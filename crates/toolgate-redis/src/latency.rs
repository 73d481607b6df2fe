//! The store's metrics of its round trips to Redis: `toolgate_store_latency_seconds`
//! by operation ([`Latency`], registered once per connection) and
//! `toolgate_store_errors_total` by operation and kind, recorded by [`Timed`].
//!
//! The histograms are registered when the connection is made, not looked up in the
//! recorder's registry on every call (a key built, hashed and found under a lock per
//! round trip): the same recorder sees the same samples, as the core's per-tool
//! handles do (`crates/toolgate/src/observe.rs`).

#![allow(
    clippy::disallowed_methods,
    reason = "a Redis round trip's latency (a metric) is measured on the real clock"
)]

use std::time::Instant;

use metrics::Histogram;

use crate::error::StoreError;

/// `toolgate_store_latency_seconds` of the operations a connection runs on every
/// call, registered once.
#[derive(Debug)]
pub(crate) struct Latency {
    admit: Histogram,
    release: Histogram,
    ping: Histogram,
}

/// A Redis operation being timed for the store's metrics, from [`Latency::start`] to
/// [`Timed::done`] (one latency sample, and the error if any).
pub(crate) struct Timed<'a> {
    latency: &'a Latency,
    op: &'static str,
    start: Instant,
}

// === impl Latency ===

impl Latency {
    /// The histograms, registered with the recorder in force (global, or the
    /// thread's local one).
    pub(crate) fn new() -> Self {
        let of =
            |op: &'static str| metrics::histogram!("toolgate_store_latency_seconds", "op" => op);
        Self {
            admit: of("admit"),
            release: of("release"),
            ping: of("ping"),
        }
    }

    /// Starts timing `op`.
    pub(crate) fn start(&self, op: &'static str) -> Timed<'_> {
        Timed {
            latency: self,
            op,
            start: Instant::now(),
        }
    }

    fn record(&self, op: &'static str, seconds: f64) {
        let h = match op {
            "admit" => &self.admit,
            "release" => &self.release,
            "ping" => &self.ping,
            // An operation without a handle of its own (`peek`, run when quota
            // levels are read, not on every call): looked up.
            _ => {
                metrics::histogram!("toolgate_store_latency_seconds", "op" => op).record(seconds);
                return;
            }
        };
        h.record(seconds);
    }
}

// === impl Timed ===

impl Timed<'_> {
    /// Records the operation's latency, and its error if it failed.
    pub(crate) fn done(self, err: Option<&StoreError>) {
        self.latency
            .record(self.op, self.start.elapsed().as_secs_f64());
        if let Some(e) = err {
            count_error(self.op, e);
        }
    }
}

/// Counts an error of `op` in `toolgate_store_errors_total`.
pub(crate) fn count_error(op: &'static str, e: &StoreError) {
    metrics::counter!("toolgate_store_errors_total", "op" => op, "kind" => e.kind()).increment(1);
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// The handles registered once record into the recorder in force when the
    /// connection was made, one sample per operation under its own `op` label (an
    /// operation without a handle of its own too), and errors are counted by kind.
    #[test]
    fn each_operation_records_under_its_own_label() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let latency = Latency::new();
            latency.start("admit").done(None);
            latency.start("admit").done(None);
            latency.start("release").done(None);
            let e = StoreError::Timeout {
                op: "ping",
                timeout: std::time::Duration::from_secs(1),
            };
            latency.start("ping").done(Some(&e));
            latency.start("other").done(None);
        });
        let mut samples = std::collections::BTreeMap::new();
        let mut errors = Vec::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_string())
            };
            match (key.name(), value) {
                ("toolgate_store_latency_seconds", DebugValue::Histogram(v)) => {
                    samples.insert(label("op").unwrap_or_default(), v.len());
                }
                ("toolgate_store_errors_total", DebugValue::Counter(n)) => {
                    errors.push((label("op"), label("kind"), n));
                }
                _ => {}
            }
        }
        let expected: std::collections::BTreeMap<String, usize> =
            [("admit", 2), ("release", 1), ("ping", 1), ("other", 1)]
                .into_iter()
                .map(|(op, n)| (op.to_string(), n))
                .collect();
        assert_eq!(samples, expected);
        assert_eq!(
            errors,
            vec![(Some("ping".to_string()), Some("timeout".to_string()), 1)]
        );
    }
}
