//! The messages of the mesh: a call, its result, and a dead letter.
//!
//! A call is strict JSON (unknown fields are refused: a misspelt `idempotency_key`
//! must not silently turn a once-only call into an at-least-once one), and every
//! field a publisher controls is bounded. The JSON Schemas in `docs/mesh/` describe
//! the same shapes; a test holds them against these types.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest call id, in bytes.
pub const MAX_CALL_ID: usize = 128;
/// The longest tool name, tenant id, idempotency key or reply subject, in bytes.
pub const MAX_NAME: usize = 256;
/// The largest token count a call may declare (the integers JSON and Lua keep exact).
pub const MAX_TOKENS: u64 = (1 << 53) - 1;

/// A tool call, as published on `toolgate.calls.<tool>`.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshCall {
    /// Chosen by the publisher; names the result subject.
    pub call_id: String,
    /// The tool to run.
    pub tool: String,
    /// The tenant whose quotas the call draws on.
    pub tenant: Option<String>,
    /// The tool's arguments (always a JSON object).
    pub arguments: Value,
    /// Calls with the same tool and key run the upstream once.
    pub idempotency_key: Option<String>,
    /// After this the call is not started.
    pub deadline: Option<SystemTime>,
    /// The declared token cost (an estimate).
    pub tokens: Option<u64>,
    /// A subject that also receives the result.
    pub reply_to: Option<String>,
}

/// Why a call could not be read, with what could be read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// What is wrong, naming the field.
    pub message: String,
    /// The call id, when it could be read (a result can then be published).
    pub call_id: Option<String>,
    /// The tool, when it could be read.
    pub tool: Option<String>,
    /// The reply subject, when it could be read.
    pub reply_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    call_id: String,
    tool: String,
    #[serde(default)]
    tenant: Option<String>,
    arguments: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    deadline: Option<Value>,
    #[serde(default)]
    cost: Option<Cost>,
    #[serde(default)]
    reply_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cost {
    #[serde(default)]
    tokens: Option<u64>,
}

/// A call's result, published on `toolgate.results.<call_id>` (and `reply_to`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshResult {
    /// The call it answers.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// `success`, or a failure word (`error`, `timeout`, `invalid`, `rejected`,
    /// `deadline_exceeded`, `invalid_arguments`).
    pub outcome: String,
    /// The upstream's answer, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The upstream's last HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What went wrong, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Every attempt at the upstream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// When the call was admitted (RFC 3339), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<String>,
    /// When the result was made (RFC 3339).
    pub finished_at: String,
}

/// `{"code", "message"}`, as the HTTP API's errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable word (`unknown_tool`, `upstream_error`, a rejection reason, …).
    pub code: String,
    /// For people.
    pub message: String,
}

/// One attempt at the upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first.
    pub attempt: u32,
    /// How it ended (`success`, `status`, `transport_error`, `timeout`, `invalid`).
    pub outcome: String,
    /// Its HTTP status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long it took.
    pub latency_ms: u64,
}

/// Why a call is a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadReason {
    /// The message is not a call.
    InvalidEnvelope,
    /// The arguments fail the tool's schema.
    InvalidArguments,
    /// No tool of that name can be run here.
    UnknownTool,
    /// Its deadline passed before it could start.
    DeadlineExceeded,
    /// It failed retryably on every allowed delivery.
    MaxDeliver,
    /// The upstream failed for good.
    UpstreamError,
}

/// A dead letter, published on `toolgate.dlq.<tool>` with a `Toolgate-Reason` header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Why (`invalid_envelope`, `invalid_arguments`, `unknown_tool`,
    /// `deadline_exceeded`, `max_deliver`, `upstream_error`).
    pub reason: String,
    /// The call id, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The original payload (as UTF-8, invalid bytes replaced).
    pub message: String,
    /// What went wrong.
    pub error: ErrorBody,
    /// Attempts at the upstream, if any ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// How many times the broker had delivered the call.
    pub delivered: u64,
    /// When it was dead-lettered (RFC 3339).
    pub at: String,
}

// === impl MeshCall ===

impl MeshCall {
    /// Reads a call from a message payload.
    ///
    /// # Errors
    ///
    /// [`Unreadable`], naming the first problem, with whatever could be read (the
    /// call id and reply subject make a result possible).
    pub fn parse(payload: &[u8]) -> Result<Self, Unreadable> {
        let wire: Wire = serde_json::from_slice(payload).map_err(|e| unreadable(payload, e))?;
        let fail = |message: String| Unreadable {
            message,
            call_id: bounded(&wire.call_id, MAX_CALL_ID).then(|| wire.call_id.clone()),
            tool: bounded(&wire.tool, MAX_NAME).then(|| wire.tool.clone()),
            reply_to: wire.reply_to.clone().filter(|r| is_subject(r)),
        };
        check_name("call_id", &wire.call_id, MAX_CALL_ID).map_err(fail)?;
        check_name("tool", &wire.tool, MAX_NAME).map_err(fail)?;
        for (field, v) in [
            ("tenant", &wire.tenant),
            ("idempotency_key", &wire.idempotency_key),
        ] {
            if let Some(v) = v {
                check_name(field, v, MAX_NAME).map_err(fail)?;
            }
        }
        if let Some(r) = &wire.reply_to {
            if !is_subject(r) {
                return Err(fail(format!(
                    "reply_to: {:?} is not a subject to publish to (tokens of printable \
                     characters separated by '.', no wildcards, at most {MAX_NAME} bytes)",
                    clip(r)
                )));
            }
        }
        if !wire.arguments.is_object() {
            return Err(fail(format!(
                "arguments: expected a JSON object, got {}",
                kind(&wire.arguments)
            )));
        }
        let arguments = wire.arguments;
        let tokens = wire.cost.and_then(|c| c.tokens);
        if tokens.is_some_and(|t| t > MAX_TOKENS) {
            return Err(fail(format!("cost.tokens: at most {MAX_TOKENS}")));
        }
        let deadline = wire
            .deadline
            .as_ref()
            .map(parse_deadline)
            .transpose()
            .map_err(fail)?;
        Ok(Self {
            call_id: wire.call_id,
            tool: wire.tool,
            tenant: wire.tenant,
            arguments,
            idempotency_key: wire.idempotency_key,
            deadline,
            tokens,
            reply_to: wire.reply_to,
        })
    }

