//! openraft's own storage test suite, run against bloomkv-backed stores.

use bloomkv_raft::{LogStore, StateMachine, StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use tempfile::TempDir;

/// Hands the suite a fresh store on its own temporary directory for every test; the
/// directory is the guard, removed when the test is done with the store.
struct FreshStores;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for FreshStores {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let io = |e: &dyn std::fmt::Display| {
            StorageIOError::new(ErrorSubject::Store, ErrorVerb::Write, AnyError::error(e))
        };
        let dir = tempfile::tempdir().map_err(|e| io(&e))?;
        let (log, sm) =
            bloomkv_raft::open(dir.path(), bloomkv::Options::default()).map_err(|e| io(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(FreshStores).expect("openraft's storage suite");
}
