//! The `[mesh]` table: where the broker is and how its streams are kept.
//!
//! ```toml
//! [mesh]
//! url = "nats://127.0.0.1:4222"     # `toolgate serve --mesh URL` wins
//! calls_stream = "TOOLGATE_CALLS"   # toolgate.calls.>   (work queue, file storage)
//! results_stream = "TOOLGATE_RESULTS"
//! dlq_stream = "TOOLGATE_DLQ"
//! replicas = 1                      # stream replicas, for a NATS cluster (1 to 5)
//! ack_wait = "30s"                  # a call not acknowledged by then is delivered again
//! max_deliver = 5                   # deliveries before a retryable call is a dead letter
//! result_max_age = "24h"            # how long results are kept
//! dlq_max_age = "7d"                # how long dead letters are kept
//! duplicate_window = "2m"           # Nats-Msg-Id de-duplication of calls and results
//! idempotency_bucket = "toolgate_idempotency"
//! idempotency_ttl = "24h"           # how long a stored result answers a repeated key
//! batch = 64                        # the most calls pulled at once per tool
//! max_in_flight = 256               # calls in flight per tool without `concurrency`
//! connect_timeout = "5s"
//! credentials = "/etc/toolgate/nats.creds"   # or token = "…", or user/password
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// How the gateway authenticates to NATS.
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Credentials {
    /// No credentials (or those in the URL).
    #[default]
    None,
    /// A `.creds` file (JWT and NKey seed).
    File(PathBuf),
    /// A bearer token.
    Token(String),
    /// User and password.
    UserPassword(String, String),
}

/// The mesh's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MeshConfig {
    /// The NATS server (`nats://host:port`; a comma-separated list for a cluster).
    pub url: Option<String>,
    /// The stream of calls, on `toolgate.calls.>`.
    pub calls_stream: String,
    /// The stream of results, on `toolgate.results.>`.
    pub results_stream: String,
    /// The stream of dead letters, on `toolgate.dlq.>`.
    pub dlq_stream: String,
    /// Replicas of each stream and of the idempotency bucket.
    pub replicas: usize,
    /// How long a delivered call may stay unacknowledged (in-progress acks extend it).
    pub ack_wait: Duration,
    /// Deliveries of a call before a retryable failure makes it a dead letter.
    pub max_deliver: u32,
    /// How long results are kept.
    pub result_max_age: Duration,
    /// How long dead letters are kept.
    pub dlq_max_age: Duration,
    /// The `Nats-Msg-Id` de-duplication window of the calls and results streams.
    pub duplicate_window: Duration,
    /// The key-value bucket of idempotency records.
    pub idempotency_bucket: String,
    /// How long a stored result answers a call with the same key.
    pub idempotency_ttl: Duration,
    /// The most calls pulled at once for one tool.
    pub batch: usize,
    /// The most calls of one tool in flight when the tool sets no `concurrency`.
    pub max_in_flight: usize,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// How to authenticate.
    pub credentials: Credentials,
}

/// The keys `[mesh]` accepts.
const KEYS: &str = "ack_wait, batch, calls_stream, connect_timeout, credentials, dlq_max_age, \
    dlq_stream, duplicate_window, idempotency_bucket, idempotency_ttl, max_deliver, \
    max_in_flight, password, replicas, result_max_age, results_stream, token, url, user";

// === impl Credentials ===

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a secret in a log or an error.
        match self {
            Self::None => f.write_str("None"),
            Self::File(p) => f.debug_tuple("File").field(p).finish(),
            Self::Token(_) => f.write_str("Token(***)"),
            Self::UserPassword(u, _) => write!(f, "UserPassword({u:?}, ***)"),
        }
    }
}

// === impl MeshConfig ===

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            url: None,
            calls_stream: "TOOLGATE_CALLS".into(),
            results_stream: "TOOLGATE_RESULTS".into(),
            dlq_stream: "TOOLGATE_DLQ".into(),
            replicas: 1,
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            result_max_age: Duration::from_secs(24 * 3600),
            dlq_max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(120),
            idempotency_bucket: "toolgate_idempotency".into(),
            idempotency_ttl: Duration::from_secs(24 * 3600),
            batch: 64,
            max_in_flight: 256,
            connect_timeout: Duration::from_secs(5),
            credentials: Credentials::None,
        }
    }
}

