//! `Waiting`: a call in wait mode, driven from the caller's asyncio event loop.
//!
//! # How waiting works
//!
//! The core's `Engine::admit` future is boxed and polled by `Waiting.poll`, which
//! the Python driver (`toolgate._permits.wait`) calls from its coroutine. When the
//! future is pending, `poll` returns the delay until the clock deadline it sleeps
//! for (if any); the driver arms an asyncio timer for it and also hands `poll` a
//! `notify` callback, which the core's waker calls when a waiter ahead of this one
//! leaves or a concurrency slot frees up. So waiting is an ordinary asyncio await:
//! no thread is parked per waiter, the event loop is never blocked, and each waiter
//! lives on whichever loop awaits it.
//!
//! Wakers may fire while the core holds its internal locks, so they never take the
//! GIL themselves: they hand the callback to one notifier thread, which calls it
//! (it is `loop.call_soon_threadsafe(...)`).
//!
//! # Cancel safety
//!
//! `close()` drops the core future at once, under the caller's control: a waiter
//! cancelled before its admission time leaves the accounting exactly as if it had
//! never come (the core's guarantee), and the waiters behind it move up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use arc_swap::ArcSwapOption;
use pyo3::prelude::*;
use toolgate::{Clock, Nanos};

use crate::clock::{clear_deadline, secs, take_deadline};
use crate::permit::Permit;
use crate::rejection::Rejection;

/// The core's admission future, owning its call.
pub(crate) type AdmitFuture =
    Pin<Box<dyn Future<Output = Result<toolgate::Permit, toolgate::Rejection>> + Send>>;

/// A call waiting for admission.
#[pyclass(module = "toolgate._toolgate", frozen)]
pub(crate) struct Waiting {
    fut: Mutex<Option<AdmitFuture>>,
    clock: Arc<dyn Clock>,
}

/// What one poll found.
pub(crate) enum Step {
    Ready(Result<toolgate::Permit, toolgate::Rejection>),
    Pending(Option<Nanos>),
}

/// A waker that asks the notifier thread to call a Python callback once.
struct Notify {
    callback: Py<PyAny>,
    fired: AtomicBool,
}

// === impl Waiting ===

impl Waiting {
    pub(crate) fn new(fut: AdmitFuture, clock: Arc<dyn Clock>) -> Self {
        Self {
            fut: Mutex::new(Some(fut)),
            clock,
        }
    }

    /// Polls `fut` once; `None` when it was already finished or closed.
    pub(crate) fn step(fut: &mut AdmitFuture, waker: &Waker, clock: &dyn Clock) -> Step {
        clear_deadline();
        match fut.as_mut().poll(&mut Context::from_waker(waker)) {
            Poll::Ready(r) => Step::Ready(r),
            Poll::Pending => Step::Pending(take_deadline().map(|d| d.saturating_sub(clock.now()))),
        }
    }

    /// Converts a finished admission to `Permit | Rejection`.
    pub(crate) fn outcome(
        py: Python<'_>,
        r: Result<toolgate::Permit, toolgate::Rejection>,
        clock: &Arc<dyn Clock>,
    ) -> PyResult<Py<PyAny>> {
        match r {
            Ok(p) => Ok(Py::new(py, Permit::new(p, clock.clone()))?.into_any()),
            Err(r) => Rejection::into_py(py, r),
        }
    }
}

#[pymethods]
impl Waiting {
    /// Polls the admission once. Returns the `Permit` or `Rejection` when
    /// decided; otherwise `None` or the delay in seconds after which to poll again,
    /// and `notify()` will be called (from another thread) if it must be polled
    /// earlier.
    fn poll(&self, py: Python<'_>, notify: Py<PyAny>) -> PyResult<Py<PyAny>> {
        let waker = Waker::from(Arc::new(Notify {
            callback: notify,
            fired: AtomicBool::new(false),
        }));
        let step = py.detach(|| {
            let mut guard = self.fut.lock().unwrap_or_else(PoisonError::into_inner);
            let fut = guard.as_mut()?;
            let step = Self::step(fut, &waker, &*self.clock);
            if matches!(step, Step::Ready(_)) {
                *guard = None;
            }
            Some(step)
        });
        match step {
            None => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this waiting call was already decided or closed",
            )),
            Some(Step::Ready(r)) => Self::outcome(py, r, &self.clock),
            Some(Step::Pending(delay)) => Ok(delay.map_or_else(
                || py.None(),
                |d| {
                    secs(d)
                        .into_pyobject(py)
                        .map_or_else(|_| py.None(), |f| f.into_any().unbind())
                },
            )),
        }
    }

    /// Gives up waiting: the call leaves the queue as if it had never come.
    fn close(&self, py: Python<'_>) {
        let fut = self
            .fut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        py.detach(|| drop(fut));
    }
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting").finish_non_exhaustive()
    }
}

