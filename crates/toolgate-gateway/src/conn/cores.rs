//! The connections' runtimes on the Redis store: one single-threaded Tokio runtime
//! per core, each on a thread of its own, each serving the connections the accept
//! loop hands it, the one with the fewest open connections first. (In memory
//! `toolgate serve` serves them on its worker pool: docs/benchmarks.md, gateway,
//! round twenty-four.)
//!
//! A connection's request runs where its connection does, start to end: what it
//! waits for (a store's answer, an upstream's) wakes it on that thread, and no
//! worker wakes another (docs/benchmarks.md, gateway, round twenty). What the
//! gateway keeps beside its connections (the state, the lease reaper, reloads, the
//! mesh, MCP's upstreams) stays on the main runtime and is shared by every core.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The most runtimes [`Cores::per_cpu`] starts, whatever `TOKIO_WORKER_THREADS` says.
pub const MAX_CORES: usize = 1024;

/// How long a stopping core waits for its blocking tasks.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The runtimes, one per core, alive until dropped.
#[derive(Debug)]
pub struct Cores {
    cores: Vec<Core>,
}

#[derive(Debug)]
struct Core {
    handle: Handle,
    open: Arc<AtomicUsize>,
    /// Dropped with the core: its thread's runtime then stops.
    _stop: oneshot::Sender<()>,
}

/// A connection's place on its core: counted until dropped.
#[derive(Debug)]
pub(crate) struct Seat(Arc<AtomicUsize>);

// === impl Cores ===

impl Cores {
    /// Starts `n` runtimes (at least one), named `toolgate-core-<i>`.
    ///
    /// # Errors
    ///
    /// When a thread or a runtime cannot be started.
    pub fn start(n: usize) -> io::Result<Self> {
        let mut cores = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            cores.push(Core::start(i)?);
        }
        Ok(Self { cores })
    }

    /// As many runtimes as Tokio would start workers: `TOKIO_WORKER_THREADS`, else
    /// the CPUs this process may use; at most [`MAX_CORES`].
    ///
    /// # Errors
    ///
    /// As [`Cores::start`].
    pub fn per_cpu() -> io::Result<Self> {
        let n = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        Self::start(n.min(MAX_CORES))
    }

    /// The connections open on each runtime, in order.
    pub fn open(&self) -> Vec<usize> {
        self.cores
            .iter()
            .map(|c| c.open.load(Ordering::Relaxed))
            .collect()
    }

    /// The runtimes' handles.
    pub fn handles(&self) -> Vec<Handle> {
        self.cores.iter().map(|c| c.handle.clone()).collect()
    }

    /// The runtime with the fewest open connections, and the new connection's seat
    /// on it.
    pub(crate) fn pick(&self) -> (&Handle, Seat) {
        let core = self
            .cores
            .iter()
            .min_by_key(|c| c.open.load(Ordering::Relaxed))
            .unwrap_or_else(|| unreachable!("at least one core"));
        core.open.fetch_add(1, Ordering::Relaxed);
        (&core.handle, Seat(core.open.clone()))
    }
}

impl Core {
    fn start(i: usize) -> io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("toolgate-core-{i}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stopped.await;
                });
                // Its connections are done by now (the accept loop's shutdown); a
                // blocking task left behind does not hold the thread.
                rt.shutdown_timeout(SHUTDOWN_WAIT);
            })?;
        let handle = ready_rx
            .recv()
            .map_err(|_| io::Error::other("a core's thread ended before its runtime started"))??;
        Ok(Self {
            handle,
            open: Arc::new(AtomicUsize::new(0)),
            _stop: stop,
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_goes_to_the_core_with_the_fewest_open_ones() {
        let cores = Cores::start(3).expect("three runtimes");
        let a = cores.pick().1;
        let b = cores.pick().1;
        let c = cores.pick().1;
        assert_eq!(cores.open(), [1, 1, 1]);
        drop(b);
        assert_eq!(cores.open(), [1, 0, 1]);
        let d = cores.pick().1;
        let e = cores.pick().1;
        assert_eq!(cores.open(), [2, 1, 1]);
        drop((a, c, d, e));
        assert_eq!(cores.open(), [0, 0, 0]);
    }

    #[test]
    fn each_core_runs_its_tasks_on_its_own_thread_until_dropped() {
        let cores = Cores::start(2).expect("two runtimes");
        let names: Vec<String> = cores
            .handles()
            .iter()
            .map(|h| {
                let (tx, rx) = std::sync::mpsc::channel();
                h.spawn(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    let _ = tx.send(name.unwrap_or_default());
                });
                rx.recv().expect("the task ran")
            })
            .collect();
        assert_eq!(names, ["toolgate-core-0", "toolgate-core-1"]);
        // A task that never ends, holding a sender: the runtime drops it (and the
        // sender) when it stops.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        drop(cores.handles()[1].spawn(async move {
            let _held = tx;
            std::future::pending::<()>().await;
        }));
        drop(cores);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(10)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn zero_cores_means_one() {
        assert_eq!(Cores::start(0).expect("a runtime").open(), [0]);
    }
}
