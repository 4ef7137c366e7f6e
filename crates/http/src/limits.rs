//! Default limits on what a peer may send. Each is a named constant so that the server's flags,
//! its table in docs/operations.md (Limits) and its tests all start from the same number.

/// Longest request-target accepted (bytes). Longer gets `414 URI Too Long`. nginx's
/// `large_client_header_buffers` allows 8 KiB for the request line; we match it.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Largest request head (request line + header fields + the blank line). Larger gets
/// `431 Request Header Fields Too Large` (or 414 when the request line alone is the cause).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most header fields in one request. More gets 431. Also the size of the stack array the
/// parser fills, so it is a hard ceiling for the `--max-headers` flag.
pub const MAX_HEADERS: usize = 100;

/// Largest request body, after chunked decoding (bytes). Larger gets `413 Content Too Large`.
pub const MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Most bytes of chunked trailer fields accepted (they are read and discarded).
pub const MAX_TRAILER_BYTES: usize = 8 * 1024;
