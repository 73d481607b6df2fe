//! The tools of a policy by name ([`NameMap`]): the lookup every call by name makes
//! first.
//!
//! Written here rather than taken from `hashbrown` because the lookup is a measured
//! share of a decision by name (a general map hashed the name with a keyed hasher,
//! matched a SIMD group and called `memcmp`: about 97 instructions for a short name,
//! a fifth of `Engine::try_admit`). This map is built once per policy and never
//! changes: open addressing over a power-of-two table at most half full, a
//! multiply-rotate hash over the name's 8-byte words, and the name compared only when
//! the stored hash matches. The keys are the policy's names, never a client's, so the
//! longest probe is fixed when the policy is compiled: a client's name costs its
//! length and at most that probe, however it is chosen.

/// Values by name, fixed once built (see the module's documentation).
#[derive(Debug)]
pub(crate) struct NameMap<V> {
    /// `mask + 1` slots (a power of two), at least one of them empty.
    slots: Box<[Option<Entry<V>>]>,
    mask: usize,
}

#[derive(Debug)]
struct Entry<V> {
    hash: u64,
    name: Box<str>,
    value: V,
}

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
        8..=16 => {
            let word = |s: &[u8], i: usize| {
                u64::from_le_bytes([
                    s[i],
                    s[i + 1],
                    s[i + 2],
                    s[i + 3],
                    s[i + 4],
                    s[i + 5],
                    s[i + 6],
                    s[i + 7],
                ])
            };
            word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

// === impl NameMap ===

impl<V> NameMap<V> {
    /// The value named `name`.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.get_hashed(hash(name.as_bytes()), name)
    }

    /// The value named `name`, whose [`hash`] is `h`.
    #[inline]
    pub(crate) fn get_hashed(&self, h: u64, name: &str) -> Option<&V> {
        let mut i = h as usize & self.mask;
        loop {
            // Some slot is empty, so the probe ends.
            let e = self.slots.get(i)?.as_ref()?;
            if e.hash == h && same(e.name.as_bytes(), name.as_bytes()) {
                return Some(&e.value);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten().map(|e| &e.value)
    }

    /// How many names there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values().count()
    }
}

impl<V> FromIterator<(Box<str>, V)> for NameMap<V> {
    /// The map of `entries`; a name given twice keeps its last value.
    fn from_iter<I: IntoIterator<Item = (Box<str>, V)>>(entries: I) -> Self {
        let entries: Vec<_> = entries.into_iter().collect();
        let size = (entries.len() * 2).max(1).next_power_of_two();
        let mut map = Self {
            slots: std::iter::repeat_with(|| None).take(size).collect(),
            mask: size - 1,
        };
        for (name, value) in entries {
            let h = hash(name.as_bytes());
            let mut i = h as usize & map.mask;
            loop {
                match &mut map.slots[i] {
                    Some(e) if e.hash == h && e.name == name => {
                        e.value = value;
                        break;
                    }
                    Some(_) => i = (i + 1) & map.mask,
                    empty @ None => {
                        *empty = Some(Entry {
                            hash: h,
                            name,
                            value,
                        });
                        break;
                    }
                }
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::NameMap;

    fn map(names: &[&str]) -> NameMap<usize> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (Box::<str>::from(*n), i))
            .collect()
    }

    #[test]
    fn finds_each_name_and_nothing_else() {
        let m = map(&["search", "crm.update", "a", "", "payments-charge-card-v2"]);
        assert_eq!(m.len(), 5);
        assert_eq!(m.get("search"), Some(&0));
        assert_eq!(m.get("crm.update"), Some(&1));
        assert_eq!(m.get("a"), Some(&2));
        assert_eq!(m.get(""), Some(&3));
        assert_eq!(m.get("payments-charge-card-v2"), Some(&4));
        for absent in [
            "Search",
            "search ",
            "b",
            "crm.updatE",
            "payments-charge-card-v3",
        ] {
            assert_eq!(m.get(absent), None, "{absent:?}");
        }
        let mut values: Vec<_> = m.values().copied().collect();
        values.sort_unstable();
        assert_eq!(values, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn an_empty_map_finds_nothing() {
        let m = map(&[]);
        assert_eq!(m.get(""), None);
        assert_eq!(m.get("t"), None);
        assert_eq!(m.values().count(), 0);
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value() {
        let m = map(&["t", "u", "t"]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("t"), Some(&2));
    }

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

        /// Against the standard map: the same answer for every name put in and for
        /// names near them (a byte changed, cut or added: the same words, a
        /// different tail or length).
        #[test]
        fn answers_as_a_hash_map(
            names in prop::collection::vec("[a-z0-9._-]{0,40}", 0..200),
            probes in prop::collection::vec("[a-z0-9._-]{0,40}", 0..50),
        ) {
            let m: NameMap<usize> =
                names.iter().enumerate().map(|(i, n)| (n.as_str().into(), i)).collect();
            let reference: HashMap<&str, usize> =
                names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
            prop_assert_eq!(m.len(), reference.len());
            let near = names.iter().flat_map(|n| {
                let mut cut = n.clone();
                cut.pop();
                [cut, format!("{n}x"), format!("x{n}")]
            });
            for name in names.iter().cloned().chain(probes).chain(near) {
                prop_assert_eq!(m.get(&name), reference.get(name.as_str()), "{:?}", name);
            }
        }
    }
}
