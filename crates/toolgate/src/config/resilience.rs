//! Settings of the resilience layers (`circuit`, `retry`, `adaptive`), of the
//! gateway's `upstream` and of the quota `store`: read and validated here so that a
//! config is checked in full before anything runs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::section::{expect_str, float_in, fraction, int_in, kind, one_of, Section};

/// `[tools.X.circuit]`: a circuit breaker per tool.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CircuitConfig {
    /// Which outcomes the failure rate is computed over.
    pub window: CircuitWindow,
    /// Failure rate (0–1] at or above which the circuit opens (default 0.5).
    pub failure_rate: f64,
    /// Outcomes needed in the window before it can open (default 10).
    pub min_calls: u32,
    /// A call slower than this counts as a failure.
    pub slow_call: Option<Duration>,
    /// How long an open circuit (or a degraded one with [`OnDegraded::Reject`])
    /// refuses calls before probes decide (default 30 s).
    pub open_for: Duration,
    /// The cap of the refusal period's growth over repeated trips (default
    /// `open_for`: no growth).
    pub open_for_max: Duration,
    /// Growth of the refusal period per trip (to open, or to degraded with
    /// [`OnDegraded::Reject`]) until the circuit closes again (default 2).
    pub open_for_multiplier: f64,
    /// Probe calls admitted while half-open (default 1).
    pub half_open_probes: u32,
    /// Valid probe outcomes needed to close from half-open (default 1).
    pub close_after: u32,
    /// Rate of `invalid` outcomes at or above which the tool is degraded.
    pub degraded_rate: Option<f64>,
    /// What a degraded tool does with new calls.
    pub on_degraded: OnDegraded,
}

/// The window of a circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitWindow {
    /// The last N outcomes.
    Count(u32),
    /// The outcomes of the last period.
    Time(Duration),
}

/// What a degraded tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDegraded {
    /// Keep admitting calls; state and metrics say degraded.
    #[default]
    Allow,
    /// Refuse calls as if open, for a refusal period (`open_for`, grown per trip);
    /// then half-open probes decide: an `invalid` one degrades the tool again,
    /// a failed one opens it, `close_after` valid ones close it.
    Reject,
}

/// `[tools.X.retry]`: Retry-After-aware, budgeted retries.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Attempts in all, the first included (default 3).
    pub max_attempts: u32,
    /// Smallest backoff (default 100 ms).
    pub base: Duration,
    /// Largest backoff (default 10 s).
    pub cap: Duration,
    /// The longest server `Retry-After` honoured (default 60 s).
    pub max_retry_after: Duration,
    /// Retries allowed as a fraction (0–1) of the successful calls of the last ten
    /// seconds (default 0.1).
    pub budget_ratio: f64,
    /// The floor under the ratio: a token bucket refilled at this many retries per
    /// second, holding one second's worth, for retries the ratio does not allow
    /// (default 1; 0 turns it off; at most 1,000,000).
    pub budget_min_per_second: u32,
    /// Bound on the whole call, every attempt included (default 30 s).
    pub deadline: Duration,
}

/// `[tools.X.adaptive]`: adaptive concurrency.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveConfig {
    /// AIMD or gradient.
    pub algorithm: AdaptiveAlgorithm,
    /// Lowest limit (default 1).
    pub min: u32,
    /// Highest limit (default 100).
    pub max: u32,
    /// Starting limit (default `min`… `max` clamp of 10).
    pub initial: u32,
    /// Latency at or below which the limit may grow (AIMD; default 1 s).
    pub target_latency: Duration,
    /// Multiplicative decrease on overload (AIMD; default 0.9).
    pub backoff: f64,
    /// Additive increase per good window (AIMD; default 1).
    pub increase: u32,
    /// Tolerated ratio of short- to long-term latency (gradient; default 1.5).
    pub tolerance: f64,
    /// Samples in the long-term latency average (gradient; default 600).
    pub long_window: u32,
}

/// The adaptive concurrency algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdaptiveAlgorithm {
    /// Additive increase, multiplicative decrease.
    Aimd,
    /// Long- versus short-term latency gradient.
    Gradient,
}

/// The largest `[tools.X.upstream] max_response_bytes`: 1 GiB.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// `[tools.X.upstream]`: where the gateway sends a call it executes itself.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// `http://` or `https://` URL.
    pub url: String,
    /// HTTP method (default POST).
    pub method: String,
    /// Per-attempt timeout (default 10 s).
    pub timeout: Duration,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// JSON Schema the call's arguments must satisfy.
    pub arguments_schema: Option<Value>,
    /// JSON Schema the upstream's result must satisfy.
    pub result_schema: Option<Value>,
    /// Largest answer body read, in bytes (1 to [`MAX_RESPONSE_BYTES`]); `None`: the
    /// gateway's `max_response_bytes`.
    pub max_response_bytes: Option<u64>,
}

