//! The two unit syntaxes of berth's command lines, the same for every flag of every
//! subcommand and of every front (`berth serve`, `berth msg serve`, `python -m berth`, which
//! calls these through the Python package), so that a value means the same everywhere:
//!
//! - a **duration** is a number with a unit, `500ms`, `10s`, `2m`, `1h`, or a bare number of
//!   seconds (`10`, `0.5`), as the flags that took `SECS` always did;
//! - a **size** is a number of bytes with an optional suffix, `1000`, `64k`, `1m`, `1g` (powers of
//!   1024; `64MiB` too), the syntax `--rule NAME:streams=SIZE` shares
//!   ([`berth_proto::msg::policy::parse_size`]).
//!
//! One exception keeps seed 001's meaning: a bare number given to `-D`/`--slow-duration` is
//! milliseconds ([`slow_duration`]).

use std::num::NonZeroUsize;
use std::time::Duration;

/// Longest duration any flag takes: about eleven days.
const MAX_SECS: f64 = 1e6;

/// A duration above zero: `10`, `0.5` (seconds), `500ms`, `10s`, `2m`, `1h`.
pub fn duration(s: &str) -> Result<Duration, String> {
    match duration_or_zero(s)? {
        Duration::ZERO => Err(format!("'{s}' must be more than zero")),
        d => Ok(d),
    }
}

/// Like [`duration`], but zero is allowed (no delay, no warm-up).
pub fn duration_or_zero(s: &str) -> Result<Duration, String> {
    scaled(s, 1.0)
}

/// `-D`/`--slow-duration`: a duration whose bare number is milliseconds (seed 001's `-D 30`);
/// with a unit it reads like any other (`30ms`, `1s`). Zero is allowed.
pub fn slow_duration(s: &str) -> Result<Duration, String> {
    scaled(s, 0.001)
}

/// Parses a duration whose bare number is in units of `bare` seconds.
fn scaled(s: &str, bare: f64) -> Result<Duration, String> {
    let t = s.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, bare)
    };
    match number.parse::<f64>() {
        Ok(v)
            if number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                && (0.0..=MAX_SECS).contains(&(v * scale)) =>
        {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "'{s}' is not a duration (e.g. 10 for seconds, 10s, 500ms, 2m)"
        )),
    }
}

/// A size in bytes, zero allowed: `0`, `1000`, `64k`, `1m`, `1g`.
pub fn size(s: &str) -> Result<u64, String> {
    berth_proto::msg::policy::parse_size(s)
}

/// A size above zero (a limit).
pub fn limit(s: &str) -> Result<u64, String> {
    match size(s)? {
        0 => Err(format!("'{s}' must be more than zero")),
        n => Ok(n),
    }
}

/// A size above zero that fits in memory (`usize`).
pub fn limit_usize(s: &str) -> Result<NonZeroUsize, String> {
    let n = limit(s)?;
    usize::try_from(n)
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// A size that fits in memory, zero allowed.
pub fn size_usize(s: &str) -> Result<usize, String> {
    usize::try_from(size(s)?).map_err(|_| format!("'{s}' is too large"))
}

/// A limit that may be lifted: a size above zero, or `0`/`none`/`unlimited` for no limit
/// (`usize::MAX`), as `--max-body-size` takes it in every front.
pub fn limit_or_none(s: &str) -> Result<usize, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "0" | "none" | "unlimited" => Ok(usize::MAX),
        _ => limit_usize(s).map(NonZeroUsize::get),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (s, d) in [
            ("10", Duration::from_secs(10)),
            ("0.5", Duration::from_millis(500)),
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
        ] {
            assert_eq!(duration(s), Ok(d), "{s}");
        }
        for bad in [
            "", "0", "0s", "-1", "1x", "s", "1e3", "2000000", "inf", "NaN",
        ] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(slow_duration("30"), Ok(Duration::from_millis(30)));
        assert_eq!(slow_duration("1s"), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn sizes() {
        assert_eq!(size("0"), Ok(0));
        assert_eq!(size("64k"), Ok(65536));
        assert_eq!(limit("1m"), Ok(1 << 20));
        assert!(limit("0").is_err());
        assert_eq!(limit_usize("16384").map(NonZeroUsize::get), Ok(16384));
        assert_eq!(size_usize("1g"), Ok(1 << 30));
        assert!(size("1.5m").is_err());
    }
}
