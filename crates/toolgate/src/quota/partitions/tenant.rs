//! One tenant's slot in a shard's table ([`Tenant`]): its key and its partition
//! ([`Entry`]: a bucket's state in one word, or the whole instance), in 32 bytes.
//!
//! A key of at most [`INLINE`] bytes (most tenant ids: names, numbers, short
//! slugs) is kept in the slot itself, so that finding a tenant reads one place in
//! memory, not two (the slot, then the key's own allocation), and the key costs no
//! allocation; a longer one (a UUID, say) is allocated, as a keyed limiter's key
//! usually is. Key and partition share one enum so that the slot stays 32 bytes:
//! an enum of a key and an enum of a partition side by side would take 40.

use std::sync::Arc;

/// The longest key kept in the slot itself: what fits beside the partition's word,
/// the key's length and the enum's tag in 32 bytes.
pub(super) const INLINE: usize = 22;

/// A tenant's partition, as a value (to store in a slot, see [`Tenant`]).
#[derive(Debug)]
pub(super) enum Entry<C> {
    /// A bucket's state alone, in the quota's one-word form.
    Word(u64),
    /// The whole instance, shared with the calls that use it.
    Instance(Arc<C>),
}

/// A tenant's partition, borrowed from its slot ([`Tenant::entry`]).
#[derive(Debug)]
pub(super) enum EntryRef<'a, C> {
    Word(u64),
    Instance(&'a Arc<C>),
}

/// A tenant's slot: its key and its partition.
#[derive(Debug)]
pub(super) enum Tenant<C> {
    ShortWord {
        len: u8,
        key: [u8; INLINE],
        word: u64,
    },
    LongWord {
        key: Box<str>,
        word: u64,
    },
    ShortInstance {
        len: u8,
        key: [u8; INLINE],
        cell: Arc<C>,
    },
    LongInstance {
        key: Box<str>,
        cell: Arc<C>,
    },
}

// === impl Tenant ===

impl<C> Tenant<C> {
    /// The slot of tenant `key` with partition `entry`.
    pub(super) fn new(key: &str, entry: Entry<C>) -> Self {
        match (short(key), entry) {
            (Some((len, key)), Entry::Word(word)) => Self::ShortWord { len, key, word },
            (Some((len, key)), Entry::Instance(cell)) => Self::ShortInstance { len, key, cell },
            (None, Entry::Word(word)) => Self::LongWord {
                key: key.into(),
                word,
            },
            (None, Entry::Instance(cell)) => Self::LongInstance {
                key: key.into(),
                cell,
            },
        }
    }

    /// Whether this is the slot of tenant `key`.
    #[inline(always)]
    pub(super) fn is(&self, key: &str) -> bool {
        crate::words::same(self.key_bytes(), key.as_bytes())
    }

    #[inline]
    fn key_bytes(&self) -> &[u8] {
        match self {
            Self::ShortWord { len, key, .. } | Self::ShortInstance { len, key, .. } => {
                key.get(..usize::from(*len)).unwrap_or_default()
            }
            Self::LongWord { key, .. } | Self::LongInstance { key, .. } => key.as_bytes(),
        }
    }

    /// The tenant's key.
    pub(super) fn key(&self) -> &str {
        // A short key's bytes were copied whole from a `str`: they are UTF-8.
        std::str::from_utf8(self.key_bytes()).expect("a key is copied from a str")
    }

    /// The partition, as it is kept.
    #[inline]
    pub(super) fn entry(&self) -> EntryRef<'_, C> {
        match self {
            Self::ShortWord { word, .. } | Self::LongWord { word, .. } => EntryRef::Word(*word),
            Self::ShortInstance { cell, .. } | Self::LongInstance { cell, .. } => {
                EntryRef::Instance(cell)
            }
        }
    }

    /// The bucket's word, to change, while the partition is kept as one.
    #[inline]
    pub(super) fn word_mut(&mut self) -> Option<&mut u64> {
        match self {
            Self::ShortWord { word, .. } | Self::LongWord { word, .. } => Some(word),
            _ => None,
        }
    }

    /// Keeps the partition as `entry` from now on, under the same key.
    pub(super) fn set(&mut self, entry: Entry<C>) {
        let next = match (std::mem::replace(self, Self::placeholder()), entry) {
            (Self::ShortWord { len, key, .. } | Self::ShortInstance { len, key, .. }, e) => match e
            {
                Entry::Word(word) => Self::ShortWord { len, key, word },
                Entry::Instance(cell) => Self::ShortInstance { len, key, cell },
            },
            (Self::LongWord { key, .. } | Self::LongInstance { key, .. }, e) => match e {
                Entry::Word(word) => Self::LongWord { key, word },
                Entry::Instance(cell) => Self::LongInstance { key, cell },
            },
        };
        *self = next;
    }

    /// A slot of no one, held for the moment [`Tenant::set`] takes the key out.
    fn placeholder() -> Self {
        Self::ShortWord {
            len: 0,
            key: [0; INLINE],
            word: 0,
        }
    }
}

/// `key` as the length and bytes of a short key, if it is one.
fn short(key: &str) -> Option<(u8, [u8; INLINE])> {
    let bytes = key.as_bytes();
    let len = u8::try_from(bytes.len())
        .ok()
        .filter(|&n| usize::from(n) <= INLINE)?;
    let mut out = [0; INLINE];
    out.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some((len, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_32_bytes_and_keeps_its_key_through_a_change_of_entry() {
        assert_eq!(std::mem::size_of::<Tenant<u64>>(), 32);
        for key in [
            "",
            "acme",
            "tenant-000042",
            "k".repeat(INLINE).as_str(),
            &"k".repeat(INLINE + 1),
            "9f1c6a0e-52b4-4d9e-8f3a-0d6c1e2b7a55",
            "é—ü",
        ] {
            let mut t = Tenant::new(key, Entry::Word(7));
            assert!(t.is(key) && !t.is(&format!("{key}x")));
            assert!(t.key() == key && matches!(t.entry(), EntryRef::Word(7)));
            t.set(Entry::Instance(Arc::new(1u64)));
            assert!(t.is(key) && matches!(t.entry(), EntryRef::Instance(c) if **c == 1));
            assert!(t.word_mut().is_none());
            t.set(Entry::Word(9));
            assert!(t.key() == key && matches!(t.entry(), EntryRef::Word(9)));
            let short = matches!(t, Tenant::ShortWord { .. });
            assert_eq!(short, key.len() <= INLINE, "{key:?}");
        }
    }
}
