//! Shared quotas on Redis for the Python package.
//!
//! Redis I/O needs Tokio's reactor, and Python code runs on asyncio. The package
//! therefore keeps one small Tokio runtime (one worker thread, started on first
//! use) that carries every store round trip: an admission polled from an asyncio
//! loop is handed to it by the Redis store and wakes the loop when it is decided
//! (see `toolgate_redis::RedisStore`), so the event loop is never blocked.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use toolgate::config::StoreConfig;
use toolgate::{Clock, Policy};

static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("toolgate-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| {
            PyRuntimeError::new_err(format!("toolgate: cannot start the store runtime: {e}"))
        })
}

/// Runs `fut` to completion on the store runtime, from a thread outside it.
pub(crate) fn block_on<F: Future>(fut: F) -> PyResult<F::Output> {
    Ok(runtime()?.block_on(fut))
}

/// An engine on the Redis store of `store`. Its own clock is `clock` (local waits
/// are driven from asyncio); Redis keeps time itself, unless `manual` asks the
/// store to follow the test's manual clock too.
pub(crate) fn connect(
    py: Python<'_>,
    policy: Policy,
    store: StoreConfig,
    clock: Arc<dyn Clock>,
    manual: bool,
) -> PyResult<toolgate::Engine> {
    let rt = runtime()?;
    py.detach(|| {
        rt.block_on(async move {
            let b = toolgate_redis::Builder::new(policy, store);
            if manual {
                b.clock(clock).engine().await
            } else {
                b.engine_with_clock(clock).await
            }
        })
    })
    .map_err(|e| PyValueError::new_err(format!("store: {e}")))
}
