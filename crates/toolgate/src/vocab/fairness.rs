//! How waiting calls share a contended quota: [`Fairness`] across tenants, and the
//! [`Reserve`] of a quota kept for higher priority classes.

use super::Priority;

/// How the waiters of a tool or pool are ordered across tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fairness {
    /// Weighted round robin over the tenants that wait (weights in
    /// `[tenants.ID] weight`), FIFO within a tenant.
    Tenant,
}

/// The share of a quota kept for each class above the lowest, in basis points
/// (1 = 0.01 %): a call may use only what is left above the shares of the classes
/// higher than its own.
///
/// `reserve = { interactive = "20%" }` keeps 20 % of every quota of the tool or pool
/// for interactive calls: default and batch calls are refused (or wait) while only
/// that share is left. `default = "10%"` would keep 10 % more from batch calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reserve {
    /// Basis points kept for interactive calls.
    pub interactive: u32,
    /// Basis points kept for default calls (and so for interactive ones too).
    pub default: u32,
}

/// Basis points in a whole.
pub(crate) const BASIS_POINTS: u32 = 10_000;

/// The most of a quota that reserves may keep, in basis points (the lowest class
/// keeps the rest).
pub(crate) const MAX_RESERVE: u32 = 9_000;

// === impl Reserve ===

impl Reserve {
    /// Whether nothing is reserved.
    pub const fn is_empty(&self) -> bool {
        self.interactive == 0 && self.default == 0
    }

    /// The basis points a call of class `p` may not use: the shares of the classes
    /// above it.
    pub const fn held_from(&self, p: Priority) -> u32 {
        match p {
            Priority::Interactive => 0,
            Priority::Default => self.interactive,
            Priority::Batch => self.interactive + self.default,
        }
    }

    /// The part of `capacity` a call of class `p` may not use, rounded up (a
    /// reserve always keeps at least what it says).
    pub fn hold(&self, capacity: u64, p: Priority) -> u64 {
        let bp = u128::from(self.held_from(p));
        let held = (u128::from(capacity) * bp).div_ceil(u128::from(BASIS_POINTS));
        u64::try_from(held).unwrap_or(u64::MAX)
    }

    /// Parses a share such as `"20%"` or `"12.5%"` into basis points.
    ///
    /// # Errors
    ///
    /// A message naming the rule: a percentage above 0, with at most two decimals.
    pub fn parse_share(s: &str) -> Result<u32, String> {
        let bad = || format!("{s:?}: expected a percentage such as \"20%\"");
        let n = s.trim().strip_suffix('%').ok_or_else(bad)?.trim();
        let (whole, frac) = n.split_once('.').unwrap_or((n, ""));
        if whole.is_empty()
            || frac.len() > 2
            || !whole
                .bytes()
                .chain(frac.bytes())
                .all(|b| b.is_ascii_digit())
            || whole.len() > 3
        {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let frac: u32 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
        let bp = whole * 100 + frac;
        if bp == 0 {
            return Err(format!("{s:?}: must be more than 0%"));
        }
        if bp > MAX_RESERVE {
            return Err(format!(
                "{s:?}: must be at most {}% (the lowest class keeps the rest)",
                MAX_RESERVE / 100
            ));
        }
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse_to_basis_points_and_bad_ones_are_named() {
        assert_eq!(Reserve::parse_share("20%"), Ok(2000));
        assert_eq!(Reserve::parse_share("12.5%"), Ok(1250));
        assert_eq!(Reserve::parse_share("0.01%"), Ok(1));
        for bad in [
            "20", "%", "-5%", "1.234%", "abc%", "1e2%", "0%", "95%", "1000%",
        ] {
            assert!(Reserve::parse_share(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_class_is_held_from_the_shares_above_it_rounded_up() {
        let r = Reserve {
            interactive: 2000,
            default: 1000,
        };
        assert_eq!(r.hold(10, Priority::Interactive), 0);
        assert_eq!(r.hold(10, Priority::Default), 2);
        assert_eq!(r.hold(10, Priority::Batch), 3);
        assert_eq!(r.hold(3, Priority::Default), 1);
        assert_eq!(r.hold(u64::MAX, Priority::Batch), 5_534_023_222_112_865_485);
    }
}
