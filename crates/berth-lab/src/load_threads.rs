//! A run's load threads, started and stopped the same way for both load generators: the
//! connections dealt out over the threads, the count [`Budget`] they draw from, the wait for
//! the run's end (its time, or every thread done) with a progress line once a second, and the
//! threads' tallies collected. What a thread does with its connections is the caller's.

use std::io::{self, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// Units of work (requests, messages) still to start when a run is bounded by count; with no
/// bound, every `take` is granted. Shared by all load threads, so a count-bounded run does
/// exactly N however the connections are spread.
#[derive(Debug, Default)]
pub(crate) struct Budget(Option<AtomicU64>);

impl Budget {
    /// `Some(n)`: n units in all; `None`: no bound (the run ends on time).
    pub(crate) fn new(count: Option<u64>) -> Budget {
        Budget(count.map(AtomicU64::new))
    }

    /// Whether the run is bounded by count (and so ends when the budget is spent).
    pub(crate) fn is_bounded(&self) -> bool {
        self.0.is_some()
    }

    /// Takes up to `want` units; 0 once the budget is spent.
    pub(crate) fn take(&self, want: u64) -> u64 {
        match &self.0 {
            None => want,
            Some(b) => {
                // A compare-exchange loop rather than fetch_sub, so the count never goes
                // below zero and no thread is granted units another already took.
                let mut left = b.load(Relaxed);
                loop {
                    let n = left.min(want);
                    if n == 0 {
                        return 0;
                    }
                    match b.compare_exchange_weak(left, left - n, Relaxed, Relaxed) {
                        Ok(_) => return n,
                        Err(now) => left = now,
                    }
                }
            }
        }
    }

    /// Returns units taken but neither done nor failed, so that another connection does them.
    pub(crate) fn give_back(&self, n: u64) {
        if let (Some(b), true) = (&self.0, n > 0) {
            b.fetch_add(n, Relaxed);
        }
    }
}

/// How a run's threads are set up.
pub(crate) struct Threads {
    /// Threads to start, at least 1 and at most one per connection.
    pub count: usize,
    /// Connections over all threads.
    pub connections: usize,
    /// Thread `t` is named `{name}-{t}`, which is what `top -H` and a debugger show.
    pub name: &'static str,
    /// How long the run lasts when it is bounded by time; `None` waits for every thread.
    pub duration: Option<Duration>,
}

impl Threads {
    /// `requested` threads for `connections` connections: at least one thread, and no more
    /// than one per connection, since a thread with no connection would only idle.
    pub(crate) fn new(
        name: &'static str,
        requested: usize,
        connections: usize,
        duration: Option<Duration>,
    ) -> Threads {
        Threads {
            count: requested.clamp(1, connections),
            connections,
            name,
            duration,
        }
    }
}

/// The progress line printed to stderr once a second.
pub(crate) struct Progress<F: FnMut() -> String> {
    /// Whether to print it at all (only worth it on a terminal).
    pub show: bool,
    /// What follows the elapsed time on the line, from the counts the threads published.
    pub counts: F,
    /// Columns blanked when the run ends: at least the longest line, so none is left behind.
    pub width: usize,
}

/// Starts `threads.count` threads, each running `work` on its share of the connections (a
/// range of connection indices, counted across all threads), waits for the run's end, sets
/// `stop`, and returns every thread's result with the run's wall time. Fails if a thread
/// could not start, panicked, or could not run its load.
pub(crate) fn run<T: Send>(
    threads: &Threads,
    stop: &AtomicBool,
    mut progress: Progress<impl FnMut() -> String>,
    work: impl Fn(Range<usize>) -> io::Result<T> + Sync,
) -> Result<(Vec<T>, Duration), String> {
    let (count, connections) = (threads.count, threads.connections);
    let work = &work;
    let started = Instant::now();
    let (results, elapsed) = std::thread::scope(|s| {
        let mut first = 0;
        let handles: Vec<_> = (0..count)
            .map(|t| {
                // Connections are dealt out as evenly as they go.
                let share = connections / count + usize::from(t < connections % count);
                let conns = first..first + share;
                first += share;
                std::thread::Builder::new()
                    .name(format!("{}-{t}", threads.name))
                    .spawn_scoped(s, move || work(conns))
            })
            .collect();
        watch(threads.duration, &mut progress, started, &handles);
        let elapsed = started.elapsed();
        stop.store(true, Relaxed);
        let results: Result<Vec<_>, String> = handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|_| "a load thread panicked".to_owned())?
                    .map_err(|e| format!("load thread failed: {e}")),
                Err(e) => Err(format!("cannot start a load thread: {e}")),
            })
            .collect();
        (results, elapsed)
    });
    Ok((results?, elapsed))
}

/// Waits for the run's end (its time, or every thread done), printing progress if asked.
fn watch<T>(
    duration: Option<Duration>,
    progress: &mut Progress<impl FnMut() -> String>,
    started: Instant,
    handles: &[io::Result<ScopedJoinHandle<'_, T>>],
) {
    let deadline = duration.map(|d| started + d);
    let all_done = || {
        handles
            .iter()
            .all(|h| h.as_ref().map_or(true, |h| h.is_finished()))
    };
    let mut next_line = started + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || all_done() {
            break;
        }
        let mut wake = next_line;
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        // Short naps so a count-bounded run ends promptly after its last answer.
        std::thread::sleep(
            wake.saturating_duration_since(now)
                .min(Duration::from_millis(20)),
        );
        if Instant::now() >= next_line {
            next_line += Duration::from_secs(1);
            if progress.show {
                let _ = write!(
                    std::io::stderr(),
                    "\r  {:>5.1} s  {}",
                    started.elapsed().as_secs_f64(),
                    (progress.counts)()
                );
            }
        }
    }
    if progress.show {
        let _ = write!(std::io::stderr(), "\r{:1$}\r", "", progress.width);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_budget_grants_exactly_its_count() {
        let b = Budget::new(Some(5));
        assert!(b.is_bounded());
        assert_eq!((b.take(3), b.take(3), b.take(3)), (3, 2, 0));
        b.give_back(1);
        assert_eq!(b.take(4), 1);
        let unbounded = Budget::new(None);
        assert!(!unbounded.is_bounded());
        assert_eq!(unbounded.take(7), 7);
    }

    #[test]
    fn connections_are_dealt_out_evenly_and_counted_across_threads() {
        let threads = Threads::new("test", 3, 8, None);
        let progress = Progress {
            show: false,
            counts: String::new,
            width: 0,
        };
        let stop = AtomicBool::new(false);
        let (shares, _) = run(&threads, &stop, progress, Ok).unwrap();
        assert_eq!(shares, [0..3, 3..6, 6..8]);
        assert!(stop.load(Relaxed));
        assert_eq!(Threads::new("test", 9, 2, None).count, 2);
        assert_eq!(Threads::new("test", 0, 2, None).count, 1);
    }
}
