//! Latencies as both load generators keep and report them: an HdrHistogram of microseconds per
//! load thread, merged at the end, summarised as a [`Latency`] that renders the same way in the
//! HTTP and the message reports (JSON under `latency_us`, a two-line table in milliseconds), so
//! the two tools' numbers read alike and a change to how they are summarised lands in both.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Longest latency the histogram tracks exactly, in microseconds (an hour); longer ones
/// saturate there rather than being dropped, so a stuck request still counts as slow.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// An empty histogram with the bounds every tally uses (1 µs to an hour, 3 significant
/// digits). One set of bounds for all, so merging two threads' histograms cannot fail.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("constant histogram bounds are valid")
}

/// Records one latency, clamped into the histogram's range (a sub-microsecond answer counts
/// as 1 µs; one slower than the bound saturates).
pub(crate) fn record(h: &mut Histogram<u64>, latency: Duration) {
    h.saturating_record((latency.as_micros() as u64).clamp(1, MAX_LATENCY_US));
}

/// Adds `other`'s counts into `into`.
pub(crate) fn merge(into: &mut Histogram<u64>, other: &Histogram<u64>) {
    // Both histograms come from `histogram()`, with the same bounds, so adding cannot fail.
    let _ = into.add(other);
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Fastest response.
    pub min: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest response.
    pub max: u64,
}

impl Latency {
    /// The summary of `h`; all zero when it is empty, said here rather than left to what each
    /// histogram query happens to answer for no values, so an idle run always reports zeros.
    pub(crate) fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency {
                min: 0,
                mean: 0.0,
                stdev: 0.0,
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                max: 0,
            };
        }
        Latency {
            min: h.min(),
            mean: h.mean(),
            stdev: h.stdev(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }

    /// The summary as the reports' `latency_us` JSON object.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "min": self.min, "mean": self.mean, "stdev": self.stdev, "p50": self.p50,
            "p90": self.p90, "p99": self.p99, "p99_9": self.p999, "max": self.max,
        })
    }

    /// Appends the table's two latency lines: `heading` (which carries its own padding, as
    /// each report aligns it) and the column names, then the values in milliseconds.
    pub(crate) fn write_table(self, out: &mut String, heading: &str) {
        let ms = |us: u64| us as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{heading}{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "min", "avg", "stdev", "p50", "p90", "p99", "p99.9", "max"
        );
        let _ = writeln!(
            out,
            "               {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            ms(self.min),
            self.mean / 1000.0,
            self.stdev / 1000.0,
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        );
    }
}
