//! Executing a call against a tool's `[tools.X.upstream]`.
//!
//! [`execute`] is the single place where the gateway runs a tool, so the resilience
//! pipeline (circuit breaker, retries) can wrap or replace it without touching the
//! HTTP handlers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use toolgate::config::UpstreamConfig;
use toolgate::{Outcome, Policy};

/// The most bytes of a non-2xx answer read, for the error message.
pub const ERROR_BODY_BYTES: usize = 512;

/// A tool's upstream with its schemas compiled.
#[derive(Debug)]
pub struct Upstream {
    /// The config it was built from.
    pub config: UpstreamConfig,
    /// Whether the tool is `idempotent` (a failed call may then be run again).
    pub idempotent: bool,
    method: Method,
    arguments: Option<jsonschema::Validator>,
    result: Option<jsonschema::Validator>,
}

/// Why an execution did not produce a usable result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the upstream's timeout.
    Timeout(Duration),
    /// No connection, or a broken response.
    Transport(String),
    /// The upstream answered with a non-2xx status (and, for a 429 or 503, the
    /// `Retry-After` it sent, if it could be parsed).
    Status(u16, String, Option<Duration>),
    /// The answer is not JSON or fails the result schema.
    Invalid(String),
    /// The answer (with this status) is larger than the limit, in bytes. Not
    /// transient: never retried.
    TooLarge(u64, u16),
}

/// A usable upstream answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Success {
    /// The upstream's HTTP status.
    pub status: u16,
    /// Its JSON body (`null` when empty).
    pub result: Value,
}

// === impl Upstream ===

impl Upstream {
    /// Compiles the upstreams of every tool of `policy`; errors carry config paths.
    ///
    /// # Errors
    ///
    /// Every schema that is not a valid JSON Schema.
    pub fn compile_all(policy: &Policy) -> Result<HashMap<String, Arc<Upstream>>, Vec<String>> {
        let mut out = HashMap::new();
        let mut errors = Vec::new();
        for (name, tool) in &policy.tools {
            let Some(u) = &tool.upstream else { continue };
            let path = format!("tools.{name}.upstream");
            let mut schema = |key: &str, s: &Option<Value>| {
                s.as_ref().and_then(|s| {
                    jsonschema::validator_for(s)
                        .map_err(|e| errors.push(format!("{path}.{key}: invalid JSON Schema: {e}")))
                        .ok()
                })
            };
            let arguments = schema("arguments_schema", &u.arguments_schema);
            let result = schema("result_schema", &u.result_schema);
            let method = Method::from_bytes(u.method.as_bytes()).unwrap_or(Method::POST);
            out.insert(
                name.clone(),
                Arc::new(Upstream {
                    config: u.clone(),
                    idempotent: tool.idempotent,
                    method,
                    arguments,
                    result,
                }),
            );
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    /// Checks call arguments against the tool's argument schema.
    ///
    /// # Errors
    ///
    /// Every violation, with its JSON pointer.
    pub fn check_arguments(&self, args: &Value) -> Result<(), String> {
        check(self.arguments.as_ref(), args, "arguments")
    }

    fn check_result(&self, result: &Value) -> Result<(), String> {
        check(self.result.as_ref(), result, "result")
    }
}

fn check(v: Option<&jsonschema::Validator>, value: &Value, what: &str) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    let errors = toolgate_mcp::schema::violations(v, value);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the {what} do not match the tool's schema: {}",
            errors.join("; ")
        ))
    }
}

// === impl Failure ===

impl Failure {
    /// The outcome the permit is completed with.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Timeout(_) => Outcome::Timeout,
            Self::Transport(_) | Self::Status(..) | Self::TooLarge(..) => Outcome::Error,
            Self::Invalid(_) => Outcome::Invalid,
        }
    }

    /// The upstream's `Retry-After` on a 429 or 503: the tool is paused until then.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status(_, _, after) => *after,
            _ => None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "the upstream did not answer within {}ms", d.as_millis()),
            Self::Transport(e) => write!(f, "the upstream could not be reached: {e}"),
            Self::Status(s, body, _) => write!(f, "the upstream answered {s}: {body}"),
            Self::Invalid(e) => write!(f, "the upstream's result is invalid: {e}"),
            Self::TooLarge(n, _) => write!(
                f,
                "the upstream's answer is larger than the limit of {n} bytes \
                 (max_response_bytes); it was not read further"
            ),
        }
    }
}

