//! The file a response sends after its head (with `sendfile(2)` over HTTP/1.1, read into frames
//! over HTTP/2 and HTTP/3), and the connection-limit places an answer keeps while it is in
//! progress. A leaf of its own, so that the proxy's modules (a forward-auth gate holds a file
//! answer: `proxy::auth_held`) name it without importing the handler.

use std::fs::File;
use std::rc::Rc;

/// A file region to be sent with `sendfile(2)` after the head.
#[derive(Debug)]
pub struct FileBody {
    pub file: Rc<File>,
    pub offset: u64,
    pub len: u64,
    /// The request's places in connection-limit zones, given back when the file is sent.
    pub(crate) slots: Slots,
}

/// A request's places in the connection-limit zones that apply to it (`limit_conn`), kept
/// wherever its answer is still in progress and given back when dropped.
pub(crate) type Slots = Option<Box<[crate::guard::connlimit::Slot]>>;
