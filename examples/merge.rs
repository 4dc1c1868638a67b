//! A merge operator: counters updated with blind writes. `Db::merge` writes an operand (here
//! "add n") instead of a value, so an increment needs no read and no transaction; reads and
//! compaction combine the operands with the operator.
//!
//! bloomkv ships `U64Add` (unsigned, wrapping) and `Append`; this example writes its own
//! operator, a signed counter that refuses to overflow, to show the trait.
//!
//! ```sh
//! cargo run --release --example merge
//! ```

use std::sync::Arc;
use std::thread;

use bloomkv::{Db, KeyspaceOptions, MergeOperator, Options, Readable};

/// A signed 64-bit counter: values and operands are `i64` little-endian.
struct Counter;

impl Counter {
    fn decode(bytes: &[u8]) -> Result<i64, String> {
        let bytes = bytes.try_into().map_err(|_| format!("{} bytes, not 8", bytes.len()))?;
        Ok(i64::from_le_bytes(bytes))
    }

    fn sum<'a>(start: i64, operands: impl IntoIterator<Item = &'a [u8]>) -> Result<i64, String> {
        operands.into_iter().try_fold(start, |sum, operand| {
            sum.checked_add(Counter::decode(operand)?).ok_or_else(|| "overflow".to_string())
        })
    }
}

impl MergeOperator for Counter {
    fn name(&self) -> &str {
        "i64-counter"
    }

    /// The value: what lies beneath (none counts as 0) plus every operand.
    fn full_merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Result<Vec<u8>, String> {
        let start = existing.map_or(Ok(0), Counter::decode)?;
        Ok(Counter::sum(start, operands.iter().copied())?.to_le_bytes().to_vec())
    }

    /// Addition is associative, so compaction may fold operands into one before it meets
    /// the value beneath them. `None` (keep them apart) where the sum would overflow.
    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        Counter::sum(0, operands.iter().copied()).ok().map(|n| n.to_le_bytes().to_vec())
    }

    /// A malformed operand is refused when it is written, not found when the key is read.
    fn check_operand(&self, _key: &[u8], operand: &[u8]) -> Result<(), String> {
        Counter::decode(operand).map(drop)
    }
}

fn read(db: &bloomkv::Keyspace, key: &str) -> bloomkv::Result<i64> {
    Ok(db.get(key)?.map_or(0, |v| Counter::decode(&v).expect("counters hold 8 bytes")))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("counters-db");
    let db = Db::open(&path, Options::new())?;
    // The operator belongs to a keyspace (`Options::merge_operator` for the default one). It
    // is not stored in the database: give it again at every open.
    let opts = || KeyspaceOptions::new().merge_operator(Arc::new(Counter));
    let counters = db.keyspace("counters", opts())?;

    // Eight threads count page hits at once: no read, no lock, no conflict to retry.
    thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| -> bloomkv::Result<()> {
                    for i in 0..1000 {
                        let page = if i % 4 == 0 { "/about" } else { "/index" };
                        counters.merge(page, 1i64.to_le_bytes())?;
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| t.join().expect("counting thread"))
    })?;
    println!(
        "after 8000 increments: /index = {}, /about = {}",
        read(&counters, "/index")?,
        read(&counters, "/about")?
    );
    assert_eq!(read(&counters, "/index")?, 6000);
    assert_eq!(read(&counters, "/about")?, 2000);

    // A put sets the value operands add to; negative operands count down.
    counters.put("stock:widgets", 100i64.to_le_bytes())?;
    counters.merge("stock:widgets", (-7i64).to_le_bytes())?;
    assert_eq!(read(&counters, "stock:widgets")?, 93);
    println!("stock:widgets = 93 (set to 100, then 7 taken)");

    // A malformed operand is refused with `Error::Merge`, and nothing is written.
    match counters.merge("/index", b"one") {
        Err(bloomkv::Error::Merge { .. }) => println!("a 3-byte operand is refused"),
        other => return Err(format!("expected Error::Merge, got {other:?}").into()),
    }

    // Flushes and compaction combine operands ahead of reads; the answers do not change.
    db.flush()?;
    db.compact()?;
    assert_eq!(read(&counters, "/index")?, 6000);
    db.close()?;

    // Reopened with the same operator, the counters carry on.
    let db = Db::open(&path, Options::new())?;
    let counters = db.keyspace("counters", opts())?;
    counters.merge("/index", 5i64.to_le_bytes())?;
    println!("after a reopen and 5 more hits: /index = {}", read(&counters, "/index")?);
    assert_eq!(read(&counters, "/index")?, 6005);
    db.close()?;
    Ok(())
}
