//! Data-block reads on helper threads, so that reads which must wait for the storage device
//! are in flight together instead of queueing one behind another.
//!
//! Why: a disk — here a virtual one — serves several reads at once far faster than one after
//! another. On the 2-core VM the engine is measured on, random 4 KiB reads that miss the page
//! cache ran at 11 k/s one at a time, 25 k/s with four in flight and 46 k/s with sixteen. A
//! `multi_get` of keys whose blocks are in neither the block cache nor the operating system's
//! page cache waits on one such read per key; the pool lets a round's reads wait together.
//! Reads the page cache can answer at once never come here (`Wait::IfResident`):
//! handing a microsecond's copy to another thread would cost more than it saves.
//!
//! The threads start on first use (most databases never need them), block on a channel
//! between jobs, and end when the pool is closed (the database's `close`) or dropped, after
//! the jobs already handed to them; a job handed over later runs on its caller's thread. A
//! job holds only the table it reads from, and every caller waits for all of its jobs, so no
//! job outlives the call that made it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam::channel::{self, Sender};

use super::format::BlockHandle;
use super::reader::{Fetched, Table};
use crate::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads that read data blocks for callers that have several to read.
pub struct ReadPool {
    threads: usize,
    state: Mutex<PoolState>,
    /// Rounds in a row that asked whether blocks could be read without waiting and found
    /// they all could (see [`ReadPool::worth_asking`]).
    quiet_rounds: AtomicU32,
}

#[derive(Default)]
struct PoolState {
    /// The readers' queue, once they are started.
    jobs: Option<Sender<Job>>,
    handles: Vec<JoinHandle<()>>,
    /// Closed: no reader starts again.
    closed: bool,
}

/// Quiet rounds after which [`ReadPool::worth_asking`] mostly says no; while it does, one
/// round in this many still asks, so device reads coming back are noticed.
const QUIET: u32 = 64;

impl std::fmt::Debug for ReadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let started = self.lock().jobs.is_some();
        f.debug_struct("ReadPool")
            .field("threads", &self.threads)
            .field("started", &started)
            .finish()
    }
}

impl ReadPool {
    /// A pool of `threads` readers (at least one), none started yet.
    pub fn new(threads: usize) -> Self {
        ReadPool {
            threads: threads.max(1),
            state: Mutex::new(PoolState::default()),
            quiet_rounds: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A reader's panic poisons nothing here: the state is a queue handle and join handles.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a round of lookups should ask, block by block, whether the read can be had
    /// without waiting for the device, and set aside those that cannot. Asking costs a
    /// little on every read (`preadv2` imports its buffer list: about 65 ns a call here),
    /// which buys nothing while everything is in memory. So after [`QUIET`] rounds in a row
    /// that found nothing to wait for, only one round in `QUIET` asks, until one finds a
    /// block to wait for again. A round told no counts as quiet; a round told yes reports
    /// with [`ReadPool::round_asked`]. Only speed depends on the answer, never what is read.
    pub fn worth_asking(&self) -> bool {
        let quiet = self.quiet_rounds.load(Ordering::Relaxed);
        let ask = quiet < QUIET || quiet % QUIET == 0;
        if !ask {
            self.round_asked(false);
        }
        ask
    }

    /// Reports how a round that asked went: whether any of its blocks had to wait.
    pub fn round_asked(&self, waited: bool) {
        if waited {
            self.quiet_rounds.store(0, Ordering::Relaxed);
        } else {
            let _ = self.quiet_rounds.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                Some(q.wrapping_add(1).max(1))
            });
        }
    }

