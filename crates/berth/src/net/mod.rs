//! Addresses and listening sockets, and the few raw socket calls the drivers need. Nothing here
//! knows about protocols or models.

mod listen;
mod read;

pub use listen::{bind_tcp, reserve_port, BindError, ListenConfig};
pub use read::read_into_spare;
