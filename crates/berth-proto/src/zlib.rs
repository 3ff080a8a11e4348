//! The one loop that drives zlib-rs's deflate over a slice into a growing `Vec`, shared by
//! HTTP's gzip (`http::encoding`) and WebSocket's permessage-deflate (`ws::deflate`).
//!
//! ```text
//!   input slice ──> Deflate::compress(flush) ──> appended to out (room grown as needed)
//! ```
//!
//! zlib writes into a fixed buffer and says how much it took and made; callers want "all of
//! this input, whatever comes out, appended". The output room is sized for incompressible
//! input (stored blocks cost 5 bytes per 16 KiB) so that one call nearly always suffices.

use zlib_rs::{Deflate, DeflateError, DeflateFlush, Status};

/// Feeds all of `input` to `deflate` with `flush`, appending every byte it makes to `out`.
/// Returns once the input is in and, for [`DeflateFlush::SyncFlush`] or
/// [`DeflateFlush::Finish`], the flush is complete (a finish: at the end of the stream).
pub fn deflate_into(
    deflate: &mut Deflate,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: DeflateFlush,
) -> Result<(), DeflateError> {
    loop {
        // Enough for incompressible input and a flush's or trailer's bytes.
        let room = input.len() + input.len() / 1024 * 5 + 64;
        let start = out.len();
        out.resize(start + room, 0);
        let (in0, out0) = (deflate.total_in(), deflate.total_out());
        let status = deflate.compress(input, &mut out[start..], flush);
        let used = (deflate.total_in() - in0) as usize;
        let made = (deflate.total_out() - out0) as usize;
        out.truncate(start + made);
        input = &input[used..];
        match status {
            Err(e) => return Err(e),
            Ok(Status::StreamEnd) => return Ok(()),
            // Not finishing: done once the input is in and zlib left room unfilled (a flush
            // that filled the room may have more to write).
            Ok(_) if flush != DeflateFlush::Finish && input.is_empty() && made < room => {
                return Ok(())
            }
            Ok(_) => {}
        }
    }
}
