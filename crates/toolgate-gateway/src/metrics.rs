//! The Prometheus recorder behind `GET /metrics`.
//!
//! The core registers its metric handles when an engine compiles a policy, so the
//! recorder is installed (once per process) before any engine is built.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use toolgate::Policy;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder on first use and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            match builder.install_recorder() {
                Ok(h) => h,
                // Another recorder is installed already: metrics go there, and this
                // handle renders an empty page.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
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