/// `[store]`: where quota state lives.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// `memory` or `redis://…`.
    pub url: String,
    /// Prefix of every key (default `toolgate:`).
    pub key_prefix: String,
    /// Per-operation timeout (default 50 ms).
    pub timeout: Duration,
    /// What to do when the store fails.
    pub on_store_error: OnStoreError,
    /// Share of each quota a process may use on its own under `local` (default 0.1).
    pub local_share: f64,
    /// Capacity taken per round trip for local spending (0: off).
    pub local_grant: u64,
}

impl StoreConfig {
    /// A `[store]` section with `url` and every other key at its default, as
    /// `--store URL` gives when the config has no `[store]` section.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key_prefix: "toolgate:".into(),
            timeout: Duration::from_millis(50),
            on_store_error: OnStoreError::default(),
            local_share: 0.1,
            local_grant: 0,
        }
    }
}

/// Behaviour when the shared store cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreError {
    /// Reject calls.
    #[default]
    FailClosed,
    /// Admit calls.
    FailOpen,
    /// Fall back to an in-process limiter with `local_share` of the quota.
    Local,
}

fn duration(v: &Value) -> Result<Duration, String> {
    crate::vocab::parse_duration(expect_str(v)?)
}

fn positive_duration(v: &Value) -> Result<Duration, String> {
    let d = duration(v)?;
    if d.is_zero() {
        return Err(format!("{:?}: must be longer than zero", expect_str(v)?));
    }
    Ok(d)
}

