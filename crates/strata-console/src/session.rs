//! Server-side sessions: the cookie holds only a random id; the access
//! key's secret stays in this process's memory, never in a cookie, a URL
//! or a log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use strata_client::Credentials;
use strata_types::Clock;

/// The session cookie's name.
pub const COOKIE: &str = "strata_console";

/// One signed-in user.
#[derive(Clone)]
pub struct Session {
    /// The key they signed in with (the console signs its calls with it).
    pub creds: Credentials,
    /// Whether the key is an admin key (sees every page).
    pub admin: bool,
    /// The key's name, for the page header.
    pub name: String,
    /// The token every state-changing form carries back.
    pub csrf: String,
    /// When the session ends unless used again (ms since the epoch).
    pub expires_ms: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret, nor the CSRF token.
        f.debug_struct("Session").field("key", &self.creds.access_key_id).field("admin", &self.admin).field("expires_ms", &self.expires_ms).finish()
    }
}

/// The sessions of one node's console.
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
    idle_ms: u64,
    clock: Arc<dyn Clock>,
}

/// 256 random bits as hex.
pub fn token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Sessions that end after `idle_ms` without a request.
    pub fn new(idle_ms: u64, clock: Arc<dyn Clock>) -> Self {
        Self { by_id: Mutex::new(HashMap::new()), idle_ms, clock }
    }

    /// Starts a session; its id (the cookie's value).
    pub fn start(&self, creds: Credentials, admin: bool, name: String) -> String {
        let id = token();
        let now = self.clock.now_ms();
        let mut m = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.retain(|_, s| s.expires_ms > now);
        m.insert(id.clone(), Session { creds, admin, name, csrf: token(), expires_ms: now.saturating_add(self.idle_ms) });
        id
    }

    /// The live session `id` names, its idle time restarted; `None` if it
    /// never existed, ended or expired.
    pub fn get(&self, id: &str) -> Option<Session> {
        let now = self.clock.now_ms();
        let mut m = self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match m.get_mut(id) {
            Some(s) if s.expires_ms > now => {
                s.expires_ms = now.saturating_add(self.idle_ms);
                Some(s.clone())
            }
            Some(_) => {
                m.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends a session.
    pub fn end(&self, id: &str) {
        self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }

    /// Sessions alive now.
    pub fn count(&self) -> usize {
        let now = self.clock.now_ms();
        self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().filter(|s| s.expires_ms > now).count()
    }
}

/// Whether two tokens are equal, in time that does not depend on where
/// they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials { access_key_id: "AK".into(), secret_access_key: "SECRET".into() }
    }

    #[test]
    fn a_session_expires_when_idle_and_ends_on_sign_out() {
        let clock = Arc::new(strata_types::ManualClock::new(1_000));
        let s = Sessions::new(60_000, clock.clone());
        let id = s.start(creds(), true, "ops".into());
        assert_eq!(id.len(), 64);
        assert!(s.get(&id).is_some());
        clock.advance(59_000);
        assert!(s.get(&id).is_some(), "use restarts the idle time");
        clock.advance(59_000);
        assert!(s.get(&id).is_some());
        clock.advance(60_001);
        assert!(s.get(&id).is_none(), "expired");
        let id = s.start(creds(), false, String::new());
        s.end(&id);
        assert!(s.get(&id).is_none(), "signed out");
        assert!(s.get("forged").is_none());
    }

    #[test]
    fn debug_output_holds_no_secret() {
        let clock = Arc::new(strata_types::ManualClock::new(1));
        let s = Sessions::new(1_000, clock);
        let id = s.start(creds(), false, String::new());
        let text = format!("{:?}", s.get(&id).unwrap());
        assert!(!text.contains("SECRET") && text.contains("AK"), "{text}");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
    }
}
