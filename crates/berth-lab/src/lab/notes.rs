//! What the table and the chart both say beside the numbers: errors by kind with their known
//! causes as numbered notes, servers left out of a shape and why, and numbers with thousands
//! separators.

use crate::bench::Errors;

use super::{LabReport, Row};

/// Why `single` shows read errors: said once, referred to from every row it explains.
const SINGLE_READS: &str = "single serves one connection at a time and lets an idle \
    keep-alive connection go as soon as another client waits (by design: no client waits \
    behind an idle one). A request the load generator sent on such a connection just as it was \
    let go gets no answer there; the generator counts a read error and reconnects.";

/// The known cause of a row's errors, if there is one.
pub fn cause(row: &Row) -> Option<&'static str> {
    let e = &row.report.tally.errors;
    (row.server == "single" && e.read > 0 && e.read * 2 >= e.total()).then_some(SINGLE_READS)
}

/// The notes of a report, numbered from 1 in the order first needed.
pub struct Notes {
    texts: Vec<&'static str>,
}

impl Notes {
    /// Every cause the rows of `r` need, in table order.
    pub fn of(r: &LabReport) -> Notes {
        let mut texts = Vec::new();
        for row in &r.rows {
            if let Some(text) = cause(row) {
                if !texts.contains(&text) {
                    texts.push(text);
                }
            }
        }
        Notes { texts }
    }

    /// `[1]` for the row's cause, or nothing.
    pub fn marker(&self, row: &Row) -> String {
        cause(row)
            .and_then(|c| self.texts.iter().position(|t| *t == c))
            .map_or(String::new(), |i| format!(" [{}]", i + 1))
    }

    /// `(1, text)` for each note.
    pub fn list(&self) -> impl Iterator<Item = (usize, &'static str)> + '_ {
        self.texts.iter().enumerate().map(|(i, t)| (i + 1, *t))
    }
}

/// `12,345 read, 3 timeout`: the kinds that happened, most first; empty if none.
pub fn error_kinds(e: &Errors) -> String {
    let mut kinds = [
        (e.connect, "connect"),
        (e.read, "read"),
        (e.write, "write"),
        (e.timeout, "timeout"),
        (e.status, "non-2xx"),
        (e.protocol, "protocol"),
    ];
    kinds.sort_by_key(|k| std::cmp::Reverse(k.0));
    kinds
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, kind)| format!("{} {kind}", thousands(*n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The servers `r` left out of shape `shape`, with why: `nginx (serves ... only)`.
pub fn not_run(r: &LabReport, shape: &str) -> Vec<String> {
    r.not_run
        .iter()
        .filter(|n| n.shape == shape)
        .map(|n| format!("{} ({})", n.server, n.why))
        .collect()
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A measurement for a label: separators from 1,000 up, no decimals from 100 up, two below 1,
/// one below 100.
pub fn figure(v: f64) -> String {
    if !v.is_finite() {
        "-".to_owned()
    } else if v >= 100.0 {
        thousands(v.round() as u64)
    } else if v >= 1.0 || v == 0.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_and_figures() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_499_850), "1,499,850");
        assert_eq!(figure(141_858.4), "141,858");
        assert_eq!(figure(407.2), "407");
        assert_eq!(figure(4.38), "4.4");
        assert_eq!(figure(0.97), "0.97");
        assert_eq!(figure(0.0), "0.0");
    }

    #[test]
    fn kinds_most_first() {
        let e = Errors {
            read: 8123,
            timeout: 3,
            ..Errors::default()
        };
        assert_eq!(error_kinds(&e), "8,123 read, 3 timeout");
        assert_eq!(error_kinds(&Errors::default()), "");
    }
}
