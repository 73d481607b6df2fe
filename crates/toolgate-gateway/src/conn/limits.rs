//! The bounds of the connection layer, from `[gateway]`.

use std::time::Duration;

use super::activity::Timeouts;
use crate::settings::Settings;

/// The fewest connections beyond `max_connections` that still get the health-only
/// answer.
const MIN_OVERFLOW: usize = 64;
/// The header timeout of a connection beyond the limit, if `header_read_timeout` is
/// longer (a health check sends its request at once).
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// How many connections are served and for how long they may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `header_read_timeout`: the time a client has to send a request head.
    pub header_read_timeout: Duration,
    /// `idle_timeout`: how long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// `max_connections` (possibly lowered to fit the file-descriptor limit, see
    /// [`super::fit_to_fd_limit`]): connections served by the router at once.
    pub max_connections: usize,
    /// `shutdown_grace`: on shutdown, how long connections may take to finish.
    pub shutdown_grace: Duration,
}

// === impl Limits ===

impl Limits {
    /// The limits of `settings`.
    pub fn new(settings: &Settings) -> Self {
        Self {
            header_read_timeout: settings.header_read_timeout,
            idle_timeout: settings.idle_timeout,
            max_connections: settings.max_connections,
            shutdown_grace: settings.shutdown_grace,
        }
    }

    /// How many connections beyond `max_connections` get the health-only answer
    /// (`GET /healthz`, and 503 `connection_limit` for anything else):
    /// `max(64, max_connections / 16)`. Connections beyond those are closed at once.
    pub fn overflow(&self) -> usize {
        overflow_for(self.max_connections)
    }

    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            header: self.header_read_timeout,
            idle: self.idle_timeout,
        }
    }

    pub(crate) fn overflow_timeouts(&self) -> Timeouts {
        let header = self.header_read_timeout.min(OVERFLOW_HEADER_TIMEOUT);
        Timeouts {
            header,
            idle: header,
        }
    }
}

/// The overflow of `max` connections; see [`Limits::overflow`].
pub(crate) fn overflow_for(max: usize) -> usize {
    MIN_OVERFLOW.max(max / 16)
}
