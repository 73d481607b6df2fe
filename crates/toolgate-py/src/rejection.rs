//! `Rejection`: the value of a call that was not admitted.
//!
//! The exception raised by the decorator and context manager, `AdmissionRejected`,
//! is a Python class (`toolgate._errors`) built from this value: under the stable ABI
//! (abi3) a Rust class cannot extend a built-in exception type.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::clock::{duration, secs};

/// A tool call was not admitted; the tool did not run. Wraps the core's value
/// (cheap to make: its strings are shared, not copied).
#[pyclass(module = "toolgate._toolgate", frozen, eq)]
#[derive(Debug, PartialEq)]
pub(crate) struct Rejection {
    inner: toolgate::Rejection,
}

/// What `to_json` writes, its fields in sorted order.
#[derive(serde::Serialize)]
struct Json<'a> {
    message: String,
    quota: &'a str,
    reason: &'static str,
    rejected_by: &'static str,
    retry_after: Option<f64>,
    tool: &'a str,
}

/// `(tool, quota, reason, retry_after)`, the constructor's arguments.
type Fields = (String, String, &'static str, Option<f64>);

// === impl Rejection ===

impl Rejection {
    pub(crate) fn into_py(py: Python<'_>, r: toolgate::Rejection) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, Self { inner: r })?.into_any())
    }
}

#[pymethods]
impl Rejection {
    #[new]
    #[pyo3(signature = (tool, quota, reason, retry_after = None))]
    fn new(tool: &str, quota: &str, reason: &str, retry_after: Option<f64>) -> PyResult<Self> {
        let reason = reason
            .parse()
            .map_err(|e: String| PyValueError::new_err(format!("reason: {e}")))?;
        let retry_after = retry_after
            .map(|r| duration("retry_after", r))
            .transpose()?;
        Ok(Self {
            inner: toolgate::Rejection::new(tool, quota, reason, retry_after),
        })
    }

    #[getter]
    fn tool(&self) -> &str {
        self.inner.tool()
    }

    #[getter]
    fn quota(&self) -> &str {
        self.inner.quota()
    }

    #[getter]
    fn reason(&self) -> &'static str {
        self.inner.reason().as_str()
    }

    /// Whether a shared store could not decide (it did not answer and the policy
    /// fails closed): not a limit of the tool. The core's one test of it.
    #[getter]
    fn store_unavailable(&self) -> bool {
        self.inner.is_store_unavailable()
    }

    #[getter]
    fn retry_after(&self) -> Option<f64> {
        self.inner
            .retry_after()
            .map(|d| secs(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// The rejection as a plain dict: `tool`, `quota`, `reason`, `retry_after`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("tool", self.tool())?;
        d.set_item("quota", self.quota())?;
        d.set_item("reason", self.reason())?;
        d.set_item("retry_after", self.retry_after())?;
        Ok(d)
    }

    /// The text a model receives instead of the tool's result: JSON with
    /// `"rejected_by": "toolgate"`, the tool, reason, quota, `retry_after` and a
    /// sentence for the model.
    fn to_json(&self) -> String {
        let retry_after = self.retry_after();
        let hint = retry_after.map_or_else(String::new, |r| {
            format!(" Retry after {r:.3}s or continue without it.")
        });
        let message = format!(
            "The call to {} was not run ({}).{hint}",
            self.tool(),
            self.reason()
        );
        // A struct whose fields are in the sorted order a `serde_json::Value` map
        // gives (byte for byte the same text): a map of owned keys and values cost
        // the rejected call through the middleware about a microsecond.
        serde_json::to_string(&Json {
            message,
            quota: self.quota(),
            reason: self.reason(),
            rejected_by: "toolgate",
            retry_after,
            tool: self.tool(),
        })
        .unwrap_or_default()
    }

    fn __str__(&self) -> String {
        let by = if self.quota().is_empty() {
            String::new()
        } else {
            format!(" by {}", self.quota())
        };
        let retry = self
            .retry_after()
            .map_or_else(String::new, |r| format!("; retry after {r:.3}s"));
        format!(
            "call to {:?} rejected: {}{by}{retry}",
            self.tool(),
            self.reason()
        )
    }

    fn __repr__(&self) -> String {
        let retry = self
            .retry_after()
            .map_or_else(|| "None".to_owned(), |r| r.to_string());
        format!(
            "Rejection(tool={:?}, quota={:?}, reason={:?}, retry_after={retry})",
            self.tool(),
            self.quota(),
            self.reason()
        )
    }

    /// Pickles as the constructor call.
    fn __reduce__(slf: &Bound<'_, Self>) -> (Py<PyAny>, Fields) {
        let me = slf.get();
        let fields = (
            me.tool().to_owned(),
            me.quota().to_owned(),
            me.reason(),
            me.retry_after(),
        );
        (slf.get_type().into_any().unbind(), fields)
    }
}
