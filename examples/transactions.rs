//! Optimistic transactions: money moves between accounts from several threads at once with
//! `Db::transact`, which retries a transaction whose reads another commit changed, and an
//! application error (an overdraft) that aborts a transaction without writing anything.
//!
//! ```sh
//! cargo run --release --example transactions
//! ```

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use bloomkv::{Db, Options, Readable, Transaction};

/// The application's error: `transact` needs `From<bloomkv::Error>` so that `?` works on the
/// transaction's own calls as well as on the application's checks.
#[derive(Debug)]
enum BankError {
    Db(bloomkv::Error),
    Overdrawn { account: String, balance: u64, wanted: u64 },
    NoSuchAccount(String),
}

impl From<bloomkv::Error> for BankError {
    fn from(e: bloomkv::Error) -> Self {
        BankError::Db(e)
    }
}

impl fmt::Display for BankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BankError::Db(e) => write!(f, "database: {e}"),
            BankError::Overdrawn { account, balance, wanted } => {
                write!(f, "{account} holds {balance}, cannot pay {wanted}")
            }
            BankError::NoSuchAccount(account) => write!(f, "no account {account}"),
        }
    }
}

impl std::error::Error for BankError {}

fn balance(tx: &Transaction, account: &str) -> Result<u64, BankError> {
    let value = tx.get(account)?.ok_or_else(|| BankError::NoSuchAccount(account.into()))?;
    let bytes = value[..].try_into().map_err(|_| BankError::NoSuchAccount(account.into()))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Moves `amount` from `from` to `to`, atomically; returns what `from` holds after.
fn transfer(
    db: &Db,
    from: &str,
    to: &str,
    amount: u64,
    attempts: &AtomicUsize,
) -> Result<u64, BankError> {
    // The closure may run more than once: if a key it read was changed by another commit
    // before this one, the commit fails with a conflict and `transact` runs it again on a
    // fresh view (up to `bloomkv::TRANSACT_ATTEMPTS` times). Its only effect outside the
    // transaction is a counter, so running it again is harmless.
    db.transact(|tx| {
        attempts.fetch_add(1, Ordering::Relaxed);
        let source = balance(tx, from)?;
        let left = source.checked_sub(amount).ok_or_else(|| BankError::Overdrawn {
            account: from.into(),
            balance: source,
            wanted: amount,
        })?;
        let target = balance(tx, to)?;
        tx.put(from, left.to_le_bytes())?;
        tx.put(to, (target + amount).to_le_bytes())?;
        Ok(left)
    })
}

fn total(db: &Db) -> Result<u64, BankError> {
    // A transaction is also a consistent view: all balances at one moment.
    let tx = db.transaction();
    let mut sum = 0;
    for item in tx.prefix("acct:") {
        let (_, value) = item?;
        sum += u64::from_le_bytes(value[..].try_into().expect("8-byte balances"));
    }
    Ok(sum)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path(), Options::new())?;

    let accounts = ["acct:alice", "acct:bob", "acct:carol", "acct:dave"];
    for account in accounts {
        db.put(account, 1_000u64.to_le_bytes())?;
    }
    println!("4 accounts with 1000 each; total {}", total(&db)?);

    // Four threads each make 200 transfers around the ring of accounts, on the same keys: a
    // commit that loses a race to another is retried (how often depends on timing).
    let attempts = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..4 {
            let (db, attempts) = (&db, &attempts);
            s.spawn(move || {
                for i in 0..200 {
                    let from = accounts[(t + i) % 4];
                    let to = accounts[(t + i + 1) % 4];
                    match transfer(db, from, to, 3, attempts) {
                        Ok(_) | Err(BankError::Overdrawn { .. }) => {}
                        Err(e) => panic!("transfer failed: {e}"),
                    }
                }
            });
        }
    });
    let attempts = attempts.load(Ordering::Relaxed);
    println!(
        "800 transfers took {attempts} attempts ({} retried after a conflict)",
        attempts - 800
    );
    let sum = total(&db)?;
    println!("total after the transfers: {sum}");
    assert_eq!(sum, 4_000, "transactions never create or lose money");

    // A race made on purpose: on its first run, the transaction's account is changed by
    // another writer after the transaction read it. The commit sees the conflict, and
    // `transact` runs the closure again on a fresh view, which sees that write.
    let runs = AtomicUsize::new(0);
    let left = db.transact(|tx| {
        let balance = balance(tx, "acct:carol")?;
        if runs.fetch_add(1, Ordering::Relaxed) == 0 {
            db.put("acct:carol", (balance + 100).to_le_bytes())?; // the other writer: a deposit
        }
        tx.put("acct:carol", (balance - 50).to_le_bytes())?;
        Ok::<_, BankError>(balance - 50)
    })?;
    let carol = u64::from_le_bytes(db.get("acct:carol")?.expect("carol")[..].try_into()?);
    println!("a withdrawal raced with a deposit: {} runs, carol holds {carol}", runs.into_inner());
    assert_eq!(carol, left, "the withdrawal was applied to the balance after the deposit");
    // Take back the deposit and the withdrawal, so that the total checked below is unchanged.
    db.put("acct:carol", (carol - 50).to_le_bytes())?;

    // An application error aborts the transaction: nothing it wrote is committed.
    let counter = AtomicUsize::new(0);
    match transfer(&db, "acct:alice", "acct:bob", 1_000_000, &counter) {
        Err(e @ BankError::Overdrawn { .. }) => println!("refused: {e}"),
        other => return Err(format!("expected an overdraft, got {other:?}").into()),
    }
    match transfer(&db, "acct:alice", "acct:mallory", 1, &counter) {
        Err(e @ BankError::NoSuchAccount(_)) => println!("refused: {e}"),
        other => return Err(format!("expected a missing account, got {other:?}").into()),
    }
    assert_eq!(total(&db)?, 4_000);

    // Without `transact`: a transaction by hand, committed once. A conflict then comes back
    // as `Error::Conflict` for the caller to handle.
    let mut tx = db.transaction();
    let alice = balance(&tx, "acct:alice")?;
    db.put("acct:alice", (alice + 1).to_le_bytes())?; // a write the transaction did not see
    tx.put("acct:alice", (alice + 10).to_le_bytes())?;
    match tx.commit() {
        Err(bloomkv::Error::Conflict) => println!("a hand-made transaction saw a conflict"),
        other => return Err(format!("expected a conflict, got {other:?}").into()),
    }

    db.close()?;
    Ok(())
}
