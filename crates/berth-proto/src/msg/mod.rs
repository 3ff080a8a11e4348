//! The message protocol, sans-IO: FI-ASockIOCore's frames and handshake with berth's compatible
//! extensions. The wire format is specified in `docs/msg-protocol.md`; this module is its
//! implementation, and `testdata/msg/` holds the vectors both are checked against.

pub mod frame;
pub mod handshake;
pub mod name;
pub mod policy;
pub mod session;

pub use frame::{FrameDecoder, FrameError, MessageReader, Piece};
pub use handshake::{Ending, Keyword, Refusal};
pub use name::{BadName, Name, NameRule};
pub use policy::{Admission, Listener, NameTaken, Peer, Policy, Rule, Transport};
pub use session::{Event, ServerSession};
