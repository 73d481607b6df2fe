//! Fitting `max_connections` to the process's file-descriptor limit at start-up.

use super::limits::{overflow_for, Limits};

/// File descriptors kept for everything but client connections: the listener,
/// Redis and NATS connections, upstream connections, config and log files.
pub const FD_RESERVE: u64 = 256;

/// `limits` with `max_connections` fitted to the file-descriptor limit: when the
/// soft `RLIMIT_NOFILE` leaves less room than `max_connections`, their overflow
/// ([`Limits::overflow`]) and [`FD_RESERVE`], the soft limit is raised towards the
/// hard one; if that is still short, `max_connections` is lowered to what fits and a
/// WARN says so. Elsewhere than on Unix, `limits` as they are.
pub fn fit_to_fd_limit(limits: Limits) -> Limits {
    let need = fds_needed(limits.max_connections);
    let Some(fds) = raise_fd_limit(need) else {
        return limits;
    };
    if fds >= need {
        return limits;
    }
    let fitted = fitted_max(fds);
    tracing::warn!(
        "the file-descriptor limit ({fds}) leaves room for {fitted} connections, not \
         max_connections = {}: serving at most {fitted} (raise `ulimit -n` to at least \
         {need} for {})",
        limits.max_connections,
        limits.max_connections,
    );
    Limits {
        max_connections: fitted,
        ..limits
    }
}

/// File descriptors for `max` connections, their overflow and the reserve.
fn fds_needed(max: usize) -> u64 {
    (max as u64)
        .saturating_add(overflow_for(max) as u64)
        .saturating_add(FD_RESERVE)
}

/// The most connections whose [`fds_needed`] fit in `fds` (at least 1).
fn fitted_max(fds: u64) -> usize {
    let budget = usize::try_from(fds.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
    // overflow_for(m) = max(64, m / 16): solve m + overflow_for(m) <= budget.
    let m = if budget <= 64 + 1024 {
        budget.saturating_sub(64)
    } else {
        budget / 17 * 16
    };
    m.max(1)
}

/// Raises the soft limit towards `need` (never above the hard limit) and returns the
/// soft limit then in force; `None` where it cannot be read.
#[cfg(unix)]
fn raise_fd_limit(need: u64) -> Option<u64> {
    let (before, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?;
    if before >= need {
        return Some(before);
    }
    match rlimit::increase_nofile_limit(need) {
        Ok(now) => {
            if now > before {
                tracing::info!(before, now, hard, "raised the soft file-descriptor limit");
            }
            Some(now)
        }
        Err(e) => {
            tracing::warn!("cannot raise the file-descriptor limit ({before}): {e}");
            Some(before)
        }
    }
}

#[cfg(not(unix))]
fn raise_fd_limit(_need: u64) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fitted_maximum_and_its_overflow_fit_in_the_limit() {
        assert_eq!(fds_needed(10_000), 10_000 + 625 + FD_RESERVE);
        for fds in [
            0,
            100,
            256,
            300,
            321,
            1024,
            1344,
            1345,
            4096,
            65_536,
            1 << 20,
        ] {
            let m = fitted_max(fds);
            assert!(m >= 1);
            if fds >= FD_RESERVE + 65 {
                assert!(fds_needed(m) <= fds, "{fds}: {m}");
                assert!(fds_needed(m + 17) > fds, "{fds}: {m} could be larger");
            }
        }
        assert_eq!(fitted_max(1024), 1024 - 256 - 64);
    }
}
