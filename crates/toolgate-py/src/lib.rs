//! The native half of the Python package `toolgate` (module `toolgate._toolgate`).
//!
//! Every admission decision is made by the core engine in Rust. Python only drives
//! waiting: a waiting call is a Rust future polled from the caller's asyncio event
//! loop (see [`waiting`]), so no thread is ever parked for a waiter and the loop is
//! never blocked. The Python API proper (`ToolRateLimitPolicy`, the middleware and
//! the adapters) lives in `python/toolgate/`.

mod clock;
mod engine;
mod permit;
mod rejection;
mod store;
mod waiting;

use pyo3::prelude::*;

/// The extension module `toolgate._toolgate`.
#[pymodule]
#[pyo3(name = "_toolgate")]
fn toolgate_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<engine::Engine>()?;
    m.add_class::<permit::Permit>()?;
    m.add_class::<rejection::Rejection>()?;
    m.add_class::<waiting::Waiting>()?;
    m.add_class::<clock::PyManualClock>()?;
    // Wakers that fire while the interpreter exits must not call into it.
    let stop = wrap_pyfunction!(waiting::stop_notifier, m)?;
    m.py().import("atexit")?.call_method1("register", (stop,))?;
    Ok(())
}
