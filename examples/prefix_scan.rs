//! Prefix scans with a prefix extractor: keys are `user:<id>/...`, and most scans read one
//! user's keys. With `PrefixExtractor::UpToDelimiter(b'/')` each table's filter also records
//! the user prefixes it holds, so `prefix("user:42/")` skips every table with none of them.
//!
//! ```sh
//! cargo run --release --example prefix_scan
//! ```

use bloomkv::{Db, Options, PrefixExtractor, Readable};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let user = PrefixExtractor::UpToDelimiter(b'/');
    assert_eq!(user.prefix(b"user:42/order:7"), Some(&b"user:42/"[..]));
    let db = Db::open(dir.path(), Options::new().prefix_extractor(Some(user)))?;

    // Ten batches of users, each flushed to its own table: every table holds 100 users.
    for batch in 0..10u32 {
        for u in batch * 100..(batch + 1) * 100 {
            db.put(format!("user:{u}/name"), format!("user number {u}"))?;
            for order in 0..3 {
                db.put(format!("user:{u}/order:{order}"), format!("{} widgets", order + 1))?;
            }
        }
        db.flush()?;
    }
    let tables: usize = db.stats().tables_per_level.iter().sum();
    println!("4000 keys of 1000 users in {tables} tables");

    // One user's keys, in key order.
    let before = db.stats();
    for item in db.prefix("user:42/") {
        let (key, value) = item?;
        println!("  {} = {}", String::from_utf8_lossy(&key), String::from_utf8_lossy(&value));
    }
    let after = db.stats();
    let skipped = after.prefix_filter_skips - before.prefix_filter_skips;
    let checked = after.prefix_filter_checks - before.prefix_filter_checks;
    println!("the scan checked the prefix filters of {checked} table(s) and skipped {skipped}");

    // A scan whose prefix is longer than the extractor's still uses the filters: all its keys
    // share the prefix "user:42/".
    let orders: Vec<_> = db.prefix("user:42/order:").collect::<bloomkv::Result<_>>()?;
    assert_eq!(orders.len(), 3);

    // A user nobody wrote: the filters rule out (almost) every table without reading one.
    let before = db.stats();
    assert_eq!(db.prefix("user:5000/").count(), 0);
    let skipped = db.stats().prefix_filter_skips - before.prefix_filter_skips;
    println!("a scan for an absent user skipped {skipped} table(s) without reading them");

    // A range inside one prefix is filtered too; reversed, it walks from the end.
    let newest = db.range("user:7/order:"..="user:7/order:~").next_back().transpose()?;
    let (key, _) = newest.ok_or("user 7 has orders")?;
    println!("user 7's last order key: {}", String::from_utf8_lossy(&key));
    assert_eq!(key, b"user:7/order:2");

    // Scans across users (no single prefix) read every table, as without an extractor.
    assert_eq!(db.prefix("user:").count(), 4000);

    db.close()?;
    Ok(())
}
