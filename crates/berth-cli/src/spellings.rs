//! Spellings rewritten before clap parses the command line: seed 000's single-dash flags, and
//! the older names of flags that `serve` and `msg serve` now share ([`DEPRECATED`]), each of
//! which still works and prints one note line on stderr naming the new spelling.

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::args::{usage_error, Cli};

/// An older spelling: in subcommand `command` (`"msg serve"`), `old` (`--threads`, `-d`) is now
/// `new` (a long flag).
pub struct Deprecated {
    /// The subcommand, words separated by a space.
    pub command: &'static str,
    /// The old spelling, `--long` or `-s`.
    pub old: &'static str,
    /// Its replacement, `--long`.
    pub new: &'static str,
    /// Why it changed, for the note.
    pub why: &'static str,
}

const SAME_AS_SERVE: &str = "the name serve gives the same idea";
const SERVE_D: &str = "-d means --daemonize in serve and msg serve";
const SERVE_M: &str = "-m means --model in serve";
const SERVE_W: &str = "-w means --worker-threads in serve";
const BENCH_N: &str = "-n means how many to send in bench and msg bench";

/// Every older spelling still understood.
pub const DEPRECATED: &[Deprecated] = &[
    Deprecated {
        command: "msg serve",
        old: "--threads",
        new: "--accept-threads",
        why: SAME_AS_SERVE,
    },
    Deprecated {
        command: "msg serve",
        old: "--capacity",
        new: "--accept-capacity",
        why: SAME_AS_SERVE,
    },
    Deprecated {
        command: "bench",
        old: "-d",
        new: "--duration",
        why: SERVE_D,
    },
    Deprecated {
        command: "bench",
        old: "-m",
        new: "--method",
        why: SERVE_M,
    },
    Deprecated {
        command: "msg bench",
        old: "-d",
        new: "--duration",
        why: SERVE_D,
    },
    Deprecated {
        command: "msg bench",
        old: "-w",
        new: "--window",
        why: SERVE_W,
    },
    Deprecated {
        command: "msg send",
        old: "-w",
        new: "--wait",
        why: SERVE_W,
    },
    Deprecated {
        command: "msg send",
        old: "-n",
        new: "--name",
        why: BENCH_N,
    },
    Deprecated {
        command: "msg listen",
        old: "-n",
        new: "--name",
        why: BENCH_N,
    },
];

/// A flag of another server (or of `python -m berth`) that means something else in berth's
/// CLI: refused with the flag that does what its users mean, rather than with clap's nearest
/// spelling (`--workers` is nearest to `--worker-threads`, threads for slow jobs, not
/// processes).
pub struct Foreign {
    /// The subcommand, words separated by a space.
    pub command: &'static str,
    /// The flag, `--long`.
    pub flag: &'static str,
    /// What to use instead, for the error.
    pub instead: &'static str,
}

/// Every flag refused that way.
pub const FOREIGN: &[Foreign] = &[Foreign {
    command: "serve",
    flag: "--workers",
    instead: "worker processes are --processes N with -m prefork (-w, --worker-threads, are \
              threads for slow jobs); --workers is python -m berth's process count",
}];

/// Rewrites `argv` as clap should read it: seed 000's spellings ([`seed_spellings`]), then
/// every [`DEPRECATED`] spelling into its new one, with a note on stderr for each spelling
/// used (once). Values of options are never rewritten, nor anything after `--`.
pub fn rewrite(argv: Vec<String>) -> Vec<String> {
    let argv = seed_spellings(argv);
    let mut noted = BTreeSet::new();
    let mut words = argv.into_iter();
    let mut out: Vec<String> = words.next().into_iter().collect();
    let root = Cli::command();
    let mut cmd = root.clone();
    let mut path = String::new();
    while let Some(word) = words.next() {
        if word == "--" {
            out.push(word);
            out.extend(words);
            break;
        }
        if !word.starts_with('-') || word == "-" {
            if let Some(sub) = cmd.find_subcommand(&word).cloned() {
                cmd = sub;
                if !path.is_empty() {
                    path.push(' ');
                }
                path.push_str(&word);
            }
            out.push(word);
            continue;
        }
        let flag = word.split('=').next().unwrap_or_default();
        if let Some(f) = FOREIGN.iter().find(|f| f.command == path && f.flag == flag) {
            usage_error(
                &path,
                &format!("unexpected argument '{}': {}", f.flag, f.instead),
            );
        }
        let word = match renamed(&path, &word) {
            Some((d, new)) => {
                if noted.insert((d.command, d.old)) {
                    let short = new_short(&cmd, d.new);
                    eprintln!(
                        "berth: note: '{}' of 'berth {}' is now '{}'{short} ({}); the old \
                         spelling still works, for now",
                        d.old, d.command, d.new, d.why
                    );
                }
                new
            }
            None => word,
        };
        // An option that takes a value given apart (`--name x`, `-n x`): the value goes
        // through as it is, whatever it looks like.
        let apart = takes_value(&cmd, &word) || takes_value(&root, &word);
        out.push(word);
        if apart {
            out.extend(words.next());
        }
    }
    out
}

