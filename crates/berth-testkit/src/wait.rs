//! Waits with a deadline: polling a condition, never a sleep that hopes.

use std::thread;
use std::time::{Duration, Instant};

/// Generous bound on anything a test waits for: only a guard against hangs, never a claim about
/// how fast something happens.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Polls `cond` every 2 ms until it holds (true) or `within` passes (false).
pub fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
}
