//! Files the engine no longer needs, removed on a thread of their own.
//!
//! Why: removing a file can hold its caller for milliseconds (the file system frees the
//! file's extents and, on a device mounted with online discard, waits for the discard), and
//! the last reference to an obsolete table is usually let go by the compaction or flush
//! thread as it installs a new version. Removed there, the waits kept a core from compacting
//! while writers were held back for that compaction (measured in
//! `docs/results/2026-11-26-write-path.md`, "Obsolete tables removed aside").
//!
//! A removal not yet made loses nothing: no manifest names the file any more, and an open
//! removes such orphans. The thread starts with the first removal and ends when the
//! database closes ([`Deleter::close`], after the removals already queued); a file let go
//! after that — by an iterator that outlived its database — is removed on the thread that
//! lets it go. [`Deleter::wait_idle`] lets an operation that promises a tidy directory
//! (a manual compaction) wait for the queue.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::FileSystem;

/// Removes files on a background thread (see the module documentation).
pub struct Deleter {
    fs: Arc<dyn FileSystem>,
    state: Mutex<State>,
    /// Signalled when a removal is queued, when the queue empties, and on close.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<PathBuf>,
    /// The thread is removing a file taken off the queue.
    removing: bool,
    thread: Option<JoinHandle<()>>,
    /// No more removals are queued: they are made on the caller's thread.
    closed: bool,
}

impl std::fmt::Debug for Deleter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Deleter")
            .field("queued", &s.queue.len())
            .field("removing", &s.removing)
            .field("closed", &s.closed)
            .finish()
    }
}

impl Deleter {
    /// A deleter removing files of `fs`; its thread starts with the first removal.
    pub fn new(fs: Arc<dyn FileSystem>) -> Arc<Deleter> {
        Arc::new(Deleter { fs, state: Mutex::default(), changed: Condvar::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing is left half-done under this lock: a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(|p| p.into_inner())
    }

    /// Removes `path`: on the deleter's thread, or on this one once the deleter is closed
    /// (or when its thread cannot be started). A failed removal leaves an orphan, which the
    /// next open removes.
    pub fn remove(self: &Arc<Self>, path: PathBuf) {
        let mut s = self.lock();
        if !s.closed {
            if s.thread.is_none() {
                // The thread holds the deleter until `close` ends it.
                let me = Arc::clone(self);
                let started = std::thread::Builder::new()
                    .name("bloomkv-delete".into())
                    .spawn(move || me.run());
                if let Ok(handle) = started {
                    s.thread = Some(handle);
                }
            }
            if s.thread.is_some() {
                s.queue.push_back(path);
                self.changed.notify_all();
                return;
            }
        }
        drop(s);
        let _ = self.fs.remove(&path);
    }

    fn run(&self) {
        let mut s = self.lock();
        loop {
            if let Some(path) = s.queue.pop_front() {
                s.removing = true;
                drop(s);
                let _ = self.fs.remove(&path);
                s = self.lock();
                s.removing = false;
                if s.queue.is_empty() {
                    self.changed.notify_all();
                }
            } else if s.closed {
                return;
            } else {
                s = self.wait(s);
            }
        }
    }

    /// Waits until every removal queued so far has been made.
    pub fn wait_idle(&self) {
        let mut s = self.lock();
        while !s.queue.is_empty() || s.removing {
            s = self.wait(s);
        }
    }

    /// Makes the removals already queued, ends the thread, and from then on removes on the
    /// caller's thread. Idempotent.
    pub fn close(&self) {
        let thread = {
            let mut s = self.lock();
            s.closed = true;
            self.changed.notify_all();
            s.thread.take()
        };
        if let Some(t) = thread {
            // `run` never panics but for a bug; the queue is then left to the next open.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::{Fault, FaultFs, OpKind};

    fn touch(fs: &FaultFs, name: &str) -> PathBuf {
        let p = PathBuf::from("/db").join(name);
        fs.create_dir_all(Path::new("/db")).unwrap();
        let mut f = fs.create(&p).unwrap();
        f.append(b"x").unwrap();
        f.sync().unwrap();
        p
    }

    /// Notes the name of each thread that removes a file (a fault that never fires).
    fn note_removers(fs: &FaultFs) -> Arc<Mutex<Vec<String>>> {
        let names = Arc::new(Mutex::new(Vec::new()));
        let noted = names.clone();
        fs.inject(Fault::on(OpKind::Remove).matching(move |_: &Path| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            noted.lock().unwrap().push(name);
            false
        }));
        names
    }

    #[test]
    fn removes_on_its_own_thread_and_waits_for_the_queue() {
        let fs = FaultFs::new();
        let removers = note_removers(&fs);
        let d = Deleter::new(Arc::new(fs.clone()));
        let (a, b, keep) = (touch(&fs, "a"), touch(&fs, "b"), touch(&fs, "keep"));
        d.remove(a);
        d.remove(b);
        d.wait_idle();
        assert_eq!(fs.files(), vec![keep.clone()]);
        assert_eq!(*removers.lock().unwrap(), ["bloomkv-delete", "bloomkv-delete"]);
        d.close();
        // Closed: the caller's thread removes.
        d.remove(keep);
        assert!(fs.files().is_empty());
        let me = std::thread::current().name().unwrap_or("").to_string();
        assert_eq!(removers.lock().unwrap().last(), Some(&me));
    }

    #[test]
    fn close_makes_the_queued_removals_first() {
        let fs = FaultFs::new();
        let d = Deleter::new(Arc::new(fs.clone()));
        for i in 0..50 {
            d.remove(touch(&fs, &format!("f{i}")));
        }
        d.close();
        assert!(fs.files().is_empty());
        d.close();
    }
}