/// The new spelling of `word` in subcommand `path`, if `word` is an old one (`--threads`,
/// `--threads=4`, `-d`, `-d10s`).
fn renamed(path: &str, word: &str) -> Option<(&'static Deprecated, String)> {
    DEPRECATED
        .iter()
        .filter(|d| d.command == path)
        .find_map(|d| {
            if word == d.old {
                return Some((d, d.new.to_owned()));
            }
            let rest = word.strip_prefix(d.old)?;
            match (d.old.starts_with("--"), rest.strip_prefix('=')) {
                (true, Some(value)) => Some((d, format!("{}={value}", d.new))),
                (true, None) => None,
                (false, _) if !rest.is_empty() => {
                    let value = rest.strip_prefix('=').unwrap_or(rest);
                    Some((d, format!("{}={value}", d.new)))
                }
                (false, _) => None,
            }
        })
}

/// `" (-A)"` if the long flag `long` of `cmd` has a short form.
fn new_short(cmd: &clap::Command, long: &str) -> String {
    let long = long.trim_start_matches('-');
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_short())
        .map(|s| format!(" (-{s})"))
        .unwrap_or_default()
}

/// Whether `word` is an option of `cmd` that takes a value, given without it (`--listen`, not
/// `--listen=x`; `-l`, not `-lx`).
fn takes_value(cmd: &clap::Command, word: &str) -> bool {
    let arg = if let Some(long) = word.strip_prefix("--") {
        if long.contains('=') {
            return false;
        }
        cmd.get_arguments().find(|a| {
            a.get_long() == Some(long)
                || a.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long))
        })
    } else {
        let mut chars = word.chars().skip(1);
        match (chars.next(), chars.next()) {
            (Some(short), None) => cmd.get_arguments().find(|a| a.get_short() == Some(short)),
            _ => None,
        }
    };
    arg.is_some_and(|a| a.get_action().takes_values())
}

/// Rewrites seed 000's single-dash spellings into berth's flags: `-type s|t|f` and
/// `-types/-typet/-typef` become `--model single|threaded|forked`; `-port N` and `-portN` become
/// `--port N`. Arguments given that way without `serve` (`berth -type s`) imply `serve`.
pub fn seed_spellings(args: Vec<String>) -> Vec<String> {
    let model_of = |t: &str| match t {
        "s" => Some("single"),
        "t" => Some("threaded"),
        "f" => Some("forked"),
        _ => None,
    };
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut it = args.into_iter();
    out.extend(it.next());
    let rest: Vec<String> = it.collect();
    if rest
        .first()
        .is_some_and(|a| a.starts_with("-type") || a.starts_with("-port"))
    {
        out.push("serve".to_owned());
    }
    // The seed's spellings belong to serving; other subcommands get their arguments untouched.
    if rest
        .first()
        .is_some_and(|a| matches!(a.as_str(), "bench" | "lab" | "msg"))
    {
        out.extend(rest);
        return out;
    }
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-type" => match rest.next() {
                Some(t) => match model_of(&t) {
                    Some(m) => out.extend(["--model".to_owned(), m.to_owned()]),
                    None => usage_error(
                        "serve",
                        &format!("invalid value '{t}' for '-type': expected s, t or f"),
                    ),
                },
                None => usage_error("serve", "a value is required for '-type': s, t or f"),
            },
            "-types" | "-typet" | "-typef" => out.extend([
                "--model".to_owned(),
                model_of(&arg[5..]).unwrap_or("single").to_owned(),
            ]),
            "-port" => match rest.next() {
                Some(p) => out.extend(["--port".to_owned(), p]),
                None => usage_error("serve", "a value is required for '-port'"),
            },
            a if a.starts_with("-port")
                && a[5..].bytes().all(|b| b.is_ascii_digit())
                && a.len() > 5 =>
            {
                out.extend(["--port".to_owned(), a[5..].to_owned()])
            }
            _ => out.push(arg),
        }
    }
    out
}
