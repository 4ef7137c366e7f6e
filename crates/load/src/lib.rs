//! lowlat-load (being built).

pub mod cli;
