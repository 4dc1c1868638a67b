//! The one lock helper every layer uses.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a lock poisoned by a panic: every state behind these locks is
/// replaced whole (never left half-applied), so a poisoned one is still consistent.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
