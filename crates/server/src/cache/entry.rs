//! What the store holds under a key ([`Entry`]): a response, or the marker of a response that
//! varies. Its own module, as the store, its disk tier and the file format all name it.

use std::sync::Arc;

use super::object::Object;

/// What is stored under a key.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// A response.
    Object(Arc<Object>),
    /// The responses for this primary key vary on the fields `value` names (a `Vary` value,
    /// combined); their keys hold `id` (see `key::variant`).
    Vary { value: Arc<[u8]>, id: u64 },
}
