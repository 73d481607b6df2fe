//! `FastPath`: a policy's `decide`, `admit` and `try_admit` for the common call, made
//! in Rust without a Python frame.
//!
//! The common call names no `priority` or `deadline`, runs outside any `call_options`
//! block, and has nothing to report (no `on_decision` hook, and the `toolgate` logger
//! writes nothing at INFO, hence nothing at DEBUG either). Such a call is decided here
//! and answered as the Python method would answer it: a `Ready` awaitable (or the
//! policy's coroutine that waits, for a `Waiting`) from `decide`/`admit`, the value
//! from `try_admit`. Every other call goes to the Python method
//! (`ToolRateLimitPolicy.decide` and the others), which does the same and reports.
//!
//! The policy puts these methods in its instance dict, so that `policy.decide` is
//! this path; a subclass that overrides one keeps its own.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::PyTraverseError;

use crate::engine::Engine;
use crate::permit::Permit;
use crate::ready;
use crate::waiting::Waiting;

/// Whether a `call_options` block was ever entered in this process: until one is,
/// every context holds the default (no options) and the fast path does not read the
/// context variable.
static OPTIONS_SET: AtomicBool = AtomicBool::new(false);

/// Called by `call_options` before it sets its context variable.
#[pyfunction]
pub(crate) fn call_options_used() {
    OPTIONS_SET.store(true, Ordering::Relaxed);
}

/// The fast path of one policy.
#[pyclass(module = "toolgate._toolgate", frozen)]
pub(crate) struct FastPath {
    /// The policy (a reference cycle through its dict, which the GC can clear).
    policy: Py<PyAny>,
    engine: Py<Engine>,
    /// The policy's class, whose Python methods take every other call.
    class: Py<PyAny>,
    /// `current_options` (the context variable's `get`) and the value of no options.
    options: Py<PyAny>,
    no_options: Py<PyAny>,
    /// The `toolgate` logger, its cache of `isEnabledFor` by level, and `logging.INFO`.
    logger: Py<PyAny>,
    enabled: Py<PyDict>,
    info: Py<PyAny>,
    /// Whether the policy has an `on_decision` hook.
    hooked: AtomicBool,
}

/// A call's arguments as the engine takes them.
struct Plain<'a> {
    tool: &'a str,
    tenant: Option<&'a str>,
    tokens: u64,
}

/// `max_wait` as the engine takes it (`Ok(None)`: not given); an error when it is not
/// a number, which sends the call to the full path (and the error with it).
fn seconds(max_wait: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    max_wait.map(PyAnyMethods::extract::<f64>).transpose()
}

// === impl FastPath ===

impl FastPath {
    /// The call's arguments when it is a common one (see the module's doc).
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    fn plain<'a>(
        &self,
        py: Python<'_>,
        tool: &'a Bound<'_, PyAny>,
        tenant: Option<&'a Bound<'_, PyAny>>,
        tokens: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Plain<'a>>> {
        if priority.is_some() || deadline.is_some() || self.hooked.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Nothing logged at INFO: the logger's cache says so, or the logger is
        // disabled (`logging.config` disables existing loggers; it then never fills
        // its cache).
        let quiet = match self.enabled.bind(py).get_item(self.info.bind(py))? {
            Some(e) if e.is(&*pyo3::types::PyBool::new(py, false)) => true,
            _ => self
                .logger
                .bind(py)
                .getattr(intern!(py, "disabled"))?
                .is_truthy()?,
        };
        if !quiet {
            return Ok(None);
        }
        if OPTIONS_SET.load(Ordering::Relaxed)
            && !self.options.bind(py).call0()?.is(self.no_options.bind(py))
        {
            return Ok(None);
        }
        let Ok(tool) = tool.cast::<PyString>() else {
            return Ok(None);
        };
        let Ok(tool) = tool.to_str() else {
            return Ok(None);
        };
        let tenant = match tenant {
            None => None,
            Some(t) => match t.cast::<PyString>().map(|t| t.to_str()) {
                Ok(Ok(t)) => Some(t),
                _ => return Ok(None),
            },
        };
        let tokens = match tokens {
            None => 0,
            Some(t) => match t.extract::<u64>() {
                Ok(t) => t,
                Err(_) => return Ok(None),
            },
        };
        Ok(Some(Plain {
            tool,
            tenant,
            tokens,
        }))
    }

    /// The Python method `name` of the policy's class, for every other call.
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    fn full<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyString>,
        tool: &Bound<'py, PyAny>,
        tenant: Option<&Bound<'py, PyAny>>,
        tokens: Option<&Bound<'py, PyAny>>,
        max_wait: Option<&Bound<'py, PyAny>>,
        priority: Option<&Bound<'py, PyAny>>,
        deadline: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(py);
        for (key, value) in [
            (intern!(py, "tenant"), tenant),
            (intern!(py, "tokens"), tokens),
            (intern!(py, "max_wait"), max_wait),
            (intern!(py, "priority"), priority),
            (intern!(py, "deadline"), deadline),
        ] {
            if let Some(v) = value {
                kwargs.set_item(key, v)?;
            }
        }
        self.class
            .bind(py)
            .getattr(name)?
            .call((self.policy.bind(py), tool), Some(&kwargs))
    }

    /// The policy's coroutine that waits for `waiting` and reports it (and raises
    /// for a rejection when `admit`).
    fn waiting<'py>(
        &self,
        py: Python<'py>,
        waiting: &Bound<'py, PyAny>,
        plain: &Plain<'_>,
        admit: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.class.bind(py).call_method1(
            intern!(py, "_waiting"),
            (
                self.policy.bind(py),
                waiting,
                plain.tool,
                plain.tenant,
                py.None(),
                admit,
            ),
        )
    }

    /// `decide` (`raises` false: a rejection is the answer) or `admit` (`raises`:
    /// a rejection is raised by the policy's `_rejected`) of the call `(tool,
    /// tenant, tokens, max_wait)`: from here when it is a plain call whose wait
    /// bound reads as seconds, else by the Python method of that name.
    fn admit_or_decide<'py>(
        &self,
        py: Python<'py>,
        raises: bool,
        (tool, tenant, tokens, max_wait): Call<'_, 'py>,
        priority: Option<&Bound<'py, PyAny>>,
        deadline: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(wait) = seconds(max_wait) {
            if let Some(plain) = self.plain(py, tool, tenant, tokens, priority, deadline)? {
                let engine = self.engine.get();
                let answer =
                    engine.admit_call(py, plain.tool, plain.tenant, plain.tokens, wait, None, None);
                return match answer {
                    Ok(r) => {
                        let r = r.into_bound(py);
                        if r.is_instance_of::<Waiting>() {
                            self.waiting(py, &r, &plain, raises)
                        } else if raises && !r.is_instance_of::<Permit>() {
                            self.class
                                .bind(py)
                                .call_method1(intern!(py, "_rejected"), (r,))
                        } else {
                            ready::new(r, false)
                        }
                    }
                    Err(e) => ready::new(e.into_value(py).into_bound(py).into_any(), true),
                };
            }
        }
        let name = if raises {
            intern!(py, "admit")
        } else {
            intern!(py, "decide")
        };
        self.full(py, name, tool, tenant, tokens, max_wait, priority, deadline)
    }
}