/// Runs one call against the upstream: the arguments are the JSON body (for `GET`,
/// the query string), the idempotency key goes in `Idempotency-Key`, and the answer
/// must be JSON matching the result schema.
///
/// At most `max_bytes` of a 2xx answer are read ([`Failure::TooLarge`] beyond, told
/// by `Content-Length` up front or while streaming), and at most
/// [`ERROR_BODY_BYTES`] of any other (for the error message).
///
/// Also returns what the response's rate-limit headers said (`X-RateLimit-*`,
/// `RateLimit`, `RateLimit-Policy`), for server-signal shaping.
///
/// # Errors
///
/// A [`Failure`], whose [`Failure::outcome`] completes the permit.
pub async fn execute(
    client: &reqwest::Client,
    upstream: &Upstream,
    arguments: &Value,
    idempotency_key: Option<&str>,
    max_bytes: u64,
) -> (
    Result<Success, Failure>,
    Option<toolgate::shaping::ServerLimit>,
) {
    let mut limit = None;
    let req = request(client, upstream, arguments, idempotency_key);
    let result = send(req, upstream, max_bytes, &mut limit).await;
    (result, limit)
}

/// The upstream request of a call.
fn request(
    client: &reqwest::Client,
    upstream: &Upstream,
    arguments: &Value,
    idempotency_key: Option<&str>,
) -> reqwest::RequestBuilder {
    let u = &upstream.config;
    let mut req = client
        .request(upstream.method.clone(), &u.url)
        .timeout(u.timeout);
    for (k, v) in &u.headers {
        req = req.header(k, v);
    }
    if let Some(key) = idempotency_key {
        req = req.header("Idempotency-Key", key);
    }
    if upstream.method == Method::GET {
        req.query(&query_of(arguments))
    } else {
        req.json(arguments)
    }
}

async fn send(
    req: reqwest::RequestBuilder,
    upstream: &Upstream,
    max_bytes: u64,
    limit: &mut Option<toolgate::shaping::ServerLimit>,
) -> Result<Success, Failure> {
    let u = &upstream.config;
    let res = req.send().await.map_err(|e| transport(e, u.timeout))?;
    let status = res.status().as_u16();
    *limit = toolgate::shaping::server_limit(
        res.headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v))),
        std::time::SystemTime::now(),
    );
    let retry_after = matches!(status, 429 | 503)
        .then(|| res.headers().get(reqwest::header::RETRY_AFTER))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| toolgate::retry::retry_after(v, std::time::SystemTime::now()));
    if !(200..300).contains(&status) {
        let head = read_up_to(res, ERROR_BODY_BYTES as u64, u.timeout).await?;
        let head = &head.bytes[..head.bytes.len().min(ERROR_BODY_BYTES)];
        let body = String::from_utf8_lossy(head).into_owned();
        return Err(Failure::Status(status, body, retry_after));
    }
    // Told up front, the rest is not even read.
    if res.content_length().is_some_and(|n| n > max_bytes) {
        return Err(Failure::TooLarge(max_bytes, status));
    }
    let read = read_up_to(res, max_bytes, u.timeout).await?;
    if read.more {
        return Err(Failure::TooLarge(max_bytes, status));
    }
    let bytes = read.bytes;
    let result = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| Failure::Invalid(format!("the result is not JSON: {e}")))?
    };
    upstream.check_result(&result).map_err(Failure::Invalid)?;
    Ok(Success { status, result })
}

/// The start of an answer's body.
struct Head {
    bytes: Vec<u8>,
    /// Whether the body goes on past `max` bytes (the rest is not read).
    more: bool,
}

/// Reads at most `max` bytes of `res`'s body, chunk by chunk (dropping the response
/// then closes the connection without reading the rest).
async fn read_up_to(
    mut res: reqwest::Response,
    max: u64,
    timeout: Duration,
) -> Result<Head, Failure> {
    let mut bytes = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(|e| transport(e, timeout))? {
        if (bytes.len() + chunk.len()) as u64 > max {
            let room = usize::try_from(max).unwrap_or(usize::MAX) - bytes.len();
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Head { bytes, more: true });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Head { bytes, more: false })
}

fn transport(e: reqwest::Error, timeout: Duration) -> Failure {
    if e.is_timeout() {
        Failure::Timeout(timeout)
    } else {
        Failure::Transport(e.without_url().to_string())
    }
}

fn query_of(arguments: &Value) -> Vec<(String, String)> {
    arguments
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k.clone(), s.clone()),
                    other => (k.clone(), other.to_string()),
                })
                .collect()
        })
        .unwrap_or_default()
}
