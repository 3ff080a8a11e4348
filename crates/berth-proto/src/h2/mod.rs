//! HTTP/2 (RFC 9113), server side, sans-IO: [`hpack`] for header compression (RFC 7541).
pub mod hpack;
