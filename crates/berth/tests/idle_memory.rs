//! Memory held by idle keep-alive connections in the `evloop` driver: the process's RSS and
//! the bytes its heap holds, per connection (`support/idle.rs`). One test in its own binary,
//! so no other test allocates meanwhile.

#[path = "support/counting.rs"]
mod counting;
#[path = "support/idle.rs"]
mod idle;
#[path = "support/server.rs"]
mod server;

use server::Opts;

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

#[test]
fn an_idle_keep_alive_connection_holds_no_buffers() {
    // Counts, not speed: 1,000 connections that made one request and went idle may add at most
    // 1 KiB of server memory each (nginx takes about 530 bytes; a pooled 16 KiB read buffer per
    // connection would show as 16 MiB here), and hold nothing on the heap: the slab of slots
    // is allocated up front, and buffers go back to the pool.
    let srv = Opts::evloop().capacity(4096).start();
    let cost = idle::cost_of_idle(&srv, 200, 1000);
    assert!(
        cost.rss <= 1024,
        "{} bytes of RSS per idle connection",
        cost.rss
    );
    assert!(
        cost.heap <= 16,
        "{} heap bytes per idle connection",
        cost.heap
    );
}
