//! The live progress line on stderr: current req/s, errors, elapsed and remaining time, redrawn
//! in place a few times per second. Only on a terminal; nothing is drawn when stderr is a pipe or
//! a file, so logs and scripts see the report alone.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::engine::Progress;

/// Redraws at most this often.
const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// Draws [`Progress`] snapshots as one line on stderr.
pub(crate) struct ProgressLine {
    enabled: bool,
    last_draw: Option<Duration>,
    /// (elapsed, responses) at the previous draw, for the current rate.
    last: (Duration, u64),
    drawn: bool,
}

impl ProgressLine {
    /// A line that draws only when stderr is a terminal and `wanted`.
    pub fn new(wanted: bool) -> Self {
        Self {
            enabled: wanted && std::io::stderr().is_terminal(),
            last_draw: None,
            last: (Duration::ZERO, 0),
            drawn: false,
        }
    }

    pub fn update(&mut self, p: &Progress) {
        if !self.enabled || self.last_draw.is_some_and(|t| p.elapsed < t + REDRAW_EVERY) {
            return;
        }
        self.last_draw = Some(p.elapsed);
        let (t0, n0) = self.last;
        let dt = (p.elapsed.saturating_sub(t0)).as_secs_f64();
        let rate = if dt > 0.0 && p.responses >= n0 {
            (p.responses - n0) as f64 / dt
        } else {
            0.0
        };
        self.last = (p.elapsed, p.responses);
        let mut line = format!("  {:>6.1}s", p.elapsed.as_secs_f64());
        if let Some(total) = p.planned {
            line += &format!(
                " / {:.0}s ({:.0}s left)",
                total.as_secs_f64(),
                total.saturating_sub(p.elapsed).as_secs_f64()
            );
        }
        if p.warming_up {
            line += "  warming up";
        }
        line += &format!("  {:>10.0} req/s  {:>10} responses", rate, p.responses);
        if let Some(n) = p.requests {
            line += &format!(" of {n}");
        }
        line += &format!("  {} errors", p.errors);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{line}");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Erases the line before the report is printed.
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}
