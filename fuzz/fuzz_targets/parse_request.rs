//! The request parser on arbitrary bytes: never panics, and a complete head never claims more
//! bytes than it was given.
#![no_main]

use lowlat_http::request::{header_slots, parse_request, HeadLimits};
use lowlat_http::Status;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut slots = header_slots();
    if let Ok(Status::Complete(req)) = parse_request(data, &mut slots, &HeadLimits::default()) {
        assert!(req.head_len <= data.len());
    }
});
