//! The tenants tracked on one tool: at most a fixed number, the least recently
//! active evicted first, so that a client naming ever new tenants cannot grow it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::tenant::Tenant;

/// How many tenants are tracked per tool.
pub const MAX_TENANTS: usize = 1_000;

/// The tracked tenants of one tool.
#[derive(Debug)]
pub struct Tenants {
    map: HashMap<Arc<str>, Tenant>,
    /// Tenants by their last activity, oldest first.
    order: BTreeMap<u64, Arc<str>>,
    tick: u64,
    cap: usize,
    evicted: u64,
}

// === impl Tenants ===

impl Default for Tenants {
    fn default() -> Self {
        Self::with_cap(MAX_TENANTS)
    }
}

impl Tenants {
    /// Tracks at most `cap` tenants (at least one).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            cap: cap.max(1),
            evicted: 0,
        }
    }

    /// The tenant `name`, now the most recently active, taken in (evicting the least
    /// recently active when full) if it was not tracked.
    pub fn touch(&mut self, name: &str) -> &mut Tenant {
        self.tick += 1;
        let tick = self.tick;
        if let Some((key, t)) = self.map.get_key_value(name) {
            let key = key.clone();
            self.order.remove(&t.tick);
            self.order.insert(tick, key);
        } else {
            if self.map.len() >= self.cap {
                self.evict_oldest();
            }
            let key: Arc<str> = Arc::from(name);
            self.order.insert(tick, key.clone());
            self.map.insert(key, Tenant::default());
        }
        let t = self.map.get_mut(name).expect("just touched");
        t.tick = tick;
        t
    }

    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            self.map.remove(&key);
            self.evicted += 1;
        }
    }

    /// The tenant `name`, if tracked.
    pub fn get(&self, name: &str) -> Option<&Tenant> {
        self.map.get(name)
    }

    /// The tenant `name`, if tracked, without making it more recent.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Tenant> {
        self.map.get_mut(name)
    }

    /// How many tenants are tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no tenant is tracked.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// How many tenants were evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Every tracked tenant, most recently active first.
    pub fn recent(&self) -> impl Iterator<Item = (&str, &Tenant)> {
        self.order
            .values()
            .rev()
            .filter_map(|k| self.map.get(k).map(|t| (&**k, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_active_tenant_is_evicted_first() {
        let mut t = Tenants::with_cap(3);
        for name in ["a", "b", "c"] {
            t.touch(name).admitted += 1;
        }
        t.touch("a");
        t.touch("d");
        assert!(t.get("b").is_none(), "b was the least recently active");
        assert_eq!(t.len(), 3);
        assert_eq!(t.evicted(), 1);
        let order: Vec<&str> = t.recent().map(|(n, _)| n).collect();
        assert_eq!(order, ["d", "a", "c"]);
        assert_eq!(t.get("a").map(|x| x.admitted), Some(1));
        assert_eq!(t.order.len(), t.map.len());
    }
}
