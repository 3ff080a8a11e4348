//! The Files actor: the one place the actor model opens files. Connection actors send it a
//! [`FileRequest`](berth_proto::http::FileRequest) with their address; it opens the file below
//! the root ([`Files::open`], which refuses every way out of it) and sends back the open file
//! and its metadata. The connection then sends the bytes itself as the pump sends any file body
//! (`sendfile(2)`, or bounded chunks for a transport that cannot), so the
//! file's contents never pass through a message.
//!
//! Seed 002 added it "to coordinate access to the file system": one mailbox serialises every
//! open, which makes the file system a protected resource with one owner. The price is that
//! opens do not run in parallel; they are short (an `openat2` and an `fstat`), and the sends,
//! which are long, do.

use super::connection::{ConnMsg, OpenMsg};
use super::runtime::{Actor, Context};
use crate::files::Files;

/// Owns file-system access for `/files`.
pub(super) struct FilesActor {
    pub files: Files,
}

impl Actor for FilesActor {
    type Msg = OpenMsg;

    fn handle(&mut self, msg: OpenMsg, _: &mut Context<'_, Self>) {
        let found = self.files.open(&msg.request);
        // The connection may have gone meanwhile; the file then closes with the message.
        msg.reply_to.send(ConnMsg::File(msg.stream, msg.request, found));
    }
}