    /// Reads every block of `reads` (a table and a block of it), all of them in flight at
    /// once up to the pool's size, and returns them in the order given; or the first error
    /// met, once every read has finished.
    pub fn fetch_all(&self, reads: Vec<(Arc<Table>, BlockHandle)>) -> Result<Vec<Fetched>> {
        let n = reads.len();
        // Room for every answer, so no reader ever blocks on a caller that stopped listening.
        let (tx, rx) = channel::bounded(n);
        for (i, (table, handle)) in reads.into_iter().enumerate() {
            let tx = tx.clone();
            self.submit(Box::new(move || {
                let _ = tx.send((i, table.fetch_for_lookup(handle)));
            }));
        }
        drop(tx);
        let mut out: Vec<Option<Fetched>> = vec![None; n];
        let mut first_error = None;
        for _ in 0..n {
            // Every job sends exactly once; the channel closes early only if a reader
            // panicked, and then its sender was dropped unsent.
            let (i, got) = rx.recv().map_err(|_| stopped())?;
            match got {
                Ok(f) => out[i] = Some(f),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Each job answers once, so no slot is empty; were one, the call fails, not panics.
        out.into_iter().collect::<Option<Vec<_>>>().ok_or_else(stopped)
    }

    /// Hands `job` to a reader, starting the readers on first use. Once the pool is closed,
    /// or should no reader be running (the system refused every thread), the caller runs the
    /// job itself.
    fn submit(&self, job: Job) {
        let mut state = self.lock();
        if state.jobs.is_none() && !state.closed {
            let (tx, rx) = channel::unbounded::<Job>();
            for i in 0..self.threads {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new().name(format!("bloomkv-read-{i}")).spawn(
                    move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    },
                );
                if let Ok(h) = spawned {
                    state.handles.push(h);
                }
            }
            state.jobs = Some(tx);
        }
        let unsent = match &state.jobs {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        drop(state);
        if let Some(job) = unsent {
            job();
        }
    }

    /// Stops the readers once they have run the jobs already handed to them, and waits for
    /// them; later jobs run on their callers' threads.
    pub fn close(&self) {
        let handles = {
            let mut state = self.lock();
            state.closed = true;
            // Closing the queue ends each reader's loop once the queue is empty.
            state.jobs = None;
            std::mem::take(&mut state.handles)
        };
        let me = std::thread::current().id();
        for h in handles.into_iter().filter(|h| h.thread().id() != me) {
            let _ = h.join();
        }
    }
}

impl Drop for ReadPool {
    fn drop(&mut self) {
        self.close();
    }
}

fn stopped() -> Error {
    Error::io("reading table blocks", std::io::Error::other("a block-read thread stopped"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(String::from)
    }

    /// Closing waits for the readers to end; a job handed over afterwards runs on the
    /// caller's thread, and the readers do not start again.
    #[test]
    fn closing_joins_the_readers_and_later_jobs_run_on_the_caller() {
        let pool = ReadPool::new(2);
        let (tx, rx) = channel::unbounded();
        let t = tx.clone();
        pool.submit(Box::new(move || t.send(thread_name()).unwrap()));
        assert!(rx.recv().unwrap().is_some_and(|n| n.starts_with("bloomkv-read-")));
        assert_eq!(pool.lock().handles.len(), 2);
        pool.close();
        assert!(pool.lock().handles.is_empty() && pool.lock().jobs.is_none());
        let t = tx.clone();
        pool.submit(Box::new(move || t.send(thread_name()).unwrap()));
        assert_eq!(rx.recv().unwrap(), thread_name());
        assert!(pool.lock().handles.is_empty(), "no reader started after close");
    }

    /// Asking stops paying after `QUIET` rounds with nothing to wait for; then one round in
    /// `QUIET` still asks, and a round that had to wait brings asking back at once.
    #[test]
    fn rounds_stop_asking_while_nothing_waits_and_resume_when_something_does() {
        let pool = ReadPool::new(1);
        let mut asked = 0;
        for _ in 0..QUIET * 10 {
            if pool.worth_asking() {
                asked += 1;
                pool.round_asked(false);
            }
        }
        assert_eq!(asked, QUIET + 9, "every round at first, then one in {QUIET}");
        pool.round_asked(true);
        assert!((0..QUIET).all(|_| {
            let ask = pool.worth_asking();
            pool.round_asked(false);
            ask
        }));
    }
}
