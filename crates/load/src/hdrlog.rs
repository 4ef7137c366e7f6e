//! `--hdr-log FILE`: the latency histogram in the standard HdrHistogram interval log format (the
//! Java `HistogramLogWriter`'s: comment lines, `StartTime`/`BaseTime`, the legend, then one
//! `start,length,max,base64(V2 deflate histogram)` line per interval), so that logs from several
//! load machines can be merged and plotted with HistogramLogProcessor and friends.
//!
//! Values are **microseconds**; the `Interval_Max` column is in milliseconds (max value divisor
//! 1000), as HistogramLogProcessor's default output expects. The run is written one interval per
//! [`Report::intervals`] entry (one per second from the CLI), or as one interval covering the
//! measured time when the run kept no intervals.

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::report::Report;

/// Writes `report`'s latency histogram as an interval log that started at `started` (wall clock).
///
/// # Errors
/// The writer's I/O errors, or a histogram that cannot be serialised (reported as
/// `InvalidData`).
pub fn write_log(
    out: &mut impl Write,
    report: &Report,
    started: SystemTime,
    tag: Option<&str>,
) -> io::Result<()> {
    let tag = tag.and_then(Tag::new);
    let mut text = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    // Two writers on one buffer: the crate's writer has no legend line, which Java's readers
    // expect between the header and the intervals.
    IntervalLogWriterBuilder::new()
        .add_comment("lowlat load latency log; values in microseconds")
        .with_start_time(started)
        .with_base_time(started)
        .begin_log_with(&mut text, &mut serializer)?;
    text.extend_from_slice(
        b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
    );
    let mut builder = IntervalLogWriterBuilder::new();
    builder.with_max_value_divisor(1000.0);
    let mut writer = builder.begin_log_with(&mut text, &mut serializer)?;
    let whole = [(Duration::ZERO, report.elapsed, &report.latency)];
    let intervals: Vec<(Duration, Duration, &hdrhistogram::Histogram<u64>)> =
        if report.intervals.is_empty() {
            whole.to_vec()
        } else {
            report
                .intervals
                .iter()
                .map(|i| (i.start, i.length, &i.latency))
                .collect()
        };
    for (start, length, h) in intervals {
        writer
            .write_histogram(h, start, length, tag)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e:?}")))?;
    }
    out.write_all(&text)
}
