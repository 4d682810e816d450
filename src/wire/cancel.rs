//! Cancel keys: coldwire gives each client a key of its own and maps a CancelRequest
//! carrying it back to the upstream backend's key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rand::Rng;

use super::startup::CancelKey;

/// Live sessions' cancel keys, each mapped to what is needed to cancel upstream (`T`).
#[derive(Debug)]
pub struct CancelRegistry<T> {
    sessions: Mutex<HashMap<i32, (Bytes, T)>>,
}

impl<T: Clone> Default for CancelRegistry<T> {
    fn default() -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> CancelRegistry<T> {
    /// Issues a fresh key whose secret has `secret_len` random bytes (as long as the
    /// upstream's, so the client's protocol version still fits) and maps it to `target`
    /// until the returned registration is dropped.
    pub fn register(self: &Arc<Self>, secret_len: usize, target: T) -> CancelRegistration<T> {
        let mut rng = rand::rng();
        let mut secret = vec![0u8; secret_len];
        rng.fill(&mut secret[..]);
        let secret = Bytes::from(secret);
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = loop {
            // Positive, like a real process id, and unique among live sessions.
            let pid = rng.random_range(1..i32::MAX);
            if !sessions.contains_key(&pid) {
                break pid;
            }
        };
        sessions.insert(pid, (secret.clone(), target));
        CancelRegistration {
            registry: Arc::clone(self),
            key: CancelKey { pid, secret },
        }
    }

    /// The upstream target of a presented key, if it names a live session and its secret
    /// matches (compared in constant time).
    pub fn lookup(&self, key: &CancelKey) -> Option<T> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let (secret, target) = sessions.get(&key.pid)?;
        constant_time_eq(secret, &key.secret).then(|| target.clone())
    }

    /// Number of live registrations.
    pub fn len(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A session's place in the registry; dropping it forgets the key.
#[derive(Debug)]
pub struct CancelRegistration<T: Clone> {
    registry: Arc<CancelRegistry<T>>,
    key: CancelKey,
}

impl<T: Clone> CancelRegistration<T> {
    /// The key to hand to the client in BackendKeyData.
    pub fn key(&self) -> &CancelKey {
        &self.key
    }
}

impl<T: Clone> Drop for CancelRegistration<T> {
    fn drop(&mut self) {
        self.registry
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key.pid);
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_back_until_dropped() {
        let registry = Arc::new(CancelRegistry::<&str>::default());
        let a = registry.register(4, "a");
        let b = registry.register(4, "b");
        assert_ne!(a.key().pid, b.key().pid);
        assert_eq!(a.key().secret.len(), 4);
        assert_eq!(registry.lookup(a.key()), Some("a"));
        assert_eq!(registry.lookup(b.key()), Some("b"));
        let mut forged = a.key().clone();
        forged.secret = Bytes::from(forged.secret.iter().map(|b| b ^ 1).collect::<Vec<_>>());
        assert_eq!(registry.lookup(&forged), None);
        let key = a.key().clone();
        drop(a);
        assert_eq!(registry.lookup(&key), None);
        assert_eq!(registry.len(), 1);
    }
}
