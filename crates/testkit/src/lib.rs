//! What lowlat's integration tests share, so that no test file carries its own copy.
//!
//! - [`alloc`]: a global allocator that counts allocations, for the "nothing allocated per
//!   request once warm" tests.
//! - [`pki`]: certificates made at test time (a CA, leaves it signs, self-signed and expired
//!   ones), written as PEM files a server or client can be pointed at.

pub mod alloc;
pub mod pki;
