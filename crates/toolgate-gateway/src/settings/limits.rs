//! The bounds of `[gateway]` on what clients send and hold: id lengths, leases,
//! reservation TTLs, upstream answers; and `allow_no_tools`, which a reload of a
//! config without tools needs.
//!
//! Every bound has a default and a ceiling, so that no config can leave a resource
//! unbounded either.

use std::time::Duration;

use serde_json::Value;

/// The longest `lease_ttl` or `max_reservation_ttl`: one day.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest `max_id_length`, in bytes.
pub const MAX_ID_LENGTH_CEILING: usize = 4096;

/// The smallest `max_id_length`: a lease or reservation id is 32 bytes.
pub const MIN_ID_LENGTH: usize = 32;

/// The largest `max_leases` and `max_leases_per_tenant`.
pub const MAX_LEASES_CEILING: usize = 10_000_000;

/// The largest `max_response_bytes` (gateway or tool): 1 GiB.
pub const MAX_RESPONSE_BYTES_CEILING: u64 = 1 << 30;

/// Bounds from `[gateway]`; reloaded with the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Longest tool name, tenant id, idempotency key, lease or reservation id a
    /// client may send, in bytes (32 to 4096; default 256).
    pub max_id_length: usize,
    /// Longest `ttl_ms` of a reservation; the cap is the larger of this and
    /// `lease_ttl` (`None`: `lease_ttl`). At most one day.
    pub max_reservation_ttl: Option<Duration>,
    /// Most leases open at once, every tenant together (default 100,000).
    pub max_leases: usize,
    /// Most leases one tenant may hold open at once (default 10,000).
    pub max_leases_per_tenant: usize,
    /// Largest upstream answer `invoke` reads, in bytes (default 8 MiB, at most
    /// 1 GiB); `[tools.X.upstream] max_response_bytes` overrides it per tool.
    pub max_response_bytes: u64,
    /// Whether a reload may put a config without tools in force.
    pub allow_no_tools: bool,
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_id_length: 256,
            max_reservation_ttl: None,
            max_leases: 100_000,
            max_leases_per_tenant: 10_000,
            max_response_bytes: 8 * 1024 * 1024,
            allow_no_tools: false,
        }
    }
}

impl Limits {
    /// The keys of `[gateway]` read here.
    pub const KEYS: [&'static str; 6] = [
        "allow_no_tools",
        "max_id_length",
        "max_leases",
        "max_leases_per_tenant",
        "max_reservation_ttl",
        "max_response_bytes",
    ];

    /// Reads `key` (one of [`Limits::KEYS`]) of `[gateway]`; `None` for another key.
    pub(super) fn parse(&mut self, key: &str, v: &Value) -> Option<Result<(), String>> {
        let ceiling = MAX_LEASES_CEILING as u64;
        Some(match key {
            "max_id_length" => count(v, MIN_ID_LENGTH as u64, MAX_ID_LENGTH_CEILING as u64)
                .map(|n| self.max_id_length = n as usize),
            "max_reservation_ttl" => ttl(v).map(|d| self.max_reservation_ttl = Some(d)),
            "max_leases" => count(v, 1, ceiling).map(|n| self.max_leases = n as usize),
            "max_leases_per_tenant" => {
                count(v, 1, ceiling).map(|n| self.max_leases_per_tenant = n as usize)
            }
            "max_response_bytes" => {
                count(v, 1, MAX_RESPONSE_BYTES_CEILING).map(|n| self.max_response_bytes = n)
            }
            "allow_no_tools" => v
                .as_bool()
                .map(|b| self.allow_no_tools = b)
                .ok_or_else(|| format!("expected true or false, got {v}")),
            _ => return None,
        })
    }

    /// The longest TTL a reservation may ask for under `lease_ttl`.
    pub fn reservation_ttl_cap(&self, lease_ttl: Duration) -> Duration {
        self.max_reservation_ttl
            .map_or(lease_ttl, |m| m.max(lease_ttl))
    }
}

fn count(v: &Value, min: u64, max: u64) -> Result<u64, String> {
    v.as_u64()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{v}: expected a whole number from {min} to {max}"))
}

/// A TTL: a duration such as `"60s"`, longer than zero and at most a day.
///
/// # Errors
///
/// A message naming the value and the rule.
pub(super) fn ttl(v: &Value) -> Result<Duration, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("expected a string, got {v}"))?;
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err(format!("{s:?}: must be longer than zero")),
        Ok(d) if d > MAX_LEASE_TTL => Err(format!("{s:?}: must be at most 24h")),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{s:?}: not a duration such as \"60s\" ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_bound_has_a_ceiling_and_names_the_value() {
        let mut l = Limits::default();
        assert_eq!(l.parse("max_id_length", &json!(64)), Some(Ok(())));
        assert_eq!(l.max_id_length, 64);
        let e = l.parse("max_id_length", &json!(4097)).and_then(Result::err);
        assert_eq!(
            e.as_deref(),
            Some("4097: expected a whole number from 32 to 4096")
        );
        assert!(l.parse("max_leases", &json!(0)).is_some_and(|r| r.is_err()));
        assert!(l
            .parse("max_response_bytes", &json!(2_u64 << 30))
            .is_some_and(|r| r.is_err()));
        let e = l
            .parse("max_reservation_ttl", &json!("2d"))
            .and_then(Result::err);
        assert_eq!(e.as_deref(), Some("\"2d\": must be at most 24h"));
        assert_eq!(l.parse("listen", &json!("x")), None, "not a bound");
    }

    #[test]
    fn the_reservation_ttl_cap_is_the_larger_of_lease_ttl_and_the_setting() {
        let mut l = Limits::default();
        let min = Duration::from_secs(60);
        assert_eq!(l.reservation_ttl_cap(min), min);
        l.max_reservation_ttl = Some(Duration::from_secs(600));
        assert_eq!(l.reservation_ttl_cap(min), Duration::from_secs(600));
        l.max_reservation_ttl = Some(Duration::from_secs(1));
        assert_eq!(l.reservation_ttl_cap(min), min);
    }
}
