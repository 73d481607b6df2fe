//! `Engine`: the core engine behind `ToolRateLimitPolicy`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

use arc_swap::ArcSwap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use toolgate::config::{Config, OnLimit, ToolConfig, UnknownTools};
use toolgate::{Call, Clock, Policy};

use crate::clock::{clock_of, duration, secs, PyManualClock};
use crate::permit::Permit;
use crate::rejection::Rejection;
use crate::urgency;
use crate::waiting::{AdmitFuture, Step, Waiting};

/// An admission engine with a fixed policy.
#[pyclass(module = "toolgate._toolgate", frozen)]
#[derive(Debug)]
#[allow(clippy::struct_field_names)] // `engine.engine`: the core engine inside the Python one
pub(crate) struct Engine {
    engine: toolgate::Engine,
    clock: Arc<dyn Clock>,
    /// The tools of the policy in force (replaced when a tool is declared).
    tools: ArcSwap<Tools>,
    /// Whether any tool of the policy in force waits when limited: when none does,
    /// an admission skips looking its tool up among them.
    any_waits: AtomicBool,
    /// Serialises [`Engine::declare`]: each one reads the policy in force and puts a
    /// new one in force.
    declaring: Mutex<()>,
    deny_unknown: bool,
    /// The quotas live in a shared store (Redis): every admission is a round trip.
    shared: bool,
    /// The process that connected to the store: a child after `fork()` has neither
    /// the connection's thread nor a socket of its own.
    pid: u32,
}

/// The names of a policy's tools, and which of them wait when limited.
#[derive(Debug)]
struct Tools {
    all: BTreeSet<String>,
    waiting: BTreeSet<String>,
}

// === impl Tools ===

impl Tools {
    fn of(config: &Config) -> Self {
        Self {
            all: config.tools.keys().cloned().collect(),
            waiting: config
                .tools
                .iter()
                .filter(|(_, t)| t.on_limit == OnLimit::Wait)
                .map(|(n, _)| n.clone())
                .collect(),
        }
    }
}

// === impl Engine ===

impl Engine {
    fn build(
        py: Python<'_>,
        config: Result<Config, toolgate::config::ConfigErrors>,
        clock: Option<&PyManualClock>,
    ) -> PyResult<Self> {
        let config = config.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let store = config.store.clone().filter(|s| s.url != "memory");
        let tools = ArcSwap::from_pointee(Tools::of(&config));
        let deny_unknown = config.unknown_tools == UnknownTools::Deny;
        let policy = Policy::new(config).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let manual = clock.is_some();
        let clock = clock_of(clock);
        let shared = store.is_some();
        let engine = match store {
            None => toolgate::Engine::with_clock(policy, clock.clone()),
            Some(store) => crate::store::connect(py, policy, store, clock.clone(), manual)?,
        };
        Ok(Self {
            engine,
            clock,
            any_waits: AtomicBool::new(!tools.load().waiting.is_empty()),
            tools,
            declaring: Mutex::new(()),
            deny_unknown,
            shared,
            pid: std::process::id(),
        })
    }

