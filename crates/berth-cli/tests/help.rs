//! Help that is true (issue 44): what `berth --help` and `berth serve --help` say `serve`
//! does, the refusal of another server's `--workers`, and the README's option tables, which
//! must name every flag `--help` lists, with the same defaults, so that they cannot drift.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::run;

/// `serve`'s one-line description, as both helps show it, says what it serves today.
#[test]
fn serve_says_what_it_serves() {
    let (status, top, err) = run(&["--help"]);
    assert_eq!(status.code(), Some(0), "{err}");
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("serve "))
        .unwrap_or_else(|| panic!("no serve line in berth --help:\n{top}"));
    let (status, own, err) = run(&["serve", "--help"]);
    assert_eq!(status.code(), Some(0), "{err}");
    let first = own.lines().next().unwrap_or_default();
    for text in [line, first] {
        for part in ["HTTP/1.1", "HTTP/2", "TLS", "WebSocket", "files", "--site"] {
            assert!(text.contains(part), "{part:?} missing from {text:?}");
        }
        assert!(!text.contains("HTTP/1.1 (the demo routes)"), "{text}");
    }
}

/// `--date-header` is about every response: HTTP/2 answers carry `date` too.
#[test]
fn date_header_help_covers_http2() {
    let (_, out, _) = run(&["serve", "--help"]);
    let help = flag_help(&out, "--date-header");
    assert!(help.contains("HTTP/2"), "{help}");
    assert!(!help.contains("every HTTP/1.1 response"), "{help}");
}

/// `berth serve --workers 2` (gunicorn's, uvicorn's and `python -m berth`'s process count)
/// is refused with berth's way to run processes, not clap's nearest name (`--worker-threads`,
/// which is threads for slow jobs).
#[test]
fn workers_points_to_processes() {
    for args in [
        &["serve", "--workers", "2"][..],
        &["serve", "--workers=2"],
        &["serve", "-p", "0", "--workers", "2"],
    ] {
        let (status, out, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        let first = err.lines().next().unwrap_or_default();
        for part in ["--workers", "--processes", "-m prefork", "python -m berth"] {
            assert!(first.contains(part), "{args:?}: {part:?} missing: {err}");
        }
        assert!(err.contains("Usage: berth serve"), "{err}");
    }
}

/// The flags `--help` of `berth SUBCOMMAND` lists, each with its `[default: ...]` if it says
/// one (`--help` is the flags' own doc comments).
fn help_flags(sub: &[&str]) -> BTreeMap<String, Option<String>> {
    let (status, out, err) = run(&[sub, &["--help"]].concat());
    assert_eq!(status.code(), Some(0), "{sub:?}: {err}");
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in out.lines() {
        let t = line.trim_start();
        if t.starts_with('-') && line.starts_with("  ") && !line.starts_with("          ") {
            let long = t
                .split([' ', ',', '='])
                .find(|w| w.starts_with("--"))
                .map(str::to_owned);
            current = long.clone();
            if let Some(long) = long {
                flags.insert(long, None);
            }
        }
        if let (Some(flag), Some(at)) = (&current, line.find("[default: ")) {
            let rest = &line[at + "[default: ".len()..];
            let value = rest.split(']').next().unwrap_or_default().to_owned();
            flags.insert(flag.clone(), Some(value));
        }
    }
    // Help itself is no option a table needs to explain; a default written in words
    // (`[default: number of CPU cores ...]`) is the table's to word its own way.
    flags.remove("--help");
    for value in flags.values_mut() {
        if value.as_deref().is_some_and(|v| v.contains(' ')) {
            *value = None;
        }
    }
    flags
}

/// The help text of `flag` in `help` (its line and the indented lines under it).
fn flag_help(help: &str, flag: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in help.lines() {
        let t = line.trim_start();
        if t.starts_with('-') && !line.starts_with("          ") {
            inside = t.split([' ', ',']).any(|w| w == flag);
        }
        if inside {
            out.push_str(t);
            out.push(' ');
        }
    }
    assert!(!out.is_empty(), "{flag} not in:\n{help}");
    out
}

/// The rows of the first table after the line `heading` in `file` (under the repository
/// root): each row's flags (the `--long` names in its first cell) and its default cell.
fn table(file: &str, heading: &str) -> Vec<(Vec<String>, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join(file)).expect(file);
    let start = text
        .lines()
        .position(|l| l.trim() == heading)
        .unwrap_or_else(|| panic!("{heading:?} not in {file}"));
    let mut rows = Vec::new();
    let mut seen_table = false;
    for line in text.lines().skip(start + 1) {
        if !line.starts_with('|') {
            if seen_table {
                break;
            }
            continue;
        }
        seen_table = true;
        let cells = split_row(line);
        if cells.len() < 3 || cells[0].starts_with("---") || cells[1] == "default" {
            continue;
        }
        let flags = cells[0]
            .split('`')
            .skip(1)
            .step_by(2)
            .flat_map(|code| code.split([' ', ',', '(', ')']))
            .filter(|w| w.starts_with("--") && *w != "--help")
            .map(str::to_owned)
            .collect();
        rows.push((flags, cells[1].clone()));
    }
    assert!(!rows.is_empty(), "no table after {heading:?} in {file}");
    rows
}

/// A Markdown table row's cells, `\|` inside a cell kept as `|`.
fn split_row(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            c => cell.push(c),
        }
    }
    cells
}

/// Every flag of `berth SUB --help` is in the table, every flag of the table is in the help,
/// and where the help says a default the table's default cell starts with it (a cell of
/// several flags holds their defaults in order, `on, on`).
fn agree(sub: &[&str], file: &str, heading: &str, not_in_help: &[&str]) {
    let help = help_flags(sub);
    let rows = table(file, heading);
    let mut problems = Vec::new();
    let in_table: Vec<&String> = rows.iter().flat_map(|(f, _)| f).collect();
    for flag in help.keys() {
        if !in_table.contains(&flag) {
            problems.push(format!("{flag}: in --help, not in the table"));
        }
    }
    for (flags, default) in &rows {
        let defaults: Vec<&str> = default.split(", ").collect();
        for (i, flag) in flags.iter().enumerate() {
            let Some(said) = help.get(flag) else {
                if !not_in_help.contains(&flag.as_str()) {
                    problems.push(format!("{flag}: in the table, not in --help"));
                }
                continue;
            };
            let Some(said) = said else { continue };
            let cell = match defaults.len() == flags.len() {
                true => defaults[i],
                false => default.as_str(),
            };
            let cell = cell.trim_matches('`');
            let said = said.trim_matches('"');
            if !cell.starts_with(said) {
                problems.push(format!(
                    "{flag}: the table says {cell:?}, --help [default: {said}]"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{file} ({heading}) and berth {} --help disagree:\n{}",
        sub.join(" "),
        problems.join("\n")
    );
}

#[test]
fn the_serve_table_agrees_with_help() {
    agree(
        &["serve"],
        "docs/serve.md",
        "## `berth serve` options",
        // The other spelling of --max-body-size, listed in its row.
        &["--max-body"],
    );
}

#[test]
fn the_msg_serve_table_agrees_with_help() {
    agree(
        &["msg", "serve"],
        "docs/messages.md",
        "## `berth msg serve` options",
        &["--threads", "--capacity"],
    );
}

#[test]
fn the_bench_table_agrees_with_help() {
    agree(
        &["bench"],
        "docs/measuring.md",
        "## `berth bench` options",
        &[],
    );
}