    /// Time left until the deadline at `now` (`Some(ZERO)` once it has passed).
    pub fn time_left(&self, now: SystemTime) -> Option<Duration> {
        self.deadline
            .map(|d| d.duration_since(now).unwrap_or(Duration::ZERO))
    }
}

/// What can be said of a payload serde could not read as a call: its call id, tool
/// and reply subject when it is at least a JSON object holding them.
fn unreadable(payload: &[u8], e: serde_json::Error) -> Unreadable {
    let v: Option<serde_json::Map<String, Value>> = serde_json::from_slice(payload).ok();
    let field = |name: &str, max: usize| {
        v.as_ref()
            .and_then(|o| o.get(name))
            .and_then(Value::as_str)
            .filter(|s| bounded(s, max))
            .map(str::to_string)
    };
    Unreadable {
        message: format!("not a call: {e}"),
        call_id: field("call_id", MAX_CALL_ID),
        tool: field("tool", MAX_NAME),
        reply_to: field("reply_to", MAX_NAME).filter(|r| is_subject(r)),
    }
}

fn bounded(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max
}

fn check_name(field: &str, v: &str, max: usize) -> Result<(), String> {
    if v.is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    if v.len() > max {
        return Err(format!(
            "{field}: {} bytes; at most {max} are allowed",
            v.len()
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field}: must not contain control characters"));
    }
    Ok(())
}

/// A literal subject: non-empty tokens of printable, non-space characters other
/// than the wildcards, separated by single dots.
fn is_subject(s: &str) -> bool {
    bounded(s, MAX_NAME)
        && s.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| !c.is_whitespace() && !c.is_control() && c != '*' && c != '>')
        })
}

fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A `deadline` as the envelope carries it: an RFC 3339 time or Unix milliseconds (a
/// whole number, up to the year 9999). The gateway reads the `deadline` of its HTTP
/// requests with it too.
///
/// # Errors
///
/// A message naming the field and what is wrong.
pub fn parse_deadline(v: &Value) -> Result<SystemTime, String> {
    const MAX_MS: u64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    match v {
        Value::String(s) => humantime::parse_rfc3339_weak(s)
            .map_err(|e| format!("deadline: {:?} is not an RFC 3339 time ({e})", clip(s))),
        Value::Number(n) => n
            .as_u64()
            .filter(|ms| *ms <= MAX_MS)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
            .ok_or_else(|| format!("deadline: {n} is not Unix milliseconds up to {MAX_MS}")),
        other => Err(format!(
            "deadline: expected an RFC 3339 string or Unix milliseconds, got {}",
            kind(other)
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `t` as RFC 3339 with milliseconds, UTC.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

// === impl Unreadable ===

impl Unreadable {
    /// What a readable call says of itself, for its result and dead letter.
    pub fn of(call: &MeshCall) -> Self {
        Self {
            message: String::new(),
            call_id: Some(call.call_id.clone()),
            tool: Some(call.tool.clone()),
            reply_to: call.reply_to.clone(),
        }
    }
}

// === impl MeshResult ===

impl MeshResult {
    /// A result of `call_id` with `outcome`, finished now, and nothing else yet.
    pub fn new(call_id: String, tool: String, outcome: &str) -> Self {
        Self {
            call_id,
            tool,
            outcome: outcome.to_string(),
            result: None,
            status: None,
            error: None,
            attempts: Vec::new(),
            admitted_at: None,
            finished_at: rfc3339(SystemTime::now()),
        }
    }

    /// A failed result with its error.
    pub fn failed(call_id: String, tool: String, outcome: &str, error: ErrorBody) -> Self {
        Self {
            error: Some(error),
            ..Self::new(call_id, tool, outcome)
        }
    }
}

// === impl ErrorBody ===

impl ErrorBody {
    /// `{"code", "message"}`.
    pub fn new(code: &str, message: String) -> Self {
        Self {
            code: code.to_string(),
            message,
        }
    }
}

// === impl DeadReason ===

impl DeadReason {
    /// The stable word of the reason.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidEnvelope => "invalid_envelope",
            Self::InvalidArguments => "invalid_arguments",
            Self::UnknownTool => "unknown_tool",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::MaxDeliver => "max_deliver",
            Self::UpstreamError => "upstream_error",
        }
    }

    /// Every reason, for metrics.
    pub const ALL: [Self; 6] = [
        Self::InvalidEnvelope,
        Self::InvalidArguments,
        Self::UnknownTool,
        Self::DeadlineExceeded,
        Self::MaxDeliver,
        Self::UpstreamError,
    ];
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