    /// Refuses to use a store connection made in another process (the parent of a
    /// `fork()`), which would hang or share its socket.
    fn check_process(&self) -> PyResult<()> {
        if self.shared && self.pid != std::process::id() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "toolgate: this policy's store connection was made in another process \
                 (before fork()); create the policy in this process",
            ));
        }
        Ok(())
    }

    /// The policy in force plus `tool`, put in force (see `declare`).
    fn put_in_force(&self, tool: &str, declared: ToolConfig) -> Result<(), String> {
        let _serial = self
            .declaring
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut config = self.engine.policy().config().clone();
        if config.tools.contains_key(tool) {
            return Err(format!(
                "{tool:?}: this policy already has a limit for the tool"
            ));
        }
        config.tools.insert(tool.to_owned(), declared);
        let tools = Tools::of(&config);
        let policy = Policy::new(config).map_err(|e| e.to_string())?;
        self.engine
            .try_apply(policy)
            .map_err(|e| format!("store: {e}"))?;
        let any_waits = !tools.waiting.is_empty();
        self.tools.store(Arc::new(tools));
        self.any_waits.store(any_waits, Ordering::Release);
        Ok(())
    }

    /// Admits `call` now or rejects it now: a `Permit` or a `Rejection`.
    fn decide_now(&self, py: Python<'_>, call: &Call<'_>) -> PyResult<Py<PyAny>> {
        let decided = if self.shared {
            // A round trip to the store, bounded by its timeout, without the GIL.
            let engine = &self.engine;
            py.detach(|| crate::store::block_on(engine.admit_now(call)))?
        } else {
            self.engine.try_admit(call)
        };
        match decided {
            Ok(p) => self.permit(py, p),
            Err(r) => Rejection::into_py(py, r),
        }
    }

    /// `try_admit`: a `Permit` or a `Rejection`.
    pub(crate) fn try_admit_call(
        &self,
        py: Python<'_>,
        tool: &str,
        tenant: Option<&str>,
        tokens: u64,
        priority: Option<&str>,
        deadline: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.check_process()?;
        let call = Call::new(tool)
            .with_tenant(tenant)
            .tokens(tokens)
            .priority(urgency::priority(priority)?)
            .with_deadline(urgency::deadline(deadline, &*self.clock)?);
        self.decide_now(py, &call)
    }

    /// `admit`: a `Permit`, a `Rejection` or a `Waiting`.
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    pub(crate) fn admit_call(
        &self,
        py: Python<'_>,
        tool: &str,
        tenant: Option<&str>,
        tokens: u64,
        max_wait: Option<f64>,
        priority: Option<&str>,
        deadline: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.check_process()?;
        let max_wait = max_wait.map(|m| duration("max_wait", m)).transpose()?;
        let priority = urgency::priority(priority)?;
        let deadline = urgency::deadline(deadline, &*self.clock)?;
        let waits = max_wait.is_some()
            || (self.any_waits.load(Ordering::Acquire) && self.tools.load().waiting.contains(tool));
        if !waits && !self.shared {
            let call = Call::new(tool)
                .with_tenant(tenant)
                .tokens(tokens)
                .priority(priority)
                .with_deadline(deadline);
            return self.decide_now(py, &call);
        }
        let engine = self.engine.clone();
        let (tool, tenant) = (tool.to_owned(), tenant.map(str::to_owned));
        let mut fut: AdmitFuture = Box::pin(async move {
            let mut call = Call::new(&tool)
                .with_tenant(tenant.as_deref())
                .tokens(tokens)
                .priority(priority)
                .with_deadline(deadline);
            if let Some(m) = max_wait {
                call = call.max_wait(m);
            }
            if waits {
                engine.admit(&call).await
            } else {
                engine.admit_now(&call).await
            }
        });
        let clock = &*self.clock;
        match py.detach(|| Waiting::step(&mut fut, Waker::noop(), clock)) {
            Step::Ready(r) => Waiting::outcome(py, r, &self.clock),
            Step::Pending(_) => Ok(Py::new(py, Waiting::new(fut, self.clock.clone()))?.into_any()),
        }
    }

    fn permit(&self, py: Python<'_>, p: toolgate::Permit) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, Permit::new(p, self.clock.clone()))?.into_any())
    }
}

#[pymethods]
impl Engine {
    /// An engine from a TOML policy (contract §3).
    #[staticmethod]
    #[pyo3(signature = (text, *, clock = None))]
    fn from_toml(
        py: Python<'_>,
        text: &str,
        clock: Option<PyRef<'_, PyManualClock>>,
    ) -> PyResult<Self> {
        let config = py.detach(|| Config::from_toml_str(text));
        Self::build(py, config, clock.as_deref())
    }

    /// An engine from a JSON policy (the same structure as TOML).
    #[staticmethod]
    #[pyo3(signature = (text, *, clock = None))]
    fn from_json(
        py: Python<'_>,
        text: &str,
        clock: Option<PyRef<'_, PyManualClock>>,
    ) -> PyResult<Self> {
        let config = py.detach(|| Config::from_json_str(text));
        Self::build(py, config, clock.as_deref())
    }

