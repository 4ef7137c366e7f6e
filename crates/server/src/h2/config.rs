//! HTTP/2's settings and limits, with their defaults (`--h2-*` flags and `h2_*` config keys).

use std::time::Duration;

/// Streams a client may have open at once (nginx: `http2_max_concurrent_streams 128`).
pub const DEFAULT_MAX_STREAMS: u32 = 128;
/// Largest decoded header list of one request (RFC 9113 SETTINGS_MAX_HEADER_LIST_SIZE).
pub const DEFAULT_MAX_HEADER_LIST: u32 = 64 * 1024;
/// The HPACK table the client's encoder may use (the protocol's default).
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;
/// Largest frame payload the client may send (the protocol's default and minimum).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// Each stream's receive window (request bodies); the connection's is raised to fit
/// `max_streams` of them up to 16 MiB.
pub const DEFAULT_INITIAL_WINDOW: u32 = 1 << 20;
/// How long the client has to acknowledge our SETTINGS.
pub const DEFAULT_SETTINGS_TIMEOUT: Duration = Duration::from_secs(10);
/// Control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty DATA/CONTINUATION) a client may
/// send per second before it is told to calm down and cut off.
pub const DEFAULT_MAX_CONTROL_PER_SEC: u32 = 1000;
/// Streams a client may reset per second (CVE-2023-44487, "rapid reset").
pub const DEFAULT_MAX_RESETS_PER_SEC: u32 = 200;

/// HTTP/2 settings and limits.
#[derive(Debug, Clone)]
pub struct H2Config {
    /// Offer `h2` in ALPN on the TLS listeners (preferred over `http/1.1`).
    pub tls: bool,
    /// Accept cleartext HTTP/2 with prior knowledge (a connection that opens with the preface).
    pub h2c: bool,
    pub max_streams: u32,
    pub max_header_list: u32,
    pub header_table_size: u32,
    pub max_frame_size: u32,
    pub initial_window: u32,
    pub settings_timeout: Duration,
    pub max_control_per_sec: u32,
    pub max_resets_per_sec: u32,
}

impl Default for H2Config {
    fn default() -> Self {
        Self {
            tls: true,
            h2c: false,
            max_streams: DEFAULT_MAX_STREAMS,
            max_header_list: DEFAULT_MAX_HEADER_LIST,
            header_table_size: DEFAULT_HEADER_TABLE_SIZE,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            initial_window: DEFAULT_INITIAL_WINDOW,
            settings_timeout: DEFAULT_SETTINGS_TIMEOUT,
            max_control_per_sec: DEFAULT_MAX_CONTROL_PER_SEC,
            max_resets_per_sec: DEFAULT_MAX_RESETS_PER_SEC,
        }
    }
}

/// The `--h2*` flags of `lowlat serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "HTTP/2")]
pub struct H2Args {
    /// Accept cleartext HTTP/2 with prior knowledge on the --listen addresses (h2c)
    #[arg(long)]
    pub h2c: bool,
    /// Do not offer HTTP/2 in ALPN on the --tls-listen addresses (HTTP/1.1 only)
    #[arg(long)]
    pub no_h2: bool,
    /// Streams a client may have open at once; more are refused (REFUSED_STREAM)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STREAMS, value_parser = clap::value_parser!(u32).range(1..))]
    pub h2_max_streams: u32,
    /// Largest decoded header list of a request, else 431
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_u32_size)]
    pub h2_max_header_list: u32,
    /// HPACK dynamic table the client may use
    #[arg(long, value_name = "SIZE", default_value = "4k", value_parser = parse_table_size)]
    pub h2_header_table_size: u32,
    /// Largest frame payload a client may send (16k to 16m - 1)
    #[arg(long, value_name = "SIZE", default_value = "16k", value_parser = parse_frame_size)]
    pub h2_max_frame_size: u32,
    /// Each stream's receive window (how much of a request body may arrive unasked)
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = parse_window)]
    pub h2_initial_window: u32,
    /// Time the client has to acknowledge our SETTINGS
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = lowlat_http::units::parse_positive_duration)]
    pub h2_settings_timeout: Duration,
    /// Control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty frames) per second a client
    /// may send before it is cut off (ENHANCE_YOUR_CALM)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONTROL_PER_SEC, value_parser = clap::value_parser!(u32).range(1..))]
    pub h2_max_control_rate: u32,
    /// Stream resets per second a client may send before it is cut off (rapid reset)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_RESETS_PER_SEC, value_parser = clap::value_parser!(u32).range(1..))]
    pub h2_max_reset_rate: u32,
}

impl H2Args {
    /// The configuration these flags describe.
    #[must_use]
    pub fn to_config(&self) -> H2Config {
        H2Config {
            tls: !self.no_h2,
            h2c: self.h2c,
            max_streams: self.h2_max_streams,
            max_header_list: self.h2_max_header_list,
            header_table_size: self.h2_header_table_size,
            max_frame_size: self.h2_max_frame_size,
            initial_window: self.h2_initial_window,
            settings_timeout: self.h2_settings_timeout,
            max_control_per_sec: self.h2_max_control_rate,
            max_resets_per_sec: self.h2_max_reset_rate,
        }
    }
}

fn parse_bounded(text: &str, min: u64, max: u64) -> Result<u32, String> {
    let n = lowlat_http::units::parse_size(text)?;
    if n < min || n > max {
        return Err(format!("{text:?} must be between {min} and {max} bytes"));
    }
    u32::try_from(n).map_err(|_| format!("{text:?} is too large"))
}

fn parse_u32_size(text: &str) -> Result<u32, String> {
    parse_bounded(text, 1, u64::from(u32::MAX))
}

fn parse_table_size(text: &str) -> Result<u32, String> {
    parse_bounded(text, 0, u64::from(u32::MAX))
}

fn parse_frame_size(text: &str) -> Result<u32, String> {
    parse_bounded(text, 16_384, (1 << 24) - 1)
}

fn parse_window(text: &str) -> Result<u32, String> {
    parse_bounded(text, 65_535, (1 << 31) - 1)
}
