//! `Permit`: proof that a call was admitted; releases its quotas when completed,
//! released or garbage-collected.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use toolgate::{Clock, Completion, Outcome};

use crate::clock::{duration, secs};

/// An admitted call. Complete it when the call ends.
#[pyclass(module = "toolgate._toolgate", frozen)]
#[derive(Debug)]
pub(crate) struct Permit {
    inner: Mutex<Option<toolgate::Permit>>,
    clock: Arc<dyn Clock>,
    #[pyo3(get)]
    waited: f64,
}

// === impl Permit ===

impl Permit {
    pub(crate) fn new(permit: toolgate::Permit, clock: Arc<dyn Clock>) -> Self {
        let waited = secs(u64::try_from(permit.waited().as_nanos()).unwrap_or(u64::MAX));
        Self {
            inner: Mutex::new(Some(permit)),
            clock,
            waited,
        }
    }

    fn take(&self) -> Option<toolgate::Permit> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[pymethods]
impl Permit {
    /// Ends the call: releases concurrency, reconciles the token estimate with the
    /// actual count and records the outcome; `retry_after` (seconds, the upstream's
    /// `Retry-After`) pauses the tool. A second call does nothing.
    #[pyo3(signature = (outcome = "success", *, tokens = None, latency = None, retry_after = None))]
    fn complete(
        &self,
        py: Python<'_>,
        outcome: &str,
        tokens: Option<u64>,
        latency: Option<f64>,
        retry_after: Option<f64>,
    ) -> PyResult<()> {
        let outcome: Outcome = outcome
            .parse()
            .map_err(|e: String| PyValueError::new_err(format!("outcome: {e}")))?;
        let latency = latency.map(|l| duration("latency", l)).transpose()?;
        let retry_after = retry_after
            .map(|r| duration("retry_after", r))
            .transpose()?;
        let Some(permit) = self.take() else {
            return Ok(());
        };
        let latency = latency.unwrap_or_else(|| {
            Duration::from_nanos(self.clock.now().saturating_sub(permit.admitted_at()))
        });
        let mut completion = Completion::new(outcome).latency(latency);
        if let Some(t) = tokens {
            completion = completion.tokens(t);
        }
        if let Some(r) = retry_after {
            completion = completion.retry_after(r);
        }
        if tokens.is_some() || retry_after.is_some() {
            // Reconciling a token estimate or pausing the tool may re-plan the
            // waiters' reservations (and wake them).
            py.detach(|| permit.complete(completion));
        } else {
            permit.complete(completion);
        }
        Ok(())
    }

    /// Releases the permit without an outcome (like a cancelled call).
    fn release(&self, py: Python<'_>) {
        let permit = self.take();
        py.detach(|| drop(permit));
    }

    /// The tool's name, or `None` for a tool without a policy.
    #[getter]
    fn tool(&self) -> Option<String> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|p| p.tool().map(str::to_owned))
    }

    /// Whether the permit was completed or released.
    #[getter]
    fn done(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Python's own spelling: `Permit(tool='a', waited=0.0, done=False)`.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let tool = self.tool().into_pyobject(py)?.repr()?;
        let waited = self.waited.into_pyobject(py)?.repr()?;
        let done = if self.done() { "True" } else { "False" };
        Ok(format!("Permit(tool={tool}, waited={waited}, done={done})"))
    }
}
