//! Adaptive concurrency: a concurrency limit that follows what the downstream can
//! sustain right now, instead of a static number.
//!
//! Why: a static limit is either too low when the service is healthy or too high when
//! it is struggling. Both algorithms here learn from each completed call's latency and
//! outcome and move the tool's concurrency limit between `min` and `max`; waiters are
//! admitted as soon as the limit grows (no polling).
//!
//! - **AIMD**: additive increase (`+increase`) after a call that succeeded within
//!   `target_latency`; multiplicative decrease (`× backoff`) after an error, a timeout
//!   or a call slower than the target.
//! - **Gradient** (in the style of Netflix's Gradient2): compares the latency without
//!   queueing (a baseline that follows a faster service at once and a slower one over
//!   `long_window` samples) with the latest one; when the latest rises above
//!   `tolerance` × the baseline the limit shrinks in proportion, otherwise it probes
//!   upwards by about its square root. Errors and timeouts back off as in AIMD. It
//!   settles where latency reaches `tolerance` × the baseline.

use std::time::Duration;

use crate::config::{AdaptiveAlgorithm, AdaptiveConfig};
use crate::sync::Mutex;
use crate::vocab::Outcome;

/// The adaptive limit of one tool.
#[derive(Debug)]
pub(crate) struct Adaptive {
    config: AdaptiveConfig,
    state: Mutex<State>,
    gauge: metrics::Gauge,
}

#[derive(Debug, Clone, Copy)]
struct State {
    limit: f64,
    /// Long-term latency average, in seconds (gradient).
    long: Option<f64>,
}

// === impl Adaptive ===

impl Adaptive {
    pub(crate) fn new(tool: &str, config: AdaptiveConfig) -> Self {
        let gauge = metrics::gauge!("toolgate_adaptive_limit", "tool" => tool.to_string());
        gauge.set(f64::from(config.initial));
        Self {
            state: Mutex::new(State {
                limit: f64::from(config.initial),
                long: None,
            }),
            config,
            gauge,
        }
    }

    pub(crate) fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// The current limit.
    pub(crate) fn limit(&self) -> u64 {
        self.state.lock().limit.floor() as u64
    }

    /// Learns from a completed call; returns the new limit if it changed.
    pub(crate) fn record(&self, outcome: Outcome, latency: Option<Duration>) -> Option<u64> {
        let c = &self.config;
        let failed = matches!(outcome, Outcome::Error | Outcome::Timeout);
        let mut s = self.state.lock();
        let before = s.limit.floor() as u64;
        let (lo, hi) = (f64::from(c.min), f64::from(c.max));
        s.limit = match c.algorithm {
            AdaptiveAlgorithm::Aimd => {
                let slow = latency.is_some_and(|l| l > c.target_latency);
                if failed || slow {
                    s.limit * c.backoff
                } else if latency.is_some() {
                    s.limit + f64::from(c.increase)
                } else {
                    s.limit
                }
            }
            AdaptiveAlgorithm::Gradient => match latency.map(|l| l.as_secs_f64().max(1e-6)) {
                _ if failed => s.limit * c.backoff,
                None => s.limit,
                Some(rtt) => {
                    // The baseline follows a faster service at once and a slower
                    // one over `long_window` samples: the latency without queueing.
                    let window = f64::from(c.long_window);
                    let long =
                        s.long
                            .map_or(rtt, |l| if rtt < l { rtt } else { l + (rtt - l) / window });
                    s.long = Some(long);
                    let gradient = (c.tolerance * long / rtt).clamp(0.5, 1.0);
                    // Probe upwards (by about the square root) only while latency is
                    // within tolerance; otherwise shrink in proportion to the excess.
                    let probe = if gradient >= 1.0 { s.limit.sqrt() } else { 0.0 };
                    let target = s.limit * gradient + probe;
                    s.limit * 0.8 + target * 0.2
                }
            },
        }
        .clamp(lo, hi);
        let after = s.limit.floor() as u64;
        drop(s);
        (after != before).then(|| {
            self.gauge.set(after as f64);
            after
        })
    }
}

/// Sets the limit of every cell of a concurrency quota (waiters that now fit are
/// admitted at once).
pub(crate) fn apply_limit(quota: &crate::quota::Quota, limit: u64) {
    match &quota.slot {
        crate::quota::Slot::Single(c) => c.lock().set_limit(limit),
        crate::quota::Slot::Partitioned(p) => p.for_each(|c| c.lock().set_limit(limit)),
    }
}

#[cfg(test)]
mod tests;
