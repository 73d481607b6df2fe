//! Clocks for the Python engine.
//!
//! [`LoopClock`] is the production clock. Its sleeps never register a timer of their
//! own: a pending sleep only records its deadline, and the asyncio driver of the
//! waiting call (`Waiting.poll`) turns that deadline into an asyncio timer on the
//! caller's event loop. So waiting needs no tokio runtime and no helper thread per
//! waiter, and works on any number of event loops in any number of threads.
//!
//! [`PyManualClock`] (`toolgate.testing.ManualClock`) moves only when told to, for
//! deterministic tests.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use toolgate::{Clock, ManualClock, Nanos, Sleep};

thread_local! {
    /// The earliest deadline a [`LoopSleep`] polled on this thread is waiting for.
    static NEXT_DEADLINE: Cell<Option<Nanos>> = const { Cell::new(None) };
}

/// The monotonic clock of the process, whose sleeps are driven by asyncio timers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoopClock {
    origin: Instant,
}

/// A sleep of [`LoopClock`]: ready once the deadline passed, otherwise it records
/// the deadline for the driver and stays pending.
struct LoopSleep {
    clock: LoopClock,
    deadline: Nanos,
}

/// A clock that moves only when told to (`toolgate.testing.ManualClock`).
#[pyclass(name = "ManualClock", module = "toolgate._toolgate", frozen)]
#[derive(Debug, Clone, Default)]
pub(crate) struct PyManualClock {
    pub(crate) inner: ManualClock,
}

/// The clock an engine runs on.
pub(crate) fn clock_of(manual: Option<&PyManualClock>) -> Arc<dyn Clock> {
    match manual {
        Some(m) => Arc::new(m.inner.clone()),
        None => Arc::new(LoopClock::new()),
    }
}

/// Forgets any recorded deadline; call before polling a waiting call.
pub(crate) fn clear_deadline() {
    NEXT_DEADLINE.with(|c| c.set(None));
}

/// The earliest deadline recorded since [`clear_deadline`].
pub(crate) fn take_deadline() -> Option<Nanos> {
    NEXT_DEADLINE.with(Cell::take)
}

/// Whole seconds as a float, the unit of every duration in the Python API.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn secs(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// A duration from seconds given by a user, checked.
pub(crate) fn duration(field: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
            "{field}: {seconds}: must be a finite number of seconds, at least 0"
        ))
    })
}

// === impl LoopClock ===

impl LoopClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "this is the binding's clock: its origin"
    )]
    fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Clock for LoopClock {
    fn now(&self) -> Nanos {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sleep_until(&self, deadline: Nanos) -> Sleep {
        Box::pin(LoopSleep {
            clock: *self,
            deadline,
        })
    }
}

impl Future for LoopSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now() >= self.deadline {
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        NEXT_DEADLINE.with(|c| c.set(Some(c.get().map_or(deadline, |d| d.min(deadline)))));
        Poll::Pending
    }
}

// === impl PyManualClock ===

#[pymethods]
impl PyManualClock {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Seconds since the clock's origin.
    fn now(&self) -> f64 {
        secs(self.inner.now())
    }

    /// Moves time forward and wakes every waiter that became due.
    fn advance(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let by = duration("seconds", seconds)?;
        py.detach(|| self.inner.advance(by));
        Ok(())
    }

    /// The number of timers still waiting for their deadline.
    #[getter]
    fn sleepers(&self) -> usize {
        self.inner.sleepers()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", secs(self.inner.now()))
    }
}
