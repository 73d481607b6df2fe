//! Short byte strings (tool names, tenant keys) hashed and compared a word at a time,
//! inline: [`hash`] and [`same`].
//!
//! Written by hand because the names are short and the calls are hot: a general
//! hasher's setup and a call to `memcmp` (or to `memcpy` for a variable-length tail)
//! cost more than the work on a name of a few bytes. Every byte is read, so equal
//! results need equal bytes where it matters ([`same`]); [`hash`] is not keyed and
//! serves only maps whose keys are the policy's own names (never a client's choice).

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The name's hash: each 8-byte word (the last one, shorter, read by [`tail_word`])
/// folded in by a rotate, an exclusive or and a multiplication, then the length,
/// then a final mix so that the low bits (the slot) depend on every byte.
#[inline]
pub(crate) fn hash(name: &[u8]) -> u64 {
    let mut h = 0u64;
    let mut words = name.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        h = (h.rotate_left(5) ^ tail_word(tail)).wrapping_mul(K);
    }
    h = (h ^ name.len() as u64).wrapping_mul(K);
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
        /// `same` says what `==` says, for names of every length up to 40 (the inline
        /// loads of 1–16 bytes and `memcmp` beyond), and for a name against the same
        /// name with one byte changed (the loads must cover every byte).
        #[test]
        fn same_is_equality(
            a in prop::collection::vec(any::<u8>(), 0..40),
            b in prop::collection::vec(any::<u8>(), 0..40),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            prop_assert_eq!(super::same(&a, &b), a == b);
            prop_assert!(super::same(&a, &a.clone()));
            if !a.is_empty() {
                let mut c = a.clone();
                c[at.index(a.len())] ^= flip;
                prop_assert!(!super::same(&a, &c));
            }
        }
    }
}
