//! Key layout: which Redis key holds which quota instance.
//!
//! ```text
//! {prefix}{<tag>}<kind>:<len>:<path>[:<tenant>]
//! toolgate:{3f9a0c1d2e4b5a69}g:26:tools.lookup_customer.rate
//! toolgate:{3f9a0c1d2e4b5a69}s:14:pools.crm.rate:acme
//! ```
//!
//! - `<tag>` is a Redis Cluster hash tag shared by every quota that one call can touch:
//!   the tools and pools linked by `pools = [...]` form one *slot group* (a connected
//!   component), named after its first pool (or, for a tool without pools, after the
//!   tool) and hashed to 16 hex digits so that no name can break the braces. All of a
//!   call's keys — tool, pools, tokens, tenant partitions — thus live in one slot, which
//!   is what lets one script check and charge them atomically in a cluster.
//! - `<kind>` is `g` (bucket string), `s` (sliding-window sorted set) or `c` (concurrency
//!   lease sorted set), so a changed `window` never meets a key of the wrong type.
//! - `<len>:<path>` is the quota's config path, length-prefixed so that the optional
//!   `:<tenant>` suffix of a partition can never be confused with another path.

use std::collections::BTreeMap;

use toolgate::config::Config;

/// The hash tag of every tool and pool, by name.
#[derive(Debug, Default)]
pub(crate) struct SlotGroups {
    tools: BTreeMap<String, String>,
    pools: BTreeMap<String, String>,
}

// === impl SlotGroups ===

impl SlotGroups {
    /// Groups the tools and pools of `config` into connected components.
    pub(crate) fn new(config: &Config) -> Self {
        // Union-find over nodes: pools first (0..p), then tools.
        let pools: Vec<&String> = config.pools.keys().collect();
        let tools: Vec<&String> = config.tools.keys().collect();
        let mut parent: Vec<usize> = (0..pools.len() + tools.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        for (ti, name) in tools.iter().enumerate() {
            for pool in &config.tools[*name].pools {
                if let Ok(pi) = pools.binary_search(&pool) {
                    let (a, b) = (root(&mut parent, pi), root(&mut parent, pools.len() + ti));
                    // The smaller index (a pool, or the first tool) names the group.
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let label = |i: usize| {
            if i < pools.len() {
                format!("p:{}", pools[i])
            } else {
                format!("t:{}", tools[i - pools.len()])
            }
        };
        let mut groups = Self::default();
        for i in 0..pools.len() + tools.len() {
            let tag = format!("{:016x}", fnv1a(label(root(&mut parent, i)).as_bytes()));
            if i < pools.len() {
                groups.pools.insert(pools[i].clone(), tag);
            } else {
                groups.tools.insert(tools[i - pools.len()].clone(), tag);
            }
        }
        groups
    }

    /// The hash tag of a tool (and so of its pools).
    pub(crate) fn tool(&self, name: &str) -> &str {
        self.tools.get(name).map_or("", String::as_str)
    }

    /// The hash tag of a pool.
    pub(crate) fn pool(&self, name: &str) -> &str {
        self.pools.get(name).map_or("", String::as_str)
    }

    /// Number of distinct slot groups.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        let mut tags: Vec<&String> = self.tools.values().chain(self.pools.values()).collect();
        tags.sort_unstable();
        tags.dedup();
        tags.len()
    }
}

/// The key of a quota (without its tenant suffix).
pub(crate) fn quota_key(prefix: &str, tag: &str, kind: char, path: &str) -> String {
    format!("{prefix}{{{tag}}}{kind}:{}:{path}", path.len())
}

/// The key of one tenant's partition of a quota.
pub(crate) fn partition_key(base: &str, tenant: &str) -> String {
    format!("{base}:{tenant}")
}

/// FNV-1a, 64 bit: a stable hash (the same in every process and version).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> Config {
        Config::from_toml_str(toml).expect("valid config")
    }

    #[test]
    fn tools_sharing_a_pool_share_a_slot_and_others_do_not() {
        let c = config(
            r#"
            [pools.crm]
            rate = "1/s"
            [pools.billing]
            rate = "1/s"
            [tools.a]
            pools = ["crm"]
            [tools.b]
            pools = ["crm", "billing"]
            [tools.c]
            pools = ["billing"]
            [tools.d]
            rate = "1/s"
            "#,
        );
        let g = SlotGroups::new(&c);
        assert_eq!(g.tool("a"), g.tool("b"));
        assert_eq!(g.tool("b"), g.tool("c"));
        assert_ne!(g.tool("a"), g.tool("d"));
        assert_eq!(g.count(), 2);
        // Named after the first pool of the group, so adding tools keeps the tag.
        assert_eq!(g.tool("a"), format!("{:016x}", fnv1a(b"p:billing")));
    }

    #[test]
    fn keys_are_length_prefixed_and_tagged() {
        let k = quota_key("toolgate:", "00ff", 'b', "tools.x.rate");
        assert_eq!(k, "toolgate:{00ff}b:12:tools.x.rate");
        assert_eq!(
            partition_key(&k, "acme"),
            "toolgate:{00ff}b:12:tools.x.rate:acme"
        );
    }
}
