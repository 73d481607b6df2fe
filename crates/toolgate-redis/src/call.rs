//! The parts of a core [`Call`] the Redis store needs, owned.

use std::time::Duration;

use toolgate::Call;

/// The fields of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallInfo {
    pub(crate) tenant: Option<String>,
    pub(crate) tokens: u64,
    pub(crate) count: u64,
    pub(crate) max_wait: Option<Duration>,
}

// === impl CallInfo ===

impl CallInfo {
    /// Reads `call`'s fields.
    pub(crate) fn read(call: &Call<'_>) -> Self {
        Self {
            tenant: call.tenant_id().map(str::to_string),
            tokens: call.token_estimate(),
            count: call.request_count(),
            max_wait: call.max_wait_override(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_read() {
        let call = Call::new("t")
            .tenant("acme")
            .tokens(12)
            .count(3)
            .max_wait(Duration::from_millis(250));
        assert_eq!(
            CallInfo::read(&call),
            CallInfo {
                tenant: Some("acme".into()),
                tokens: 12,
                count: 3,
                max_wait: Some(Duration::from_millis(250)),
            }
        );
    }
}
