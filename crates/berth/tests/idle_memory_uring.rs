//! Memory held by idle keep-alive connections in the `uring` driver (issue 19: no more than
//! `evloop`'s, measured the same way in `idle_memory.rs`): its receives go to a ring of
//! provided buffers shared by the loop, and a connection's queues are given back when it goes
//! idle, so an idle connection holds no buffer and no heap of its own; its slot is no bigger
//! than an `evloop` one (`drive::uring`'s unit test). One test in its own binary, so no other
//! test allocates meanwhile.

#[path = "support/counting.rs"]
mod counting;
#[path = "support/idle.rs"]
mod idle;
#[path = "support/server.rs"]
mod server;

use berth::drive::Model;
use server::Opts;

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

#[test]
fn an_idle_uring_connection_holds_no_buffers() {
    let srv = Opts::new(Model::Uring).workers(1).capacity(4096).start();
    // The warm-up also touches the provided buffers: the kernel takes them in ring order, so
    // the loop's 256 are all touched once 256 requests have come (a fixed 4 MiB per loop, not
    // a cost per connection).
    let cost = idle::cost_of_idle(&srv, 300, 1000);
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
