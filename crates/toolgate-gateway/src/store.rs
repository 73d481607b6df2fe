//! Where quota state lives: the `--store` URL.
//!
//! Only the in-memory store exists in this build. The gateway builds its [`Engine`]
//! here, so a shared backend (the Redis store, crate `toolgate-redis`) plugs in at
//! this one place.

use toolgate::{Engine, Policy};

/// A parsed `--store` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Store {
    /// Quota state in this process.
    Memory,
}

/// A store URL this build cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

// === impl Store ===

impl Store {
    /// Parses `memory` or `redis://…`.
    ///
    /// # Errors
    ///
    /// For `redis://` (not available in this build) and any other scheme.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        match url {
            "memory" | "memory://" => Ok(Self::Memory),
            u if u.starts_with("redis://") || u.starts_with("rediss://") => {
                Err(StoreError(format!(
                    "store {:?}: the Redis store is not available in this build of toolgate \
                     (it ships with the toolgate-redis crate); use --store memory",
                    redact(u)
                )))
            }
            other => Err(StoreError(format!(
                "store {:?}: unknown store (expected memory or redis://host:port)",
                redact(other)
            ))),
        }
    }

    /// Builds the engine on this store.
    pub fn engine(&self, policy: Policy) -> Engine {
        match self {
            Self::Memory => Engine::new(policy),
        }
    }
}

/// Hides a password in a URL such as `redis://:secret@host`.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_works_and_redis_says_it_is_not_in_this_build() {
        assert_eq!(Store::parse("memory"), Ok(Store::Memory));
        let e = Store::parse("redis://:pw@127.0.0.1:6379").expect_err("no redis");
        assert!(e.0.contains("not available in this build"), "{e}");
        assert!(!e.0.contains("pw"), "{e}");
    }
}
