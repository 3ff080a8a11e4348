//! HTTP/1.1, sans-IO: the server side here, and in [`client`] the response reader that
//! `berth bench` uses to find where each response ends.
//!
//! A [`Session`] owns the per-connection protocol state (where in a request it is, whether a job
//! is outstanding, whether the connection must close). The driver owns the byte buffers and
//! lends them to [`Session::process`] each time bytes arrive; the session parses as many
//! complete requests as the input holds, hands each to a [`Handler`], and appends the responses
//! to the output buffer. Requests are answered strictly in order, which is what makes
//! pipelining correct: while a job is outstanding, later requests wait in the input buffer.
//!
//! Call order for a driver (the steps are [`Action`]'s, every codec's; HTTP/1.1 answers one
//! request at a time, so each names stream 0):
//! 1. append bytes read from the peer to `input`, then call [`Session::process`];
//! 2. write out `output` whatever the returned [`Action`] is;
//! 3. on [`Action::Offload`], run the job (on a worker) and pass its [`Reply`] to
//!    [`Session::complete`], then go back to 1 (leftover pipelined input is processed then);
//! 4. on [`Action::Flush`], drain `output` and call `process` again;
//! 5. on [`Action::Close`], write out `output`, then close the connection;
//! 6. on [`Action::Open`], open the file it names under the server's root (see [`files`]) and
//!    pass what was found to [`Session::file`];
//! 7. on [`Action::Body`], write out `output`, then that range of the file just opened
//!    (encoded through a [`BodyEncoder`] if the step says [`Encode`]), then call `process`
//!    again;
//! 8. on [`Action::Stream`], write out `output`, then the streamed body as its producer yields
//!    it ([`Streamed::take`]) until it ends, then call `process` again;
//! 9. on [`Action::Switched`], write out `output` (the 101) and take the protocol the
//!    connection now speaks ([`Session::take_handover`]): the protocol switch does
//!    ([`Core`](crate::switch::Core)).
//!
//! Framing follows RFC 9112 strictly: anything ambiguous (Content-Length together with
//! Transfer-Encoding, differing Content-Lengths, malformed chunk sizes, obs-fold, bare LF) is
//! answered 400 and the connection closed, so berth cannot be used to smuggle requests past a
//! proxy that reads the framing differently.

mod action;
mod chunked;
pub mod client;
pub mod encoding;
pub(crate) mod exchange;
pub mod feed;
pub mod files;
mod framing;
pub(crate) mod hand_off;
pub(crate) mod handler;
pub(crate) mod head;
pub(crate) mod intake;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod session;
pub mod stream;

pub use crate::settings::{Limits, Timeouts};
pub use action::Action;
pub use encoding::{Accepted, BodyEncoder, Coding, Compress, EncodeError, Encoder};
pub use feed::{Fed, Feeding, Passed, Taps};
pub use files::{content_type, BadPath, Encode, FileError, FileMeta, FileRequest};
pub use hand_off::Pulled;
pub use handler::{Context, Handled, Handler, Job};
/// A request's header field, as [`Request::headers`] holds them (httparse's, parsed in place).
pub use httparse::Header;
pub use request::{Method, ReqHead, Request, Version};
pub use response::{
    check_trailers, reason_phrase, BadTrailer, FileSource, Reply, ReplyFile, Response,
};
pub use session::{Phase, Session};
pub use stream::{
    body_stream, Answer, BodyStream, Gone, Popped, Respond, StreamWriter, Streamed, Taken,
};

/// Length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only Date format berth sends.
pub const DATE_LEN: usize = 29;
