//! The record of a call's attempts: one attempt ([`AttemptRecord`]) and every attempt
//! of a call, in order ([`History`]).

use std::ops::Deref;
use std::time::Duration;

use smallvec::SmallVec;

use super::attempt::AttemptEnd;

/// One attempt of a call, as listed in a [`History`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub number: u32,
    /// How it ended.
    pub end: AttemptEnd,
    /// The response's status, if one came back.
    pub status: Option<u16>,
    /// How long it took.
    pub latency: Duration,
    /// The wait before the next attempt (`None` for the last one).
    pub delay: Option<Duration>,
}

/// Every attempt of a call, the first first, as a successful call's
/// [`RunOutput::history`] lists them. Read it as a slice of [`AttemptRecord`]s
/// (`len`, indexing, `iter`, `last`, through `Deref`), or take it as a vector
/// ([`History::into_vec`]).
///
/// The first attempt is held inline: a call that takes one attempt, as most calls
/// do, allocates nothing for its history (an allocation and its release were about a
/// tenth of what [`Engine::run`](crate::Engine::run) added to an admission). Retries
/// go to the heap. A failed call lists its attempts in a vector
/// ([`RunFailure::attempts`]), which keeps the failure small.
///
/// [`RunOutput::history`]: super::RunOutput::history
/// [`RunFailure::attempts`]: super::RunFailure::attempts
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History(SmallVec<[AttemptRecord; 1]>);

// === impl History ===

impl History {
    /// No attempt yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next attempt.
    pub(crate) fn push(&mut self, record: AttemptRecord) {
        self.0.push(record);
    }

    /// The attempts, the first first.
    pub fn as_slice(&self) -> &[AttemptRecord] {
        &self.0
    }

    /// The attempts as a vector (which allocates for a history of one attempt).
    pub fn into_vec(self) -> Vec<AttemptRecord> {
        self.0.into_vec()
    }
}

impl Deref for History {
    type Target = [AttemptRecord];

    fn deref(&self) -> &[AttemptRecord] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a AttemptRecord;
    type IntoIter = std::slice::Iter<'a, AttemptRecord>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<AttemptRecord> for History {
    fn from_iter<I: IntoIterator<Item = AttemptRecord>>(records: I) -> Self {
        Self(records.into_iter().collect())
    }
}

impl From<Vec<AttemptRecord>> for History {
    fn from(records: Vec<AttemptRecord>) -> Self {
        Self(SmallVec::from_vec(records))
    }
}

impl From<History> for Vec<AttemptRecord> {
    fn from(history: History) -> Self {
        history.into_vec()
    }
}

impl PartialEq<[AttemptRecord]> for History {
    fn eq(&self, other: &[AttemptRecord]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<AttemptRecord>> for History {
    fn eq(&self, other: &Vec<AttemptRecord>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::{AttemptRecord, History};
    use crate::AttemptEnd;

    fn record(number: u32) -> AttemptRecord {
        AttemptRecord {
            number,
            end: AttemptEnd::Success,
            status: Some(200),
            latency: Duration::from_millis(u64::from(number)),
            delay: None,
        }
    }

    #[test]
    fn a_history_keeps_every_attempt_in_order_inline_or_not() {
        let mut h = History::new();
        assert!(h.is_empty());
        for n in 1..=5 {
            h.push(record(n));
            assert_eq!(h.len(), n as usize);
            assert_eq!(h.last(), Some(&record(n)));
        }
        let numbers: Vec<u32> = h.iter().map(|r| r.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5]);
        let v: Vec<AttemptRecord> = (1..=5).map(record).collect();
        assert_eq!(h, v);
        assert_eq!(History::from(v.clone()), h);
        assert_eq!(h.clone().into_vec(), v);
        assert_eq!((&h).into_iter().count(), 5);
        let one: History = std::iter::once(record(1)).collect();
        assert_eq!(one, [record(1)][..]);
        assert_ne!(one, h);
    }
}
