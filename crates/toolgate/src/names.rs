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
//! length and at most that probe, however it is chosen. The hash and the comparison
//! are [`crate::words`]'.

use crate::words::{hash, same};

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

// === impl NameMap ===

impl<V> NameMap<V> {
    /// The value named `name`.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        let h = hash(name.as_bytes());
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
