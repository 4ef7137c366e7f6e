//! lowlat-bench (being built).

pub mod cli;
