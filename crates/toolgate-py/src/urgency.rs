//! What a Python caller says of its call's urgency: its `priority` class and its
//! `deadline`, read the way the gateway reads the HTTP fields of the same names.
//!
//! The Python package turns a `deadline` (an aware `datetime`, or seconds from now)
//! into the seconds left when the call is made; here those seconds become a time on
//! the engine's clock ([`toolgate::Call::deadline`]), so a deadline means the same on
//! the loop's clock and on a `ManualClock`.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use toolgate::{Clock, Nanos, Priority};

/// How far ahead a deadline may lie: one day, as on the gateway (a longer one bounds
/// nothing a caller's own timeout does not, and is more likely a unit mistake).
pub(crate) const MAX_DEADLINE_AHEAD: Duration = Duration::from_hours(24);

/// The priority class named `name` (`None`: `default`).
pub(crate) fn priority(name: Option<&str>) -> PyResult<Priority> {
    let Some(name) = name else {
        return Ok(Priority::Default);
    };
    name.parse().map_err(|e| {
        let shown: String = name.chars().take(32).collect();
        PyValueError::new_err(format!("priority: {shown:?}: {e}"))
    })
}

/// The deadline `left` seconds from now on `clock` (`None`: none). No time left is a
/// time already past, which refuses the call at once (`max_wait_exceeded`).
pub(crate) fn deadline(left: Option<f64>, clock: &dyn Clock) -> PyResult<Option<Nanos>> {
    let Some(left) = left else {
        return Ok(None);
    };
    let bad = |why: &str| PyValueError::new_err(format!("deadline: {left} s from now: {why}"));
    let left = Duration::try_from_secs_f64(left)
        .map_err(|_| bad("must be a finite number of seconds, at least 0"))?;
    if left > MAX_DEADLINE_AHEAD {
        return Err(bad(&format!(
            "at most {} s ahead is accepted",
            MAX_DEADLINE_AHEAD.as_secs()
        )));
    }
    let now = clock.now();
    if left.is_zero() {
        return Ok(Some(now.saturating_sub(1)));
    }
    let left = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
    Ok(Some(now.saturating_add(left)))
}