fn count(v: &Value, min: u64, max: u64) -> Result<u32, String> {
    int_in(v, min, max).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

pub(super) fn circuit(s: &mut Section<'_, '_>) -> Option<CircuitConfig> {
    let window = s
        .get_with("window", |v| match v {
            Value::Number(_) => count(v, 1, 100_000).map(CircuitWindow::Count),
            Value::String(_) => positive_duration(v).map(CircuitWindow::Time),
            other => Err(format!(
                "expected a count of outcomes or a duration, got {}",
                kind(other)
            )),
        })
        .unwrap_or(CircuitWindow::Count(100));
    let open_for = s
        .get_with("open_for", positive_duration)
        .unwrap_or(Duration::from_secs(30));
    let c = CircuitConfig {
        window,
        failure_rate: s.get_with("failure_rate", fraction).unwrap_or(0.5),
        min_calls: s
            .get_with("min_calls", |v| count(v, 1, 100_000))
            .unwrap_or(10),
        slow_call: s.get_with("slow_call", positive_duration),
        open_for,
        open_for_max: s
            .get_with("open_for_max", positive_duration)
            .unwrap_or(open_for),
        open_for_multiplier: s
            .get_with("open_for_multiplier", |v| float_in(v, 1.0, 100.0))
            .unwrap_or(2.0),
        half_open_probes: s
            .get_with("half_open_probes", |v| count(v, 1, 10_000))
            .unwrap_or(1),
        close_after: s
            .get_with("close_after", |v| count(v, 1, 10_000))
            .unwrap_or(1),
        degraded_rate: s.get_with("degraded_rate", fraction),
        on_degraded: s
            .get_with("on_degraded", |v| {
                one_of(
                    v,
                    &[("allow", OnDegraded::Allow), ("reject", OnDegraded::Reject)],
                )
            })
            .unwrap_or_default(),
    };
    if c.open_for_max < c.open_for {
        s.error("open_for_max", "must not be shorter than open_for");
    }
    if c.close_after > c.half_open_probes {
        s.error("close_after", "must not be more than half_open_probes");
    }
    Some(c)
}

pub(super) fn retry(s: &mut Section<'_, '_>) -> Option<RetryConfig> {
    let r = RetryConfig {
        max_attempts: s
            .get_with("max_attempts", |v| count(v, 1, 100))
            .unwrap_or(3),
        base: s
            .get_with("base", positive_duration)
            .unwrap_or(Duration::from_millis(100)),
        cap: s
            .get_with("cap", positive_duration)
            .unwrap_or(Duration::from_secs(10)),
        max_retry_after: s
            .get_with("max_retry_after", duration)
            .unwrap_or(Duration::from_secs(60)),
        budget_ratio: s
            .get_with("budget_ratio", |v| float_in(v, 0.0, 1.0))
            .unwrap_or(0.1),
        budget_min_per_second: s
            .get_with("budget_min_per_second", |v| count(v, 0, 1_000_000))
            .unwrap_or(1),
        deadline: s
            .get_with("deadline", positive_duration)
            .unwrap_or(Duration::from_secs(30)),
    };
    if r.cap < r.base {
        s.error("cap", "must not be shorter than base");
    }
    Some(r)
}

pub(super) fn adaptive(s: &mut Section<'_, '_>) -> Option<AdaptiveConfig> {
    let algorithm = s
        .get_with("algorithm", |v| {
            one_of(
                v,
                &[
                    ("aimd", AdaptiveAlgorithm::Aimd),
                    ("gradient", AdaptiveAlgorithm::Gradient),
                ],
            )
        })
        .unwrap_or(AdaptiveAlgorithm::Aimd);
    let min = s.get_with("min", |v| count(v, 1, 1_000_000)).unwrap_or(1);
    let max = s.get_with("max", |v| count(v, 1, 1_000_000)).unwrap_or(100);
    let initial = s
        .get_with("initial", |v| count(v, 1, 1_000_000))
        .unwrap_or_else(|| 10.clamp(min, max.max(min)));
    let a = AdaptiveConfig {
        algorithm,
        min,
        max,
        initial,
        target_latency: s
            .get_with("target_latency", positive_duration)
            .unwrap_or(Duration::from_secs(1)),
        backoff: s
            .get_with("backoff", |v| float_in(v, 0.01, 0.99))
            .unwrap_or(0.9),
        increase: s.get_with("increase", |v| count(v, 1, 1_000)).unwrap_or(1),
        tolerance: s
            .get_with("tolerance", |v| float_in(v, 1.0, 100.0))
            .unwrap_or(1.5),
        long_window: s
            .get_with("long_window", |v| count(v, 2, 1_000_000))
            .unwrap_or(600),
    };
    if a.max < a.min {
        s.error("max", "must not be less than min");
    } else if !(a.min..=a.max).contains(&a.initial) {
        s.error(
            "initial",
            format!("{}: must be between min and max", a.initial),
        );
    }
    Some(a)
}

pub(super) fn upstream(s: &mut Section<'_, '_>) -> Option<UpstreamConfig> {
    let url = s.get_with("url", |v| {
        let u = expect_str(v)?;
        if u.starts_with("http://") || u.starts_with("https://") {
            Ok(u.to_string())
        } else {
            Err(format!("{u:?}: must be an http:// or https:// URL"))
        }
    });
    if url.is_none() && s.raw("url").is_none() {
        s.error("url", "missing: an upstream needs a url");
    }
    let method = s
        .get_with("method", |v| {
            one_of(
                v,
                &[
                    ("GET", "GET"),
                    ("POST", "POST"),
                    ("PUT", "PUT"),
                    ("PATCH", "PATCH"),
                    ("DELETE", "DELETE"),
                ],
            )
        })
        .unwrap_or("POST")
        .to_string();
    let timeout = s
        .get_with("timeout", positive_duration)
        .unwrap_or(Duration::from_secs(10));
    let headers = s
        .get_with("headers", |v| {
            let map = v
                .as_object()
                .ok_or_else(|| format!("expected a table of strings, got {}", kind(v)))?;
            map.iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.clone(), s.to_string()))
                        .ok_or_else(|| format!("{k:?}: expected a string, got {}", kind(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    let schema = |v: &Value| match v {
        Value::Object(_) | Value::Bool(_) => Ok(v.clone()),
        other => Err(format!("expected a JSON Schema table, got {}", kind(other))),
    };
    let arguments_schema = s.get_with("arguments_schema", schema);
    let result_schema = s.get_with("result_schema", schema);
    let max_response_bytes = s.get_with("max_response_bytes", |v| int_in(v, 1, MAX_RESPONSE_BYTES));
    Some(UpstreamConfig {
        url: url?,
        method,
        timeout,
        headers,
        arguments_schema,
        result_schema,
        max_response_bytes,
    })
}

pub(super) fn store(s: &mut Section<'_, '_>) -> Option<StoreConfig> {
    let url = s
        .get_with("url", |v| {
            let u = expect_str(v)?;
            if u == "memory" || u.starts_with("redis://") || u.starts_with("rediss://") {
                Ok(u.to_string())
            } else {
                Err(format!("{u:?}: expected \"memory\" or a redis:// URL"))
            }
        })
        .unwrap_or_else(|| "memory".into());
    Some(StoreConfig {
        url,
        key_prefix: s
            .get::<String>("key_prefix")
            .unwrap_or_else(|| "toolgate:".into()),
        timeout: s
            .get_with("timeout", positive_duration)
            .unwrap_or(Duration::from_millis(50)),
        on_store_error: s
            .get_with("on_store_error", |v| {
                one_of(
                    v,
                    &[
                        ("fail_closed", OnStoreError::FailClosed),
                        ("fail_open", OnStoreError::FailOpen),
                        ("local", OnStoreError::Local),
                    ],
                )
            })
            .unwrap_or_default(),
        local_share: s.get_with("local_share", fraction).unwrap_or(0.1),
        local_grant: s
            .get_with("local_grant", |v| int_in(v, 0, super::MAX_COUNT))
            .unwrap_or(0),
    })
}
