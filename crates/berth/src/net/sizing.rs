//! How many connections a server holds at once and how big the buffers it reads them with
//! are: the two sizes HTTP's models ([`drive::Common`](crate::drive::Common)) and the message
//! engine ([`msg::EngineConfig`](crate::msg::EngineConfig)) both take, defined once here so
//! that they mean the same in both. Their defaults differ, each for a reason given at its
//! constructor ([`ConnSizing::http`], [`ConnSizing::msg`]); the command lines' `-C` sets
//! `capacity` in both to the same 100,000 ([`ConnSizing::HTTP_CAPACITY`]).

/// Most simultaneous connections and the size of each read buffer, for one server or engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSizing {
    /// Most simultaneous connections (`-C`/`--accept-capacity`; `python -m berth`'s
    /// `--limit-concurrency`). One more is refused at once: HTTP answers 503 and closes, the
    /// message engine sends `refused capacity`, and both count it. Each event loop's slab and
    /// timing wheel are made for this many, so it is a cap per loop (per accept thread, per
    /// engine thread) wherever a model runs several; `drive::Common` says which.
    pub capacity: usize,
    /// Bytes of each read buffer (and, in HTTP, each write buffer): what one read may bring.
    /// Buffers are pooled and go back to the pool once their bytes are handled, so this is not
    /// memory every idle connection holds.
    pub buffer_size: usize,
}

impl ConnSizing {
    /// `capacity` of [`ConnSizing::http`], and of both command lines' `-C` (`serve`, `msg
    /// serve`: one vocabulary, one default).
    pub const HTTP_CAPACITY: usize = 100_000;

    /// HTTP's: 100,000 connections and 16 KiB buffers. HTTP connections are many and mostly
    /// idle (keep-alive), and one busy with a request keeps its buffers until it is answered,
    /// so they are kept small: 16 KiB holds a usual request head in one read.
    pub const fn http() -> ConnSizing {
        ConnSizing {
            capacity: Self::HTTP_CAPACITY,
            buffer_size: 16 * 1024,
        }
    }

    /// The message engine's, for an engine made in code (`EngineConfig::default()`: Rust's
    /// `msg::Engine`, Python's `berth.Core` and `berth.fi`, FI-ASockIOCore's API): 10,000
    /// clients and 64 KiB reads. A read buffer is lent for one read and taken back at once
    /// (the engine keeps what a message needs apart from it), so its size costs nothing per
    /// client, and 64 KiB brings a whole message of up to 64 KiB in one read (a longer one
    /// held whole is read straight into its own buffer). 10,000 is a program's engine among
    /// its own clients (FI-ASockIOCore's use) rather than a server's: `msg serve` takes
    /// HTTP's 100,000 per thread (`-C`), as `serve` does.
    pub const fn msg() -> ConnSizing {
        ConnSizing {
            capacity: 10_000,
            buffer_size: 64 * 1024,
        }
    }
}
