//! [`Clock`]: the time expiring values are judged by.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock the database judges expiry by (see `Db::put_with_ttl`), set with
/// `Options::clock`. [`SystemClock`] by default; [`ManualClock`] for tests, which
/// then need no sleeps.
///
/// Reads judge each value by the clock when they meet it (a scan or cursor: when it is
/// created), so a value is never returned from its expiry on. The space of expired values is
/// freed by compaction: the background thread looks for tables worth rewriting after every
/// flush and at least once a minute, so after moving a manual clock a test calls
/// `Db::compact` (or flushes) rather than wait.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds since the Unix epoch. Called by reads that meet an expiring
    /// value, by writes with a time to live and by the background threads (some while they
    /// hold internal locks): it should be quick, must not panic, and must not call into the
    /// database.
    fn now_millis(&self) -> u64;
}

/// The system's wall clock ([`SystemTime::now`]); a time before the epoch reads as 0.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to: for tests of expiry.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use bloomkv::{Db, ManualClock, Options, Readable};
///
/// let clock = Arc::new(ManualClock::new(1_000));
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().clock(clock.clone()))?;
/// db.put_with_ttl("session", "abc", Duration::from_secs(60))?;
/// clock.advance(Duration::from_secs(59));
/// assert!(db.get("session")?.is_some());
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(db.get("session")?, None);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `millis` since the Unix epoch.
    pub fn new(millis: u64) -> Self {
        ManualClock(AtomicU64::new(millis))
    }

    /// Sets the time, in milliseconds since the Unix epoch (it may go back).
    pub fn set(&self, millis: u64) {
        self.0.store(millis, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ =
            self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(t.saturating_add(by)));
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The clock an open database judges expiry by: `Options::clock` held to its
/// high-water mark, the highest time the database has read from it. A clock stepped back
/// (an NTP correction, a manual clock set back) would otherwise make values read as expired
/// readable again until a compaction dropped them; with the mark, time as the database sees
/// it never goes back. The mark is recorded in the manifest (`VersionSet`), so a reopen
/// with the clock set back does not go back either.
#[derive(Debug)]
pub struct MarkedClock {
    clock: Arc<dyn Clock>,
    /// `clock` is the default [`SystemClock`], which views read lazily (`ExpiryTime`).
    system: bool,
    mark: AtomicU64,
}

impl MarkedClock {
    /// `clock`, which is the [`SystemClock`] if `system`, never reading below `mark` (the
    /// recorded mark; 0 for none).
    pub fn new(clock: Arc<dyn Clock>, system: bool, mark: u64) -> Self {
        MarkedClock { clock, system, mark: AtomicU64::new(mark) }
    }

    /// `t`, a reading of the clock, held to the mark, which it raises. Only a reading above
    /// the mark writes it, so readers of a clock that moves once a millisecond mostly share
    /// the mark's cache line without contention.
    #[inline]
    fn raise(&self, t: u64) -> u64 {
        let mark = self.mark.load(Ordering::Relaxed);
        if t <= mark {
            return mark;
        }
        self.mark.fetch_max(t, Ordering::Relaxed).max(t)
    }

    /// Now, as expiry is judged: the clock held to the mark.
    #[inline]
    pub fn now(&self) -> u64 {
        self.raise(self.clock.now_millis())
    }

    /// Now, held to the mark, without raising it: for choices that judge nothing themselves
    /// (which compaction to run), so that looking records nothing a close must write.
    #[inline]
    pub fn peek(&self) -> u64 {
        self.clock.now_millis().max(self.mark())
    }

    /// The highest time read so far.
    pub fn mark(&self) -> u64 {
        self.mark.load(Ordering::Relaxed)
    }
}

impl Clock for MarkedClock {
    #[inline]
    fn now_millis(&self) -> u64 {
        self.now()
    }
}

/// A clock standing at one time: the time a snapshot or a transaction was taken, which its
/// reads judge expiry at so that they are repeatable.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub u64);

impl Clock for FixedClock {
    fn now_millis(&self) -> u64 {
        self.0
    }
}

/// The time a view (an iterator, a cursor) judges expiry at. On the system clock a view
/// reads it the first time it meets a value with an expiry and keeps that time: most views
/// meet none, and the read was a few percent of a short scan. Another clock is read when the
/// view is made: the view holds no handle on it.
#[derive(Debug)]
pub enum ExpiryTime {
    At(u64),
    /// The system clock's time (held to the database's mark) once read, [`UNREAD`] until
    /// then.
    System(AtomicU64, Arc<MarkedClock>),
}

/// What an [`ExpiryTime::System`] holds before the clock is read (the system clock never
/// reads it: it is half a billion years away).
const UNREAD: u64 = u64::MAX;

impl ExpiryTime {
    /// The expiry time of a view made now of a database whose clock is `clock`.
    pub fn of(clock: &Arc<MarkedClock>) -> Self {
        if clock.system {
            ExpiryTime::System(AtomicU64::new(UNREAD), clock.clone())
        } else {
            ExpiryTime::At(clock.now_millis())
        }
    }

    /// The time, read from the system clock on the first call if it was not yet.
    pub fn get(&self) -> u64 {
        match self {
            ExpiryTime::At(t) => *t,
            ExpiryTime::System(at, clock) => match at.load(Ordering::Relaxed) {
                UNREAD => {
                    let now = clock.now_millis().min(UNREAD - 1);
                    at.store(now, Ordering::Relaxed);
                    now
                }
                t => t,
            },
        }
    }
}

impl From<u64> for ExpiryTime {
    fn from(t: u64) -> Self {
        ExpiryTime::At(t)
    }
}

/// `ttl` in whole milliseconds, rounded up (saturating): the clock counts milliseconds, so a
/// time to live of a fraction of one must still outlast the millisecond it is written in,
/// not be cut to an expiry of "now".
pub fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Refuses a zero time to live named `what`: it would write a value expired already, which
/// is never what a caller meant.
pub fn check_ttl(what: &str, ttl: Duration) -> crate::Result<()> {
    if ttl.is_zero() {
        return Err(crate::Error::InvalidArgument(format!("{what} must not be zero")));
    }
    Ok(())
}

/// Whether a value expiring at `expiry` has expired at `now`: from its expiry on.
#[inline]
pub fn expired(expiry: u64, now: u64) -> bool {
    expiry <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_reads_the_system_clock_once_and_keeps_the_time() {
        let of =
            |c: Arc<dyn Clock>, system| ExpiryTime::of(&Arc::new(MarkedClock::new(c, system, 0)));
        let t = of(Arc::new(SystemClock), true);
        assert!(matches!(&t, ExpiryTime::System(at, _) if at.load(Ordering::Relaxed) == UNREAD));
        let before = SystemClock.now_millis();
        let first = t.get();
        assert!(first >= before && first < UNREAD);
        assert_eq!(t.get(), first, "kept, not read again");
        // Another clock is read when the view is made.
        let clock = std::sync::Arc::new(ManualClock::new(42));
        let t = of(clock.clone(), false);
        clock.set(1000);
        assert_eq!(t.get(), 42);
    }

    #[test]
    fn the_marked_clock_never_goes_back() {
        let clock = Arc::new(ManualClock::new(1000));
        let marked = MarkedClock::new(clock.clone(), false, 500);
        assert_eq!(marked.now_millis(), 1000);
        clock.set(10);
        assert_eq!(marked.now_millis(), 1000);
        assert_eq!(marked.mark(), 1000);
        clock.set(2000);
        assert_eq!(marked.now_millis(), 2000);
        let later = MarkedClock::new(clock.clone(), false, 5000);
        assert_eq!(later.now_millis(), 5000, "a recorded mark holds from the start");
    }
}
