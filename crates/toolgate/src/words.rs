//! Short byte strings (tool names, tenant keys) hashed and compared a word at a time,
//! inline: [`hash`] and [`same`], and a name's [`Key`] (its length and, in two
//! words, its first and last 8 bytes: every byte of a short name) for a lookup that
//! compares without reading names.
//!
//! Written by hand because the names are short and the calls are hot: a general
//! hasher's setup and a call to `memcmp` (or to `memcpy` for a variable-length tail)
//! cost more than the work on a name of a few bytes. Every byte is read, so equal
//! results need equal bytes where it matters ([`same`]); [`hash`] is not keyed and
//! serves only maps whose keys are the policy's own names (never a client's choice).

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Names up to this many bytes are held whole in a [`Key`].
const SHORT: usize = 16;

/// A name as a lookup sees it: its length and its first and last 8 bytes as two
/// words, which for a name of at most [`SHORT`] bytes is every byte. Two short names
/// are the same bytes exactly when their keys are equal, so a lookup that keeps the
/// key of what it stored compares without reading either name; a longer name's key
/// holds part of it, and equal keys still need the names compared
/// ([`Key::is_whole`]). Made of one or two loads, with no hash: the key picks its
/// own slot ([`Key::spot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    len: usize,
    words: [u64; 2],
}

// === impl Key ===

impl Key {
    /// The key of `name`: one or two loads of a word, whatever its length.
    #[inline(always)]
    pub(crate) fn of(name: &[u8]) -> Self {
        let n = name.len();
        let words = match n {
            0 => [0, 0],
            1..=7 => [tail_word(name), 0],
            _ => [word(name, 0), word(name, n - 8)],
        };
        Self { len: n, words }
    }

    /// One of `2^bits` slots (`bits` from 1 to 63) for the key: its words and
    /// length mixed by one multiplication, the top bits taken. Not keyed: it serves
    /// only a thread's own table of the policy's names ([`crate::recent`]).
    #[inline(always)]
    pub(crate) fn spot(&self, bits: u32) -> usize {
        let x = self.words[0] ^ self.words[1].rotate_left(32) ^ self.len as u64;
        (x.wrapping_mul(K) >> (64 - bits)) as usize
    }

    /// Whether the key holds every byte of its name, so that equal keys mean equal
    /// names.
    #[inline(always)]
    pub(crate) fn is_whole(&self) -> bool {
        self.len <= SHORT
    }
}

/// One word folded into a hash: a rotate, an exclusive or and a multiplication.
#[inline(always)]
fn fold(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(K)
}

/// The hash of a name longer than [`SHORT`] bytes, before its length is folded in:
/// each 8-byte word, then the last 8 bytes (overlapping the words before when the
/// length is not a multiple of 8). Out of line: the policy's names are mostly short.
#[inline(never)]
fn long(name: &[u8]) -> u64 {
    let mut h = 0u64;
    let mut words = name.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = fold(h, u64::from_le_bytes(b));
    }
    if !words.remainder().is_empty() {
        h = fold(h, word(name, name.len() - 8));
    }
    h
}

/// The name's hash: its words folded in (one or two for a short name), then its
/// length, then a final mix so that the low bits (a table's slot) depend on every
/// byte. Not keyed: it serves only maps whose keys are the policy's own names.
#[inline(always)]
pub(crate) fn hash(name: &[u8]) -> u64 {
    // A short name's words are its key's.
    let Key { len, words } = Key::of(name);
    let h = match len {
        0 => 0,
        1..=7 => fold(0, words[0]),
        8..=SHORT => fold(fold(0, words[0]), words[1]),
        _ => long(name),
    };
    let h = (h ^ len as u64).wrapping_mul(K);
    h ^ (h >> 32)
}

/// The last 1 to 7 bytes of a name as one word, read in at most two loads that
/// together cover every byte (overlapping when they must), without the call to
/// `memcpy` that a copy of a variable length makes.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let n = tail.len();
    if n >= 4 {
        let lo = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let hi = u32::from_le_bytes([tail[n - 4], tail[n - 3], tail[n - 2], tail[n - 1]]);
        u64::from(lo) | (u64::from(hi) << 32)
    } else {
        u64::from(tail[0]) | (u64::from(tail[n / 2]) << 8) | (u64::from(tail[n - 1]) << 16)
    }
}

/// The 8 bytes of `s` from `i` as one word (0 past the end, never the case here).
#[inline(always)]
fn word(s: &[u8], i: usize) -> u64 {
    s.get(i..i + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Whether two names are the same bytes: up to 16 bytes in at most two loads of
/// each, inline (a call to `memcmp` costs more than such a comparison), longer ones
/// by `memcmp`.
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=7 => tail_word(a) == tail_word(b),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// `same` says what `==` says, and so do the keys of names of at most 16
        /// bytes, for names of every length up to 40 (the inline loads of 1–16 bytes,
        /// `memcmp` and keys that hold a name in part beyond), and for a name against
        /// the same name with one byte changed (the loads must cover every byte).
        #[test]
        fn same_and_whole_keys_are_equality(
            a in prop::collection::vec(any::<u8>(), 0..40),
            b in prop::collection::vec(any::<u8>(), 0..40),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            use super::{same, Key};
            let (ka, kb) = (Key::of(&a), Key::of(&b));
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert_eq!(ka.is_whole(), a.len() <= 16);
            if ka.is_whole() && kb.is_whole() {
                prop_assert_eq!(ka == kb, a == b);
            }
            let copy = a.clone();
            prop_assert!(same(&a, &copy));
            prop_assert_eq!(ka, Key::of(&copy));
            if !a.is_empty() {
                let mut c = a.clone();
                c[at.index(a.len())] ^= flip;
                prop_assert!(!same(&a, &c));
                if ka.is_whole() {
                    prop_assert_ne!(ka, Key::of(&c));
                }
            }
        }
    }
}
