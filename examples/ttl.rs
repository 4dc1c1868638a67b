//! Values that expire: `put_with_ttl` for one value, a keyspace's `default_ttl` for every
//! plain put into it, and a `ManualClock` so the example moves time forward instead of
//! waiting for it (tests of code built on bloomkv can do the same).
//!
//! ```sh
//! cargo run --release --example ttl
//! ```

use std::sync::Arc;
use std::time::Duration;

use bloomkv::{Db, KeyspaceOptions, ManualClock, Options, Readable};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Expiry is judged by the database's clock: the system clock unless one is given. A
    // `ManualClock` starts where it is told (milliseconds) and moves only when told to.
    let clock = Arc::new(ManualClock::new(1_000_000));
    let db = Db::open(dir.path(), Options::new().clock(clock.clone()))?;

    // One value with its own time to live, next to one without.
    db.put_with_ttl("otp:alice", "493817", Duration::from_secs(300))?;
    db.put("user:alice", "Alice")?;
    println!("one-time password stored for 5 minutes");

    // A keyspace whose plain puts all expire an hour after they are written.
    let sessions = db.keyspace(
        "sessions",
        KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(3600))),
    )?;
    sessions.put("s-1", "alice")?;
    clock.advance(Duration::from_secs(1800));
    sessions.put("s-2", "bob")?; // written half an hour later, so it expires later too
    println!("two sessions, opened 30 minutes apart, each living an hour");

    clock.advance(Duration::from_secs(60)); // 31 minutes in
    assert_eq!(db.get("otp:alice")?, None);
    assert_eq!(db.get("user:alice")?.as_deref(), Some(&b"Alice"[..]));
    println!("after 31 minutes: the password has expired, the user has not");

    clock.advance(Duration::from_secs(30 * 60)); // 61 minutes in
    assert_eq!(sessions.get("s-1")?, None);
    assert_eq!(sessions.get("s-2")?.as_deref(), Some(&b"bob"[..]));
    // Scans skip expired values as reads do.
    assert_eq!(sessions.range(..).count(), 1);
    println!("after 61 minutes: session s-1 has expired, s-2 lives on");

    // Writing the key again starts its time to live again.
    sessions.put("s-2", "bob")?;
    clock.advance(Duration::from_secs(45 * 60));
    assert!(sessions.get("s-2")?.is_some());
    println!("s-2, refreshed, is still there 45 minutes later");

    // Expired values stop being read at once; their space comes back when compaction
    // rewrites the tables that hold them (in the background, or now with `compact`).
    clock.advance(Duration::from_secs(3600));
    db.compact()?;
    let dropped = db.stats().compaction_expired_dropped;
    println!("compaction dropped {dropped} expired values");
    assert!(dropped >= 2);
    assert_eq!(sessions.range(..).count(), 0);

    db.close()?;
    Ok(())
}
