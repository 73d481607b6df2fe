//! The native half of the Python package `toolgate` (module `toolgate._toolgate`).
//!
//! Every admission decision is made by the core engine in Rust. Python only drives
//! waiting: a waiting call is a Rust future polled from the caller's asyncio event
//! loop (see [`waiting`]), so no thread is ever parked for a waiter and the loop is
//! never blocked. The Python API proper (`ToolRateLimitPolicy`, the middleware and
//! the adapters) lives in `python/toolgate/`.

mod clock;
mod engine;
mod fast;
mod permit;
#[allow(unsafe_code)]
mod ready;
mod rejection;
mod store;
mod urgency;
mod waiting;

use pyo3::prelude::*;

/// The extension module `toolgate._toolgate`.
#[pymodule]
#[pyo3(name = "_toolgate")]
fn toolgate_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "MAX_WAIT_SECONDS",
        toolgate::config::MAX_WAIT_LIMIT.as_secs_f64(),
    )?;
    m.add(
        "MAX_DEADLINE_SECONDS",
        urgency::MAX_DEADLINE_AHEAD.as_secs_f64(),
    )?;
    m.add_class::<engine::Engine>()?;
    m.add_class::<permit::Permit>()?;
    m.add_class::<rejection::Rejection>()?;
    m.add_class::<waiting::Waiting>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<fast::FastPath>()?;
    m.add_function(wrap_pyfunction!(fast::call_options_used, m)?)?;
    ready::init(m.py())?;
    m.add_function(wrap_pyfunction!(ready::ready, m)?)?;
    m.add_function(wrap_pyfunction!(ready::ready_raise, m)?)?;
    // Wakers that fire while the interpreter exits must not call into it, and a
    // child process after fork() needs a notifier thread of its own.
    let py = m.py();
    let stop = wrap_pyfunction!(waiting::stop_notifier, m)?;
    py.import("atexit")?.call_method1("register", (stop,))?;
    let after = wrap_pyfunction!(waiting::after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("after_in_child", after)?;
    // POSIX only: without fork() there is nothing to do.
    if let Ok(register) = py.import("os")?.getattr("register_at_fork") {
        register.call((), Some(&kwargs))?;
    }
    Ok(())
}
