//! Who owns which `/mcp` session, and how many there are.
//!
//! rmcp keeps the sessions themselves (and closes one idle for `session_idle_ttl`);
//! this ledger binds each session id to the tenant that opened it, so that one
//! tenant's requests cannot reach another's session (an unknown or foreign id is
//! answered as an unknown session), and bounds how many are open at once. Entries
//! idle for longer than the TTL are dropped, as rmcp drops their sessions.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The session ledger.
#[derive(Debug)]
pub struct Sessions {
    max: usize,
    ttl: Duration,
    open: Mutex<HashMap<String, Owner>>,
}

#[derive(Debug)]
struct Owner {
    tenant: Option<String>,
    seen: Instant,
}

/// Whether a request may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admit {
    /// It may.
    Yes,
    /// The session is unknown, or another tenant's.
    UnknownSession,
    /// A new session would be one too many.
    TooMany(usize),
}

// === impl Sessions ===

impl Sessions {
    /// At most `max` sessions, each forgotten after `ttl` without a request.
    pub fn new(max: usize, ttl: Duration) -> Self {
        Self {
            max,
            ttl,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Checks a request of `tenant` for `session` (`None`: it opens no session yet).
    pub fn check(&self, session: Option<&str>, tenant: Option<&str>) -> Admit {
        let now = Instant::now();
        let mut open = self.open.lock();
        match session {
            Some(id) => match open.get_mut(id) {
                Some(o) if o.tenant.as_deref() == tenant && now - o.seen <= self.ttl => {
                    o.seen = now;
                    Admit::Yes
                }
                _ => Admit::UnknownSession,
            },
            None => {
                if open.len() >= self.max {
                    let ttl = self.ttl;
                    open.retain(|_, o| now - o.seen <= ttl);
                }
                if open.len() >= self.max {
                    Admit::TooMany(self.max)
                } else {
                    Admit::Yes
                }
            }
        }
    }

    /// Records a session opened by `tenant` (refused when the ledger is full).
    pub fn opened(&self, session: &str, tenant: Option<&str>) -> bool {
        let mut open = self.open.lock();
        if open.len() >= self.max {
            return false;
        }
        open.insert(
            session.to_string(),
            Owner {
                tenant: tenant.map(str::to_string),
                seen: Instant::now(),
            },
        );
        true
    }

    /// Forgets a closed session.
    pub fn closed(&self, session: &str) {
        self.open.lock().remove(session);
    }

    /// How many sessions are recorded.
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.open.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_session_belongs_to_its_tenant_and_their_number_is_bounded() {
        let s = Sessions::new(2, Duration::from_secs(60));
        assert_eq!(s.check(None, Some("a")), Admit::Yes);
        assert!(s.opened("s1", Some("a")));
        assert!(s.opened("s2", Some("b")));
        assert_eq!(s.check(Some("s1"), Some("a")), Admit::Yes);
        assert_eq!(s.check(Some("s1"), Some("b")), Admit::UnknownSession);
        assert_eq!(s.check(Some("nope"), Some("a")), Admit::UnknownSession);
        assert_eq!(s.check(None, Some("c")), Admit::TooMany(2));
        assert!(!s.opened("s3", Some("c")));
        s.closed("s2");
        assert_eq!(s.check(None, Some("c")), Admit::Yes);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_are_forgotten_after_the_ttl() {
        let s = Sessions::new(1, Duration::from_secs(60));
        assert!(s.opened("s1", None));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(s.check(Some("s1"), None), Admit::UnknownSession);
        assert_eq!(s.check(None, None), Admit::Yes);
        assert!(s.is_empty());
    }
}
