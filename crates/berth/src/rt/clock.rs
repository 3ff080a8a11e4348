//! The `Date` header value, formatted at most once a second per I/O thread rather than per
//! response (the same trick nginx and hyper use), and the monotonic time of the same refresh
//! (what HTTP/2 counts its rates and header timeouts by).

use std::io::Write;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use berth_proto::http::DATE_LEN;

/// A cached IMF-fixdate for the current second.
pub struct DateCache {
    bytes: [u8; DATE_LEN],
    second: u64,
    /// When it was last refreshed.
    now: Instant,
}

impl Default for DateCache {
    fn default() -> Self {
        let mut cache = DateCache {
            bytes: [b' '; DATE_LEN],
            second: u64::MAX,
            now: Instant::now(),
        };
        cache.refresh();
        cache
    }
}

impl DateCache {
    /// Reformats the date if the second has changed since the last call. Cheap otherwise: two
    /// vDSO clock reads. Never allocates.
    pub fn refresh(&mut self) {
        self.now = Instant::now();
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if second != self.second {
            self.second = second;
            let mut slot = &mut self.bytes[..];
            // An IMF-fixdate is always exactly DATE_LEN bytes, so this write cannot run short.
            let _ = write!(slot, "{}", httpdate::HttpDate::from(now));
        }
    }

    /// The current value, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    pub fn get(&self) -> &[u8] {
        &self.bytes
    }

    /// The monotonic time of the last refresh.
    pub fn now(&self) -> Instant {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_an_imf_fixdate() {
        let d = DateCache::default();
        let s = std::str::from_utf8(d.get()).unwrap();
        assert!(s.ends_with(" GMT"), "{s}");
        assert!(httpdate::parse_http_date(s).is_ok(), "{s}");
    }
}
