//! Memory advice: `madvise(2)`.

/// Asks the kernel to back the spare capacity of `buf` with transparent huge pages
/// (`MADV_HUGEPAGE`, which this kernel applies only where asked: `enabled` is `madvise`). A
/// large buffer about to be filled then takes one page fault per 2 MiB instead of per 4 KiB,
/// which is most of the cost of filling fresh memory. Advice only: the result is ignored.
pub(crate) fn advise_huge_pages(buf: &mut Vec<u8>) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let end = start + buf.capacity();
    let from = start.next_multiple_of(PAGE);
    let to = end & !(PAGE - 1);
    if to <= from {
        return;
    }
    // SAFETY: the range lies inside `buf`'s allocation (rounded inwards to whole pages), which
    // `buf` keeps alive for the call; MADV_HUGEPAGE changes how pages are backed, never their
    // contents or whether they are mapped.
    unsafe {
        libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
    }
}
