//! One task at a time per ledger row, within this process: concurrent resends of one payment
//! wait for the chain reading or the re-run already under way instead of each doing it.
//! Replicas do not share these locks; across replicas the ledger's conditional updates keep
//! the money right, and only the work may run once per replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// A lock per row id; locks nobody holds or waits on are dropped as others are taken.
#[derive(Default)]
pub(crate) struct RowLocks(Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>);

impl RowLocks {
    /// Waits until no other task holds row `id`, and holds it until the guard is dropped.
    pub(crate) async fn lock(&self, id: i64) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            Arc::clone(locks.entry(id).or_default())
        };
        lock.lock_owned().await
    }
}
