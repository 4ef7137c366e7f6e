//! The `proxy_protocol` check of `lowlat-fuzz-checks` (what it asserts is written there, once, for the
//! fuzzer and for the seed tests alike).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lowlat_fuzz_checks::proxy_protocol::header(data);
});
