//! What a driver does next for a connection, whatever the protocol: one set of steps for
//! every codec (HTTP/2's connection returns them as they are; HTTP/1.1's session's own steps
//! are mapped onto them by the protocol switch, which settles an upgrade inside).

use super::{FileRequest, Streamed};

/// What a driver does next for a connection: every codec's step, as the protocol switch
/// ([`Core`](crate::switch::Core)) gives it with an HTTP/1.1 upgrade settled inside, and as HTTP/2's connection
/// returns it. Whatever it is, the output is written first (or, for `Offload` and `Open`,
/// meanwhile).
#[derive(Debug, PartialEq, Eq)]
pub enum Action<J> {
    /// Wait for more input (or the deadline, [`Core::poll_timeout`](crate::switch::Core::poll_timeout)).
    Read,
    /// The output passed the high-water mark: write it, then call [`Core::process`](crate::switch::Core::process) again.
    Flush,
    /// Run `job` and pass its reply to [`Core::complete`](crate::switch::Core::complete) with `stream`: 0 where one request
    /// is answered at a time; a stream's id where many may be out at once (the connection goes
    /// on reading and answering meanwhile, [`Core::many_jobs_out`](crate::switch::Core::many_jobs_out)).
    Offload {
        /// The stream the reply answers.
        stream: u64,
        /// The job.
        job: J,
    },
    /// Open the file the request names (under the server's root, never outside it) and pass
    /// what was found to [`Core::file`](crate::switch::Core::file) with `stream` (as for `Offload`).
    Open {
        /// The stream the file answers.
        stream: u64,
        /// The file asked for.
        request: FileRequest,
    },
    /// The response's body is a body source, not output: `len` bytes from `offset` of the
    /// file just passed to [`Core::file`](crate::switch::Core::file) (or taken from a reply's [`ReplyFile`](super::ReplyFile)).
    /// Where one body goes out at a time, the pump sends them after the output, then calls
    /// [`Core::process`](crate::switch::Core::process) again; how is its choice (`sendfile(2)`, or read and written in
    /// bounded chunks). Where many do ([`Core::pulls_bodies`](crate::switch::Core::pulls_bodies)), the pump keeps the file for
    /// `stream`, calls [`Core::process`](crate::switch::Core::process) again, and reads it when asked ([`Action::Pull`]).
    Body {
        /// The stream the body is for (0 where one request is answered at a time).
        stream: u64,
        /// First byte to send.
        offset: u64,
        /// How many bytes.
        len: u64,
        /// Encode them on the way ([`BodyEncoder`](super::BodyEncoder)): a file compressed on the fly.
        encode: Option<super::Encode>,
    },
    /// `stream` may take the next bytes of the body the pump keeps for it ([`Action::Body`]):
    /// at most `max` plain bytes, or one piece of its encoder's output. Read them and pass
    /// them to [`Core::pulled`](crate::switch::Core::pulled), which frames and sends them as the windows allow.
    Pull {
        /// The stream whose body is read.
        stream: u64,
        /// The most plain bytes it may take now.
        max: usize,
    },
    /// The response's body is streamed by a producer. Where one body goes out at a time, the
    /// pump sends what [`Streamed::take`] yields after the output until it ends, then calls
    /// [`Core::process`](crate::switch::Core::process) again. Where many do ([`Core::pulls_bodies`](crate::switch::Core::pulls_bodies)), the pump keeps it for
    /// `stream`, has the producer wake it ([`Streamed::on_data`], then [`Core::poke`](crate::switch::Core::poke)), calls
    /// [`Core::process`](crate::switch::Core::process) again, and reads it when asked ([`Action::Pull`]).
    Stream {
        /// The stream the body is for (0 where one request is answered at a time).
        stream: u64,
        /// The producer, framing as the protocol needs.
        streamed: Streamed,
    },
    /// The connection now speaks another protocol (the output holds the 101): call
    /// [`Core::process`](crate::switch::Core::process) again, which hands the input left behind the request to it.
    Switched,
    /// Write the output, then close the connection. Later input is ignored.
    Close,
}
