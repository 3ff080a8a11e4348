//! Logging for every subcommand: `--log-level` (a level, or filters as `RUST_LOG` takes them:
//! `info,berth::msg=debug`), `-v` for debug, else `$RUST_LOG`, else info. Lines go to stderr as
//! `[TIME LEVEL TARGET] message`, except the access log's (target `access`), which are written
//! bare so that tools that read nginx's logs (or JSON lines) read them as they are.

use std::io::Write;

use crate::args::LogArgs;

/// Installs the logger, and a panic hook that reports a panic once, through the log (a panic in
/// a job costs only its request).
pub fn init(args: &LogArgs) {
    let filter = args.filter();
    std::panic::set_hook(Box::new(|info| log::error!("panic: {info}")));
    env_logger::Builder::new()
        .parse_filters(&filter)
        .target(env_logger::Target::Stderr)
        .format(|buf, record| {
            if record.target() == berth::app::ACCESS_TARGET {
                return writeln!(buf, "{}", record.args());
            }
            let style = buf.default_level_style(record.level());
            writeln!(
                buf,
                "[{} {style}{:<5}{style:#} {}] {}",
                buf.timestamp(),
                record.level(),
                record.target(),
                record.args()
            )
        })
        .init();
}

/// Crates and targets a bare word of a filter may name (any other bare word must be a level).
const TARGETS: [&str; 4] = [
    "berth",
    "berth_proto",
    "berth_lab",
    berth::app::ACCESS_TARGET,
];

/// `--log-level`: refuses a filter with a directive whose level is not one (env_logger would
/// ignore it, or take it for a module's name: `--log-level dbug` would log nothing, silently).
pub fn check(filter: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let is_level = |l: &str| LEVELS.iter().any(|k| k.eq_ignore_ascii_case(l.trim()));
    // A `/regex` suffix is not supported by this build.
    let spec = filter.split('/').next().unwrap_or_default();
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let ok = match directive.split_once('=') {
            Some((target, level)) => !target.trim().is_empty() && is_level(level),
            // A bare word is a level, or a target logged at every level.
            None => is_level(directive) || directive.contains("::") || TARGETS.contains(&directive),
        };
        if !ok {
            return Err(format!(
                "'{directive}' is not a level (error, warn, info, debug, trace, off) or a \
                 filter like info,berth::msg=debug"
            ));
        }
    }
    if filter.contains('/') {
        return Err("/regex filters are not supported".to_owned());
    }
    Ok(filter.to_owned())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn filters() {
        for good in [
            "info",
            "DEBUG",
            "berth=debug,berth::msg=trace",
            "warn,access=info",
            "off",
        ] {
            assert!(check(good).is_ok(), "{good}");
        }
        for bad in ["dbug", "berth=loud", "=info", "info/x"] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
