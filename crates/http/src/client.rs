//! The client side of the codec: parsing response heads and delimiting response bodies, for the
//! load generator. Like the rest of the crate it does no I/O and borrows from the caller's buffer.
