//! A small service around one database: worker threads share a `Db`, serve requests from a
//! queue, pick the durability of each write, and close the database gracefully on shutdown.
//!
//! ```sh
//! cargo run --release --example service
//! ```

use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use bloomkv::{Db, Error, Options, Readable, WriteBatch, WriteOptions};

/// What clients ask the service; each request carries the channel its answer goes back on.
enum Request {
    /// An order: it must survive power loss once acknowledged, so it is written with `sync`.
    PlaceOrder { user: u32, order: u32, item: String, reply: mpsc::Sender<bloomkv::Result<()>> },
    /// A page view: losing the last few in a power cut is fine, so it is not synced.
    RecordView { user: u32, page: String, reply: mpsc::Sender<bloomkv::Result<()>> },
    /// How many orders a user has.
    CountOrders { user: u32, reply: mpsc::Sender<bloomkv::Result<usize>> },
}

fn serve(db: &Db, request: Request) {
    // A failed reply means the client went away: nothing to do about it here.
    match request {
        Request::PlaceOrder { user, order, item, reply } => {
            // The order and its index entry go in one atomic batch: after a crash either both
            // are there or neither.
            let mut batch = WriteBatch::new();
            batch.put(format!("order/{order:08}"), &item);
            batch.put(format!("user/{user:04}/order/{order:08}"), "");
            let _ = reply.send(db.write(&batch, &WriteOptions::new().sync(true)));
        }
        Request::RecordView { user, page, reply } => {
            // `WriteOptions::default()` follows `Options::sync_writes` (off here): the write
            // survives a process crash at once, and power loss after the next fsync.
            let key = format!("views/{user:04}/{page}");
            let _ = reply.send(db.put(key, "1"));
        }
        Request::CountOrders { user, reply } => {
            let prefix = format!("user/{user:04}/order/");
            let count = db.prefix(prefix).try_fold(0, |n, item| item.map(|_| n + 1));
            let _ = reply.send(count);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("service-db");

    // Unsynced writes by default (the fast path); writes that must survive power loss ask for
    // `sync` one by one. `Options::sync_writes(true)` would make every write synced.
    let opts = Options::new().sync_writes(false).memtable_bytes(4 << 20);
    let db = Arc::new(Db::open(&path, opts)?);
    println!("opened {}", path.display());

    // The directory is locked while the database is open: a second process (or a second
    // handle in this one) is refused rather than allowed to corrupt it.
    match Db::open(&path, Options::new()) {
        Err(Error::Locked { .. }) => println!("a second open is refused: the database is locked"),
        other => return Err(format!("expected Error::Locked, got {other:?}").into()),
    }

    // Workers share one `Db` (it is `Send + Sync`) and one request queue.
    let (requests, queue) = mpsc::channel::<Request>();
    let queue = Arc::new(Mutex::new(queue));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (db, queue) = (Arc::clone(&db), Arc::clone(&queue));
            thread::spawn(move || loop {
                // The lock is held only to take one request, not while serving it.
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                match next {
                    Ok(request) => serve(&db, request),
                    Err(mpsc::RecvError) => break, // every sender is gone: shut down
                }
            })
        })
        .collect();

    // Clients: each places orders and records views, waiting for every answer.
    let clients: Vec<_> = (0..8u32)
        .map(|user| {
            let requests = requests.clone();
            thread::spawn(move || -> bloomkv::Result<()> {
                for i in 0..25u32 {
                    let (reply, answer) = mpsc::channel();
                    let page = format!("page-{}", i % 5);
                    requests.send(Request::RecordView { user, page, reply }).expect("service up");
                    answer.recv().expect("service answers")?;
                    if i % 5 == 0 {
                        let (reply, answer) = mpsc::channel();
                        let (order, item) = (user * 1000 + i, format!("item {i} for user {user}"));
                        let request = Request::PlaceOrder { user, order, item, reply };
                        requests.send(request).expect("service up");
                        answer.recv().expect("service answers")?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for client in clients {
        client.join().expect("client thread")?;
    }

    let (reply, answer) = mpsc::channel();
    requests.send(Request::CountOrders { user: 3, reply })?;
    let orders = answer.recv()??;
    println!("user 3 placed {orders} orders");
    assert_eq!(orders, 5);

    // Graceful shutdown: stop taking requests, let the workers finish what they hold, then
    // close. `close` stops background work, fsyncs the WAL (so the unsynced views are durable
    // too) and releases the lock; it returns the error that stopped background work, if any.
    drop(requests);
    for worker in workers {
        worker.join().expect("worker thread");
    }
    let stats = db.stats();
    println!(
        "served {} bytes of writes; {} KiB in the WAL, {} flushes",
        stats.user_bytes_written,
        stats.wal_bytes >> 10,
        stats.flushes
    );
    db.close()?;
    println!("closed");

    // Everything acknowledged is there after a reopen, which recovers from the WAL.
    let db = Db::open(&path, Options::new())?;
    let orders = db.prefix("order/").count();
    let views = db.prefix("views/").count();
    println!("reopened: {orders} orders, {views} distinct page views");
    assert_eq!(orders, 8 * 5);
    assert_eq!(views, 8 * 5);
    db.close()?;
    Ok(())
}
