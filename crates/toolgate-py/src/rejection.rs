//! `Rejection`: the value of a call that was not admitted.
//!
//! The exception raised by the decorator and context manager, `Rejection`,
//! is a Python class (`toolgate._errors`) built from this value: under the stable ABI
//! (abi3) a Rust class cannot extend a built-in exception type.

use pyo3::prelude::*;

use crate::clock::secs;

/// A tool call was not admitted; the tool did not run.
#[pyclass(module = "toolgate._toolgate", frozen, eq)]
#[derive(Debug, PartialEq)]
pub(crate) struct Rejection {
    #[pyo3(get)]
    tool: String,
    #[pyo3(get)]
    quota: String,
    #[pyo3(get)]
    reason: String,
    #[pyo3(get)]
    retry_after: Option<f64>,
}

/// `(tool, quota, reason, retry_after)`, the constructor's arguments.
type Fields = (String, String, String, Option<f64>);

// === impl Rejection ===

impl Rejection {
    pub(crate) fn from_rejection(r: &toolgate::Rejection) -> Self {
        Self {
            tool: r.tool().to_owned(),
            quota: r.quota().to_owned(),
            reason: r.reason().as_str().to_owned(),
            retry_after: r
                .retry_after()
                .map(|d| secs(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))),
        }
    }

    pub(crate) fn into_py(py: Python<'_>, r: &toolgate::Rejection) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, Self::from_rejection(r))?.into_any())
    }
}

#[pymethods]
impl Rejection {
    #[new]
    #[pyo3(signature = (tool, quota, reason, retry_after = None))]
    fn new(tool: String, quota: String, reason: String, retry_after: Option<f64>) -> Self {
        Self {
            tool,
            quota,
            reason,
            retry_after,
        }
    }

    /// The rejection as a plain dict: `tool`, `quota`, `reason`, `retry_after`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("tool", &self.tool)?;
        d.set_item("quota", &self.quota)?;
        d.set_item("reason", &self.reason)?;
        d.set_item("retry_after", self.retry_after)?;
        Ok(d)
    }

    /// The text a model receives instead of the tool's result: JSON with
    /// `"rejected_by": "toolgate"`, the tool, reason, quota, `retry_after` and a
    /// sentence for the model.
    fn to_json(&self) -> String {
        let hint = self.retry_after.map_or_else(String::new, |r| {
            format!(" Retry after {r:.3}s or continue without it.")
        });
        serde_json::json!({
            "rejected_by": "toolgate",
            "tool": self.tool,
            "reason": self.reason,
            "quota": self.quota,
            "retry_after": self.retry_after,
            "message": format!("The call to {} was not run ({}).{hint}", self.tool, self.reason),
        })
        .to_string()
    }

    fn __str__(&self) -> String {
        let by = if self.quota.is_empty() {
            String::new()
        } else {
            format!(" by {}", self.quota)
        };
        let retry = self
            .retry_after
            .map_or_else(String::new, |r| format!("; retry after {r:.3}s"));
        format!(
            "call to {:?} rejected: {}{by}{retry}",
            self.tool, self.reason
        )
    }

    fn __repr__(&self) -> String {
        let retry = self
            .retry_after
            .map_or_else(|| "None".to_owned(), |r| r.to_string());
        format!(
            "Rejection(tool={:?}, quota={:?}, reason={:?}, retry_after={retry})",
            self.tool, self.quota, self.reason
        )
    }

    /// Pickles as the constructor call.
    fn __reduce__(slf: &Bound<'_, Self>) -> (Py<PyAny>, Fields) {
        let me = slf.get();
        let fields = (
            me.tool.clone(),
            me.quota.clone(),
            me.reason.clone(),
            me.retry_after,
        );
        (slf.get_type().into_any().unbind(), fields)
    }
}