// === impl Notify ===

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            // A failed send means the notifier thread is gone, and then so is the
            // loop that waited.
            let _ = Notifier::current().tx.send(self.clone());
        }
    }
}

// === impl Notifier ===

/// The one thread that calls Python on behalf of wakers, and its gate.
///
/// Started on first use; a child process after `fork()` has none of its parent's
/// threads, so the child drops the parent's (see [`after_fork_in_child`]) and starts
/// its own on its first wake. Held in an `ArcSwapOption` so that a wake never takes a
/// lock that a fork could leave locked in the child.
#[derive(Debug)]
struct Notifier {
    tx: Sender<Arc<Notify>>,
    /// Whether the thread may still call Python: cleared by [`stop_notifier`] when
    /// the interpreter starts to exit. The thread holds the lock while it calls Python.
    open: Arc<Mutex<bool>>,
}

static NOTIFIER: ArcSwapOption<Notifier> = ArcSwapOption::const_empty();

/// Set by [`stop_notifier`]: a notifier started after exit began (by a wake during
/// teardown) must not call Python either.
static EXITING: AtomicBool = AtomicBool::new(false);

impl Notifier {
    /// This process's notifier, started if it has none yet.
    fn current() -> Arc<Self> {
        if let Some(n) = NOTIFIER.load_full() {
            return n;
        }
        let fresh = Arc::new(Self::start());
        let before = NOTIFIER.compare_and_swap(&None::<Arc<Self>>, Some(fresh.clone()));
        // Another thread started one first: use that (this one's thread ends when
        // `fresh` is dropped, with its channel).
        before.as_ref().map_or(fresh, Arc::clone)
    }

    fn start() -> Self {
        let (tx, rx) = channel::<Arc<Notify>>();
        let open = Arc::new(Mutex::new(true));
        let gate = open.clone();
        let spawned = std::thread::Builder::new()
            .name("toolgate-notify".into())
            .spawn(move || {
                for n in rx {
                    // Attaching to an interpreter that is finalizing ends this thread
                    // inside CPython and aborts the process, so a wake that comes
                    // after exit began (a store reply, a permit freed during
                    // teardown) is dropped: no loop is left to run its callback.
                    let open = gate.lock().unwrap_or_else(PoisonError::into_inner);
                    if !*open || EXITING.load(Ordering::SeqCst) {
                        continue;
                    }
                    Python::attach(|py| {
                        // The loop may be closed by now; then nobody waits any more.
                        if let Err(e) = n.callback.call0(py) {
                            if !e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py) {
                                e.print(py);
                            }
                        }
                    });
                    drop(open);
                }
            });
        if let Err(e) = spawned {
            eprintln!("toolgate: cannot start the notifier thread: {e}");
        }
        Self { tx, open }
    }
}

/// Stops the notifier from calling Python; registered with `atexit`, which runs
/// before the interpreter starts finalizing. It waits, without the GIL, for a
/// callback in progress to finish.
#[pyfunction]
pub(crate) fn stop_notifier(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    if let Some(n) = NOTIFIER.load_full() {
        py.detach(|| *n.open.lock().unwrap_or_else(PoisonError::into_inner) = false);
    }
}

/// Forgets the parent's notifier in a child process after `fork()` (registered with
/// `os.register_at_fork`): its thread does not exist here, and its gate may have been
/// copied locked. It is leaked rather than dropped, since the fork may have copied
/// its channel in the middle of an operation too. The child's first wake starts its
/// own.
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    std::mem::forget(NOTIFIER.swap(None));
}
