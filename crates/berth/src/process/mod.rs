//! The process's life, for every front (`berth serve`, `berth msg serve`, the Python package):
//! termination signals turned into an ordinary blocking call ([`signal`]), and running in the
//! background with a pid file and a log file ([`daemon`]). Neither is a concurrency model, so
//! neither lives under `drive/`; the syscalls themselves are `sys`'s.

pub mod daemon;
pub mod signal;