    /// Admits the call now or rejects it now; never waits.
    /// Returns a `Permit` or an `Rejection` (not raised). `priority` names the
    /// call's class; `deadline` is the seconds left until it must have finished.
    /// (Positional-or-keyword rather than keyword-only: pyo3 reads keyword-only
    /// parameters on every call, which cost the common call, that passes none, a
    /// fifth of its time.)
    #[pyo3(signature = (tool, tenant = None, tokens = 0, priority = None, deadline = None))]
    fn try_admit(
        &self,
        py: Python<'_>,
        tool: &str,
        tenant: Option<&str>,
        tokens: u64,
        priority: Option<&str>,
        deadline: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.try_admit_call(py, tool, tenant, tokens, priority, deadline)
    }

    /// Admits the call, honouring `on_limit = "wait"` (or a given `max_wait`).
    /// Returns a `Permit`, an `Rejection` (not raised), or a `Waiting`
    /// to drive from an event loop.
    #[pyo3(signature = (tool, tenant = None, tokens = 0, max_wait = None, priority = None, deadline = None))]
    #[allow(clippy::too_many_arguments)] // the call's fields, as Python passes them
    fn admit(
        &self,
        py: Python<'_>,
        tool: &str,
        tenant: Option<&str>,
        tokens: u64,
        max_wait: Option<f64>,
        priority: Option<&str>,
        deadline: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.admit_call(py, tool, tenant, tokens, max_wait, priority, deadline)
    }

    /// The tools that have a policy, sorted.
    fn tools(&self) -> Vec<String> {
        self.tools.load().all.iter().cloned().collect()
    }

    /// Puts `tool` with `table` (a tool table of the config format, as JSON) into the
    /// policy in force. The other tools keep their state and waiters (the core's
    /// `Engine::try_apply`); on a shared store the store takes the new policy too.
    fn declare(&self, py: Python<'_>, tool: &str, table: &str) -> PyResult<()> {
        let table: serde_json::Value = serde_json::from_str(table)
            .map_err(|e| PyValueError::new_err(format!("tools.{tool}: {e}")))?;
        let mut one = Config::from_value(&serde_json::json!({ "tools": { tool: table } }))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let declared = one.tools.remove(tool).ok_or_else(|| {
            PyValueError::new_err(format!("tools.{tool}: the table declares no tool"))
        })?;
        // Without the GIL: a second declare waiting for the lock must not hold it.
        py.detach(|| self.put_in_force(tool, declared))
            .map_err(PyValueError::new_err)
    }

    /// Whether calls to tools without a policy are rejected (`unknown_tools = "deny"`).
    #[getter]
    fn deny_unknown(&self) -> bool {
        self.deny_unknown
    }

    /// Seconds on the engine's clock.
    fn now(&self) -> f64 {
        secs(self.clock.now())
    }

    /// The live state of `tool` (of `tenant`'s partitions, when given) as a dict, or
    /// `None` for a tool without a policy. On a shared store, what each quota has
    /// left is read from the store (a round trip bounded by its timeout, without the
    /// GIL; `None` figures when it does not answer).
    #[pyo3(signature = (tool, tenant = None))]
    fn tool_state<'py>(
        &self,
        py: Python<'py>,
        tool: &str,
        tenant: Option<&str>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let state = if self.shared {
            let engine = &self.engine;
            py.detach(|| crate::store::block_on(engine.fetch_tool_state(tool, tenant)))?
        } else {
            self.engine.tool_state(tool, tenant)
        };
        let Some(s) = state else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("tool", &s.tool)?;
        d.set_item(
            "on_limit",
            if s.on_limit == OnLimit::Wait {
                "wait"
            } else {
                "reject"
            },
        )?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("waiting", s.waiting)?;
        d.set_item("admitted", s.admitted)?;
        d.set_item("rejected", s.rejected)?;
        let quotas = PyList::empty(py);
        for q in &s.quotas {
            let qd = PyDict::new(py);
            qd.set_item("quota", &q.quota)?;
            qd.set_item("kind", q.kind)?;
            qd.set_item("capacity", q.capacity)?;
            qd.set_item("available", q.available)?;
            qd.set_item("waiters", q.waiters)?;
            quotas.append(qd)?;
        }
        d.set_item("quotas", quotas)?;
        Ok(Some(d))
    }
}