impl MeshConfig {
    /// The settings for `url` with every default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::default()
        }
    }

    /// Parses the `[mesh]` table; every problem is pushed to `errors` with its path.
    pub fn parse(v: &Value, errors: &mut Vec<String>) -> Self {
        let mut c = Self::default();
        let Some(table) = v.as_object() else {
            errors.push(format!("mesh: expected a table, got {v}"));
            return c;
        };
        let (mut user, mut password) = (None, None);
        for (key, v) in table {
            let r = match key.as_str() {
                "url" => text(v).and_then(|s| url(s).map(|u| c.url = Some(u))),
                "calls_stream" => text(v).and_then(name).map(|s| c.calls_stream = s),
                "results_stream" => text(v).and_then(name).map(|s| c.results_stream = s),
                "dlq_stream" => text(v).and_then(name).map(|s| c.dlq_stream = s),
                "idempotency_bucket" => text(v).and_then(name).map(|s| c.idempotency_bucket = s),
                "replicas" => count(v, 1, 5).map(|n| c.replicas = n),
                "max_deliver" => count(v, 1, 100).map(|n| c.max_deliver = n as u32),
                "batch" => count(v, 1, 1024).map(|n| c.batch = n),
                "max_in_flight" => count(v, 1, 100_000).map(|n| c.max_in_flight = n),
                "ack_wait" => within(v, 1, 3600).map(|d| c.ack_wait = d),
                "connect_timeout" => within(v, 1, 600).map(|d| c.connect_timeout = d),
                "duplicate_window" => within(v, 1, 7 * 86_400).map(|d| c.duplicate_window = d),
                "result_max_age" => within(v, 1, 365 * 86_400).map(|d| c.result_max_age = d),
                "dlq_max_age" => within(v, 1, 365 * 86_400).map(|d| c.dlq_max_age = d),
                "idempotency_ttl" => within(v, 1, 365 * 86_400).map(|d| c.idempotency_ttl = d),
                "credentials" => text(v).map(|p| c.credentials = Credentials::File(p.into())),
                "token" => text(v).map(|t| c.credentials = Credentials::Token(t.into())),
                "user" => text(v).map(|u| user = Some(u.to_string())),
                "password" => text(v).map(|p| password = Some(p.to_string())),
                _ => Err(format!("unknown key (expected one of: {KEYS})")),
            };
            if let Err(e) = r {
                errors.push(format!("mesh.{key}: {e}"));
            }
        }
        match (user, password) {
            (Some(u), Some(p)) => c.credentials = Credentials::UserPassword(u, p),
            (None, None) => {}
            _ => errors.push("mesh.user: user and password go together".into()),
        }
        let ways = ["credentials", "token", "user"]
            .iter()
            .filter(|k| table.contains_key(**k))
            .count();
        if ways > 1 {
            errors.push("mesh: give one of credentials, token or user/password".into());
        }
        if c.duplicate_window > c.result_max_age {
            errors.push(
                "mesh.duplicate_window: must not be longer than result_max_age (JetStream \
                 refuses a duplicate window longer than the stream's max age)"
                    .into(),
            );
        }
        c
    }
}

fn text(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, got {v}"))
}

/// A NATS URL (or a comma-separated list of them); the message never shows a secret.
pub fn url(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.split(',').all(|u| {
            let u = u.trim();
            ["nats://", "tls://", "ws://", "wss://"]
                .iter()
                .any(|p| u.starts_with(p) && u.len() > p.len())
        });
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{:?}: not a NATS URL such as \"nats://127.0.0.1:4222\"",
            redact(s)
        ))
    }
}

/// A URL with any `user:password@` replaced by `***@`.
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://***@{}", &u[..s], &u[at + 1..]),
            _ => u.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A stream or bucket name: JetStream allows no `.`, `*`, `>`, white space or path
/// separators; we allow `[A-Za-z0-9_-]`, 1 to 64 characters.
fn name(s: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then(|| s.to_string())
        .ok_or_else(|| format!("{s:?}: a name of 1 to 64 characters from A-Z, a-z, 0-9, _ and -"))
}

fn count(v: &Value, min: u64, max: u64) -> Result<usize, String> {
    v.as_u64()
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{v}: expected a whole number from {min} to {max}"))
}

fn within(v: &Value, min_s: u64, max_s: u64) -> Result<Duration, String> {
    let s = text(v)?;
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?}: not a duration such as \"30s\" ({e})"))?;
    let (min, max) = (Duration::from_secs(min_s), Duration::from_secs(max_s));
    if d < min || d > max {
        return Err(format!(
            "{s:?}: must be from {} to {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> (MeshConfig, Vec<String>) {
        let mut errors = Vec::new();
        let c = MeshConfig::parse(&v, &mut errors);
        (c, errors)
    }

    #[test]
    fn every_key_is_read_and_defaults_fill_the_rest() {
        let (c, e) = parse(json!({
            "url": "nats://127.0.0.1:4222", "replicas": 3, "ack_wait": "10s",
            "max_deliver": 2, "batch": 8, "token": "s3cret", "calls_stream": "CALLS_A",
        }));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(c.url.as_deref(), Some("nats://127.0.0.1:4222"));
        assert_eq!((c.replicas, c.max_deliver, c.batch), (3, 2, 8));
        assert_eq!(c.ack_wait, Duration::from_secs(10));
        assert_eq!(c.calls_stream, "CALLS_A");
        assert_eq!(c.results_stream, "TOOLGATE_RESULTS");
        assert!(!format!("{c:?}").contains("s3cret"), "{c:?}");
    }

    #[test]
    fn bad_values_are_named_by_their_path() {
        let (_, e) = parse(json!({
            "url": "http://u:pw@h", "replicas": 9, "ack_wait": "0s", "bogus": 1,
            "calls_stream": "a.b", "user": "u",
        }));
        let text = e.join("\n");
        for want in [
            "mesh.url: \"http://***@h\": not a NATS URL",
            "mesh.replicas: 9: expected a whole number from 1 to 5",
            "mesh.ack_wait: \"0s\": must be from 1s to 1h",
            "mesh.bogus: unknown key",
            "mesh.calls_stream: \"a.b\"",
            "mesh.user: user and password go together",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        assert!(!text.contains("pw"), "{text}");
    }

    #[test]
    fn a_cluster_url_list_is_accepted_and_redacted_per_url() {
        let (c, e) = parse(json!({"url": "nats://a:1,nats://u:p@b:2"}));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            redact(c.url.as_deref().unwrap_or("")),
            "nats://a:1,nats://***@b:2"
        );
    }
}
