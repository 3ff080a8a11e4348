//! `berth bench`: turns the options into a [`BenchConfig`], runs it, prints the report
//! (HTTP/1.1, HTTP/2 with `--h2`, or HTTP/3 with `--h3`).

use berth_lab::bench::{self, BenchConfig, Limit, RequestSpec, Target};

use crate::args::{usage_error, BenchArgs, BENCH_DEFAULT_DURATION};

/// Runs the load and prints the table (or JSON) on stdout.
pub fn run(opts: BenchArgs) -> Result<(), String> {
    let target = Target::parse(&opts.url).unwrap_or_else(|e| usage_error("bench", &e));
    if opts.h3 && target.tls_host.is_none() {
        usage_error(
            "bench",
            "--h3 needs an https:// URL (QUIC has TLS inside; it is UDP to that port)",
        );
    }
    let body = match (&opts.body, &opts.body_string) {
        (Some(path), _) => {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?
        }
        (None, Some(s)) => s.clone().into_bytes(),
        (None, None) => Vec::new(),
    };
    let request = RequestSpec {
        method: opts.method.clone(),
        headers: opts.headers.clone(),
        body,
    };
    if let Err(e) = request.validate() {
        usage_error("bench", &e);
    }
    let config = BenchConfig {
        target,
        request,
        connections: opts.connections.get(),
        threads: opts.threads.get(),
        limit: match (opts.requests, opts.duration) {
            (Some(n), _) => Limit::Requests(n),
            (None, d) => Limit::Duration(d.unwrap_or(BENCH_DEFAULT_DURATION)),
        },
        keep_alive: !opts.no_keepalive,
        pipeline: opts.pipeline.get(),
        timeout: opts.timeout,
        progress: !opts.json && BenchConfig::stderr_is_terminal(),
        ca: opts.ca.clone(),
        http2_streams: opts.h2.then_some(opts.streams.get()),
        http3_streams: opts.h3.then_some(opts.streams.get()),
    };
    let report = bench::run(&config)?;
    if opts.json {
        println!("{:#}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    // A run where nothing was answered measured nothing: say so in the exit code too.
    if report.tally.responses == 0 {
        return Err(format!(
            "no request to {} was answered ({} errors)",
            config.target.url,
            report.tally.errors.total()
        ));
    }
    Ok(())
}
