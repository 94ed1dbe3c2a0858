//! A small in-process cache of upstream observations with a time-to-live.
//!
//! Machines that may serve an earlier observation (VM04's optional 60000 ms cache) store the
//! observation here with the instant it was made, and state the age they served. Only
//! successful observations are stored, so a failure is always retried on the next call.
//! Nothing is persisted: a restart starts empty.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Entries kept at most; the keys of the frozen venue set are far fewer.
const MAX_ENTRIES: usize = 512;

#[derive(Debug, Clone, Default)]
pub struct TtlCache {
    entries: Arc<Mutex<HashMap<String, (Instant, Value)>>>,
}

/// A cached observation and how old it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub value: Value,
    pub age: Duration,
}

impl TtlCache {
    /// The observation stored under `key` if it is younger than `ttl`.
    pub fn get(&self, key: &str, ttl: Duration) -> Option<Hit> {
        let entries = self.entries.lock().ok()?;
        let (at, value) = entries.get(key)?;
        let age = at.elapsed();
        (age < ttl).then(|| Hit {
            value: value.clone(),
            age,
        })
    }

    /// Stores an observation made now, evicting expired entries when full.
    pub fn put(&self, key: &str, value: Value, ttl: Duration) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(key.to_string(), (Instant::now(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_their_ttl() {
        let cache = TtlCache::default();
        let ttl = Duration::from_millis(40);
        cache.put("k", Value::from(1), ttl);
        let hit = cache.get("k", ttl).expect("fresh");
        assert_eq!(hit.value, Value::from(1));
        assert!(hit.age < ttl);
        assert_eq!(cache.get("other", ttl), None);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(cache.get("k", ttl), None);
    }
}
