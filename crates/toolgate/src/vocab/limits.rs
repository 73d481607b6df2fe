//! The bounds and defaults that the decision reads at run time, next to the words it
//! speaks: the longest wait, the longest pause an upstream can impose, and how many
//! tenant partitions a quota keeps. They are there so that no caller, no upstream and
//! no flood of tenants can hold a call, stop a tool or grow memory without bound; the
//! config checks values against them.

use std::time::Duration;

/// The longest `max_wait` accepted: waits must be bounded.
pub const MAX_WAIT_LIMIT: Duration = Duration::from_secs(3600);

/// The default `max_pause`: the longest pause (or spreading window) an upstream's
/// `Retry-After` or rate-limit headers can impose on a tool.
pub const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(300);

/// The longest `max_pause` accepted: no upstream may stop a tool for longer than a
/// day, whatever it asks for.
pub const MAX_PAUSE_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// The default cap on live tenant partitions of one quota.
pub const DEFAULT_MAX_PARTITIONS: usize = 100_000;
