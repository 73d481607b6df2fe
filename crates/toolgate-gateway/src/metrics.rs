//! The Prometheus recorder behind `GET /metrics`.
//!
//! The core registers its metric handles when an engine compiles a policy, so the
//! recorder is installed (once per process) before any engine is built.
//!
//! A histogram keeps every value recorded until it is folded into its summary,
//! which a scrape does, and so does the recorder's upkeep: [`install`] runs it
//! every [`UPKEEP_EVERY`] on the runtime it is called on, so that a gateway nobody
//! scrapes keeps a bounded recorder (on the Redis store every admission records its
//! round trip's latency: without upkeep, 8 bytes per admission that were never
//! freed).

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use toolgate::Policy;

/// How often the recorder's upkeep folds what histograms recorded into their
/// summaries (as often as the exporter's own default).
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The upkeep task, while one runs.
static UPKEEP: Mutex<Option<tokio::task::JoinHandle<()>>> = Mutex::new(None);

/// Installs the global recorder on first use and returns its handle. Called on a
/// Tokio runtime, it also starts the recorder's upkeep there unless it runs
/// already (again if the runtime that ran it has stopped).
pub fn install() -> PrometheusHandle {
    let handle = HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            match builder.install_recorder() {
                Ok(h) => h,
                // Another recorder is installed already: metrics go there, and this
                // handle renders an empty page.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let mut upkeep = UPKEEP.lock().unwrap_or_else(PoisonError::into_inner);
        if upkeep
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *upkeep = Some(rt.spawn(run_upkeep(handle.clone())));
        }
    }
    handle
}

/// Folds the histograms' values into their summaries every [`UPKEEP_EVERY`].
async fn run_upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// Publishes `toolgate_circuit_state{tool}` (0 = closed) for every tool of `policy`
/// without a circuit breaker, so that the series exists for every tool; the engine
/// keeps the gauge of each tool with a breaker up to date itself.
pub fn publish_circuits(policy: &Policy) {
    for (name, tool) in &policy.tools {
        if tool.circuit.is_none() {
            metrics::gauge!("toolgate_circuit_state", "tool" => name.clone()).set(0.0);
        }
    }
}