/// A call's tool, tenant, tokens and wait bound, as Python passed them.
type Call<'a, 'py> = (
    &'a Bound<'py, PyAny>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
);

#[pymethods]
impl FastPath {
    #[new]
    #[allow(clippy::too_many_arguments)] // what the policy hands over, once
    fn new(
        policy: Py<PyAny>,
        engine: Py<Engine>,
        class: Py<PyAny>,
        options: Py<PyAny>,
        no_options: Py<PyAny>,
        logger: Py<PyAny>,
        enabled: Py<PyDict>,
        info: Py<PyAny>,
        hooked: bool,
    ) -> Self {
        Self {
            policy,
            engine,
            class,
            options,
            no_options,
            logger,
            enabled,
            info,
            hooked: AtomicBool::new(hooked),
        }
    }

    /// Tells whether the policy now has an `on_decision` hook.
    fn set_hooked(&self, hooked: bool) {
        self.hooked.store(hooked, Ordering::Relaxed);
    }

    /// `ToolRateLimitPolicy.decide`.
    #[pyo3(signature = (tool, *, tenant = None, tokens = None, max_wait = None, priority = None, deadline = None))]
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    fn decide<'py>(
        &self,
        py: Python<'py>,
        tool: Bound<'py, PyAny>,
        tenant: Option<Bound<'py, PyAny>>,
        tokens: Option<Bound<'py, PyAny>>,
        max_wait: Option<Bound<'py, PyAny>>,
        priority: Option<Bound<'py, PyAny>>,
        deadline: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = (&tool, tenant.as_ref(), tokens.as_ref(), max_wait.as_ref());
        self.admit_or_decide(py, false, call, priority.as_ref(), deadline.as_ref())
    }

    /// `ToolRateLimitPolicy.admit`.
    #[pyo3(signature = (tool, *, tenant = None, tokens = None, max_wait = None, priority = None, deadline = None))]
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    fn admit<'py>(
        &self,
        py: Python<'py>,
        tool: Bound<'py, PyAny>,
        tenant: Option<Bound<'py, PyAny>>,
        tokens: Option<Bound<'py, PyAny>>,
        max_wait: Option<Bound<'py, PyAny>>,
        priority: Option<Bound<'py, PyAny>>,
        deadline: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = (&tool, tenant.as_ref(), tokens.as_ref(), max_wait.as_ref());
        self.admit_or_decide(py, true, call, priority.as_ref(), deadline.as_ref())
    }

    /// `ToolRateLimitPolicy.try_admit`.
    #[pyo3(signature = (tool, *, tenant = None, tokens = None, priority = None, deadline = None))]
    fn try_admit<'py>(
        &self,
        py: Python<'py>,
        tool: Bound<'py, PyAny>,
        tenant: Option<Bound<'py, PyAny>>,
        tokens: Option<Bound<'py, PyAny>>,
        priority: Option<Bound<'py, PyAny>>,
        deadline: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let plain = self.plain(
            py,
            &tool,
            tenant.as_ref(),
            tokens.as_ref(),
            priority.as_ref(),
            deadline.as_ref(),
        )?;
        if let Some(plain) = plain {
            let engine = self.engine.get();
            return Ok(engine
                .try_admit_call(py, plain.tool, plain.tenant, plain.tokens, None, None)?
                .into_bound(py));
        }
        self.full(
            py,
            intern!(py, "try_admit"),
            &tool,
            tenant.as_ref(),
            tokens.as_ref(),
            None,
            priority.as_ref(),
            deadline.as_ref(),
        )
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.policy)?;
        visit.call(&self.class)?;
        visit.call(&self.options)?;
        visit.call(&self.no_options)?;
        visit.call(&self.logger)?;
        visit.call(&self.enabled)?;
        visit.call(&self.info)
    }
}
