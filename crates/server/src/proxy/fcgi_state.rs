//! One FastCGI exchange's state, kept on its upstream connection while it lasts (what the
//! records read so far came to, the file that answers for the application); `fcgi` drives it.
//! Its own module, below both, so that the connection can hold it without importing the code
//! that takes the connection.

use std::fs::File;
use std::path::PathBuf;

use lowlat_http::fastcgi::record::Decoder;

use super::cgi_request::REQUEST_ID;

/// Where one FastCGI exchange is, kept on its connection while it lasts.
#[derive(Debug)]
pub(crate) struct FcgiExchange {
    pub(super) decoder: Decoder,
    /// `FCGI_STDOUT` bytes until the CGI head is whole (and, for a file to send, the head
    /// until the request ends).
    pub(super) head: Vec<u8>,
    /// The head was relayed (or a file will answer): body bytes follow.
    pub(super) head_done: bool,
    /// Body bytes still expected by the `Content-Length` the head gave.
    pub(super) left: Option<u64>,
    /// The application's body is not relayed: a `HEAD` request, a bodiless status, a file
    /// sent instead.
    pub(super) discard: bool,
    /// Part of an `FCGI_STDERR` line.
    pub(super) stderr: Vec<u8>,
    /// The file that answers, once the application asked for one.
    pub(super) file: Option<Box<FileSend>>,
    /// The status that answers when the file it asked for cannot be sent.
    pub(super) file_refused: Option<u16>,
}

/// A file the server sends for the application.
#[derive(Debug)]
pub(crate) struct FileSend {
    pub(super) file: File,
    pub(super) offset: u64,
    pub(super) left: u64,
    /// The file's name, for its `Content-Type`.
    pub(super) path: PathBuf,
}

impl FcgiExchange {
    pub(crate) fn new() -> Self {
        Self {
            decoder: Decoder::new(REQUEST_ID),
            head: Vec::new(),
            head_done: false,
            left: None,
            discard: false,
            stderr: Vec::new(),
            file: None,
            file_refused: None,
        }
    }
}
