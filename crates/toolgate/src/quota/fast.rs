//! The one-word form of an unpartitioned bucket ([`FastBucket`]): the fast path admits
//! on it with one compare-and-swap, no lock and no plan.

use std::sync::atomic::Ordering;

use crate::clock::Nanos;
use crate::rate::{Tat, WordForm};
use crate::sync::{AtomicBool, AtomicU64};

/// The state of an unpartitioned bucket, kept in one atomic word whenever nobody
/// holds the cell's lock and nobody waits on it, so that the fast path admits with
/// one compare-and-swap and no lock.
///
/// The word holds either the bucket's state ([`WordForm`] units), and is then the
/// truth, or [`FastBucket::LOCKED`], and then the state under the lock is. Taking
/// the lock swaps `LOCKED` in and carries the word into the state; releasing it
/// writes the state back unless waiters have reservations on the cell (they keep the
/// word locked, which sends every call through the general path and its FIFO
/// order). A fast admission that finds the word locked falls back to the general
/// path; one whose compare-and-swap loses to a lock taker retries and sees `LOCKED`.
///
/// Only the cells of tools that take the fast path use the word (see
/// [`FastBucket::enable`]); for the others it stays `LOCKED` and taking the lock
/// costs nothing more. The cell moves the state in and out ([`FastBucket::take`],
/// [`FastBucket::store`]); the word knows nothing of the cell.
///
/// It fills a 128-byte block of its own, the word alone in the first cache line and
/// the bucket's parameters in the second: the word's line is the one that cores
/// hand back and forth when they admit the same tool, and the parameters, read on
/// every call before the word, must not travel with it (with them in one line, two
/// cores on one quota took 1.6–1.9 × as long per decision).
#[derive(Debug)]
#[repr(C, align(128))]
pub(crate) struct FastBucket {
    pub(crate) word: AtomicU64,
    /// Keeps the parameters out of the word's cache line.
    _apart: [u64; 7],
    form: WordForm,
    enabled: AtomicBool,
}

// === impl FastBucket ===

impl FastBucket {
    /// The word while the state lives under the lock (never a reachable state: it
    /// would be a bucket 584 years into the clock at one unit per nanosecond).
    pub(crate) const LOCKED: u64 = u64::MAX;

    /// The one-word form `form` of a bucket, not in use yet: its word stays `LOCKED`
    /// (the state lives under the cell's lock) until [`FastBucket::enable`].
    pub(crate) fn new(form: WordForm) -> Self {
        Self {
            word: AtomicU64::new(Self::LOCKED),
            _apart: [0; 7],
            form,
            enabled: AtomicBool::new(false),
        }
    }

    /// Whether the word is in use (the tool takes the fast path).
    #[inline]
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Puts the word in use from now on; the cell stores the state into it (it is
    /// still `LOCKED`).
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    /// Takes the state out of the word, leaving it `LOCKED` (the lock is being
    /// taken); `None` if it was `LOCKED` already (the state is under the lock).
    #[inline]
    pub(crate) fn take(&self) -> Option<Tat> {
        let word = self.word.swap(Self::LOCKED, Ordering::AcqRel);
        if word != Self::LOCKED {
            Some(self.form.to_tat(word))
        } else {
            None
        }
    }

    /// The bucket's state read off the word, without taking it: `None` while the
    /// state is under the lock (or the word is not in use).
    #[inline]
    pub(crate) fn peek(&self) -> Option<Tat> {
        let word = self.word.load(Ordering::Acquire);
        (word != Self::LOCKED).then(|| self.form.to_tat(word))
    }

    /// Puts the state `tat` back into the word (the lock is being let go), unless it
    /// has no one-word form.
    #[inline]
    pub(crate) fn store(&self, tat: Tat) {
        if let Some(word) = self.form.to_word(tat).filter(|w| *w != Self::LOCKED) {
            self.word.store(word, Ordering::Release);
        }
    }

    /// When `cost` conforms at the earliest, read off the word at `now` (after
    /// [`FastBucket::try_charge`] said no): `Some` time after `now` for a refusal the
    /// general path would give too, exactly; `None` when the general path must decide
    /// (the state is under the lock, the word admits by now, or the arithmetic
    /// would leave a word).
    #[inline]
    pub(crate) fn refusal(&self, cost: u64, now: Nanos) -> Option<Nanos> {
        let word = self.word.load(Ordering::Acquire);
        if word == Self::LOCKED {
            return None;
        }
        self.form.refusal(word, cost, now)
    }

    /// Admits `cost` at `now` with one compare-and-swap, or says that the general
    /// path must decide: `false` on a rejection too (which the general path then
    /// explains), or while the state is under the lock.
    #[inline]
    pub(crate) fn try_charge(&self, cost: u64, now: Nanos) -> bool {
        let Some(charge) = self.form.prepare(cost, now) else {
            return false;
        };
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            // `apply` refuses a `LOCKED` word and never returns one.
            let Some(next) = charge.apply(word) else {
                return false;
            };
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
    }
}
