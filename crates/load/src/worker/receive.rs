//! Reading on a loader connection: one read per readable event, the responses walked in place
//! (HTTP/1.1 through `ResponseReader`, HTTP/2 and WebSocket through their sessions), each
//! latency recorded from its send time, and a server's close or end of stream told from a
//! failure.

use std::io;
use std::time::Instant;

use lowlat_http::client::Step;

use crate::report::ThreadStats;

use super::{held_script, ConnState, Failure, SendTimes, Worker};

impl Worker<'_> {
    /// WebSocket: reads the handshake's answer, then echoes in `self.buf[..n]`; each echo
    /// completes the oldest message in flight (a server answers in order).
    fn consume_ws(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        let conn = &mut self.conns[idx];
        let Some(mut ws) = conn.ws.take() else {
            return Err(Failure::Protocol);
        };
        let was_upgraded = ws.upgraded();
        let mut run = Recorded::empty(now);
        let (mut completed, mut closed, mut stray) = (0, false, false);
        let stats = &mut self.ledger.stats;
        let (measuring, measure_start) = (self.ledger.measuring, self.ledger.measure_start);
        let result = ws.read(&self.buf[..n], |event| match event {
            crate::ws::Event::Upgraded => {}
            crate::ws::Event::Echo => {
                let Some(sent) = conn.sent.pop() else {
                    stray = true;
                    return;
                };
                completed += 1;
                record_uncorrected(
                    stats,
                    conn.actual.as_mut(),
                    measuring && sent >= measure_start,
                    now,
                );
                // An echo counts as a successful response.
                if let Some(mut done) = run.push(sent, 200) {
                    done.flush(stats, measuring, measure_start, now);
                }
            }
            crate::ws::Event::Closed => closed = true,
        });
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let upgraded_now = !was_upgraded && ws.upgraded();
        let answer = ws.has_output();
        conn.ws = Some(ws);
        if let Err(e) = result {
            if self.ledger.stats.ws_error.is_none() {
                let why = match e {
                    crate::ws::WsError::Handshake(why) => format!("WebSocket handshake: {why}"),
                    crate::ws::WsError::Frame => {
                        "a WebSocket frame was refused, or an echo had another length".into()
                    }
                };
                self.ledger.stats.ws_error = Some(format!(
                    "{} {why}",
                    self.groups[self.conns[idx].spec.group].authority
                ));
            }
            return Err(Failure::Protocol);
        }
        if stray {
            return Err(Failure::Protocol);
        }
        if closed {
            // The server ended the session: messages in flight are lost.
            if self.conns[idx].sent.is_empty() {
                self.closed_by_server(idx, now);
            } else {
                self.fail(idx, Failure::Read, now);
            }
            return Ok(Consumed::Closed);
        }
        if upgraded_now {
            self.conns[idx].waiting_since = now;
            if self.plan.conn_interval.is_some() {
                // Messages due during the handshake go now, charged from their schedule.
                self.send_due(idx, now);
            } else {
                self.send_next(idx, self.depth, now);
            }
        } else if answer {
            self.flush_ws(idx, now);
        }
        Ok(Consumed::More(completed))
    }

    /// HTTP/2: reads the frames in `self.buf[..n]`; completed streams are recorded.
    fn consume_h2(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        let conn = &mut self.conns[idx];
        let Some(mut h2) = conn.h2.take() else {
            return Err(Failure::Protocol);
        };
        let mut run = Recorded::empty(now);
        let mut completed = 0;
        let stats = &mut self.ledger.stats;
        let (measuring, measure_start) = (self.ledger.measuring, self.ledger.measure_start);
        let mut script = held_script(&mut self.script);
        let mut script_error = None;
        let result = h2.read(&self.buf[..n], |event| {
            completed += 1;
            conn.sent.pop();
            match event {
                crate::h2::Event::Response {
                    sent,
                    status,
                    collected,
                } => {
                    if let (Some(script), Some(c), None) =
                        (script.as_deref_mut(), collected, &script_error)
                    {
                        if let Err(e) = script.response_fields(status, &c.fields, &c.body) {
                            script_error = Some(e);
                        }
                    }
                    record_uncorrected(
                        stats,
                        conn.actual.as_mut(),
                        measuring && sent >= measure_start,
                        now,
                    );
                    if let Some(mut done) = run.push(sent, status) {
                        done.flush(stats, measuring, measure_start, now);
                    }
                }
                crate::h2::Event::Reset { sent } => {
                    if let Some(actual) = &mut conn.actual {
                        actual.pop();
                    }
                    if measuring && sent >= measure_start {
                        stats.errors.protocol += 1;
                    }
                }
            }
        });
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let drained = h2.drained();
        let exhausted = h2.exhausted() && h2.in_flight() == 0;
        let acks = h2.has_output();
        conn.h2 = Some(h2);
        if let Some(e) = script_error {
            self.script_failed(e);
        }
        if result.is_err() {
            return Err(Failure::Protocol);
        }
        if drained || exhausted {
            // GOAWAY: what the server will not answer goes back to the budget, on a new
            // connection; stream ids used up likewise.
            self.closed_by_server(idx, now);
            return Ok(Consumed::Closed);
        }
        if acks {
            self.flush_h2(idx, now);
        }
        Ok(Consumed::More(completed))
    }

    /// Reads until drained, completing responses; then sends what they made room for.
    pub(super) fn on_readable(&mut self, idx: usize, peer_closed: bool, mut now: Instant) {
        let mut completed = 0;
        loop {
            let conn = &mut self.conns[idx];
            let Some(stream) = &mut conn.stream else {
                return;
            };
            let (n, more) = match stream.read(&mut self.buf) {
                Ok(r) if r.n == 0 => {
                    self.on_eof(idx, now);
                    return;
                }
                Ok(r) => (r.n, r.more),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // rustls refusing a record is a TLS failure; the socket failing is a read's.
                    let kind = if e.kind() == io::ErrorKind::InvalidData {
                        Failure::Tls
                    } else {
                        Failure::Read
                    };
                    self.fail(idx, kind, now);
                    return;
                }
            };
            // One timestamp for every response this read completed.
            now = self.ledger.clock();
            if self.ledger.measuring {
                self.ledger.stats.bytes_read += n as u64;
            }
            match self.consume(idx, n, now) {
                Ok(Consumed::More(k)) => completed += k,
                Ok(Consumed::Closed) => return,
                Err(f) => {
                    self.fail(idx, f, now);
                    return;
                }
            }
            // Short read: drained. Edge-triggered epoll reports any later data as a new event.
            if !more && !peer_closed {
                break;
            }
        }
        if self.conns[idx].state != ConnState::Open {
            return;
        }
        if completed > 0 {
            self.conns[idx].waiting_since = now;
        }
        if self.plan.conn_interval.is_some() {
            self.send_due(idx, now);
        } else if completed > 0 {
            self.send_next(idx, completed, now);
        }
    }

    /// Walks the responses in `self.buf[..n]` (after any held head bytes).
    fn consume(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        if self.plan.ws.is_some() {
            return self.consume_ws(idx, n, now);
        }
        if self.plan.h2 {
            return self.consume_h2(idx, n, now);
        }
        let conn = &mut self.conns[idx];
        let head_method = self.groups[conn.spec.group].requests.head;
        // With a script: `request()` says per request whether it is a HEAD, and `response()`
        // wants each response's bytes.
        let dynamic = self.script_plan.is_some_and(|s| s.dynamic);
        let capture = self.script_plan.is_some_and(|s| s.response);
        let mut script_error = None;
        let mut carry = std::mem::take(&mut conn.carry);
        let from_carry = !carry.is_empty();
        if from_carry {
            carry.extend_from_slice(&self.buf[..n]);
        }
        // Every response this read completed shares `now`, and the requests of one batch share
        // their send time, so consecutive responses of one batch and one status have the same
        // latency: they are recorded together, one histogram update for up to `depth` responses.
        // (At depth 16 recording one by one was a third of the loader's own instructions; see
        // docs/PERFORMANCE.md, "lowlat load".)
        let mut run = Recorded::empty(now);
        let (i, completed, close) = {
            let data: &[u8] = if from_carry { &carry } else { &self.buf[..n] };
            let mut i = 0;
            let mut completed = 0;
            let mut close = false;
            while i < data.len() {
                if conn.sent.is_empty() && conn.reader.wants_head() {
                    // Bytes nobody asked for; what came before them still counts.
                    run.flush(
                        &mut self.ledger.stats,
                        self.ledger.measuring,
                        self.ledger.measure_start,
                        now,
                    );
                    return Err(Failure::Protocol);
                }
                let head = if dynamic {
                    conn.heads.front().copied().unwrap_or(false)
                } else {
                    head_method
                };
                match conn
                    .reader
                    .read_cached(&data[i..], head, Some(&mut self.head_cache))
                {
                    Err(_) => {
                        run.flush(
                            &mut self.ledger.stats,
                            self.ledger.measuring,
                            self.ledger.measure_start,
                            now,
                        );
                        return Err(Failure::Protocol);
                    }
                    Ok(Step::NeedMore { consumed }) => {
                        if capture {
                            conn.capture.extend_from_slice(&data[i..i + consumed]);
                        }
                        i += consumed;
                        break;
                    }
                    Ok(Step::Complete { consumed, response }) => {
                        if let (true, Some(script)) = (capture, held_script(&mut self.script)) {
                            // The response's bytes: in this read alone (no copy), or after the
                            // part an earlier read kept.
                            let raw: &[u8] = if conn.capture.is_empty() {
                                &data[i..i + consumed]
                            } else {
                                conn.capture.extend_from_slice(&data[i..i + consumed]);
                                &conn.capture
                            };
                            if let Err(e) = script.response(response.status, raw, head) {
                                script_error = Some(e);
                            }
                            conn.capture.clear();
                        }
                        if dynamic {
                            conn.heads.pop_front();
                        }
                        i += consumed;
                        completed += 1;
                        let sent = conn.sent.pop().unwrap_or(now);
                        record_uncorrected(
                            &mut self.ledger.stats,
                            conn.actual.as_mut(),
                            self.ledger.measuring && sent >= self.ledger.measure_start,
                            now,
                        );
                        if let Some(mut done) = run.push(sent, response.status) {
                            done.flush(
                                &mut self.ledger.stats,
                                self.ledger.measuring,
                                self.ledger.measure_start,
                                now,
                            );
                        }
                        if !response.keep_alive || !self.plan.keep_alive {
                            close = true;
                            break;
                        }
                        if script_error.is_some() {
                            break;
                        }
                    }
                }
            }
            (i, completed, close)
        };
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let len = if from_carry { carry.len() } else { n };
        if !close && i < len {
            // An incomplete head: keep its bytes for the next read.
            if from_carry {
                carry.drain(..i);
            } else {
                carry.extend_from_slice(&self.buf[i..n]);
            }
        } else {
            carry.clear();
        }
        conn.carry = carry;
        if let Some(e) = script_error {
            self.script_failed(e);
        }
        if close {
            self.closed_by_server(idx, now);
            return Ok(Consumed::Closed);
        }
        Ok(Consumed::More(completed))
    }

    /// The server ended the connection after a response (`Connection: close`, or a
    /// close-delimited body): requests still in flight were never processed, so they go back to
    /// the budget, and the connection is reopened.
    fn closed_by_server(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let unanswered = conn.sent.len() as u64;
        if self.ledger.measuring {
            if let Some(b) = &mut self.budget {
                // Only requests sent while measuring were taken from the budget; the few sent
                // during the warm-up and unanswered are not worth telling apart.
                *b += unanswered;
            }
        }
        if self.plan.conn_interval.is_some() {
            // Rate mode: the unanswered are the latest scheduled; schedule them again, so that
            // they are sent on the new connection and charged from their original times.
            conn.scheduled -= unanswered;
        }
        conn.sent.clear();
        if let Some(actual) = &mut conn.actual {
            actual.clear();
        }
        self.close(idx);
        self.connect(idx, now);
    }

    fn on_eof(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if self.plan.h2 || self.plan.ws.is_some() {
            if conn.ws.as_ref().is_some_and(|w| !w.upgraded()) {
                // Closed before answering the handshake.
                self.fail(idx, Failure::Protocol, now);
            } else if conn.sent.is_empty() {
                self.close(idx);
                self.connect(idx, now);
            } else {
                self.fail(idx, Failure::Read, now);
            }
            return;
        }
        let held = if conn.reader.wants_head() {
            conn.carry.len()
        } else {
            0
        };
        match conn.reader.eof(held) {
            Ok(Some(response)) => {
                if let (true, Some(script)) = (
                    self.script_plan.is_some_and(|s| s.response),
                    held_script(&mut self.script),
                ) {
                    let head = conn.heads.pop_front().unwrap_or(false);
                    let raw = std::mem::take(&mut conn.capture);
                    let result = script.response(response.status, &raw, head);
                    conn.capture = raw;
                    conn.capture.clear();
                    if let Err(e) = result {
                        self.script_failed(e);
                        return;
                    }
                }
                let conn = &mut self.conns[idx];
                let sent = conn.sent.pop().unwrap_or(now);
                record_uncorrected(
                    &mut self.ledger.stats,
                    conn.actual.as_mut(),
                    self.ledger.measuring && sent >= self.ledger.measure_start,
                    now,
                );
                let mut one = Recorded::empty(now);
                one.push(sent, response.status);
                one.flush(
                    &mut self.ledger.stats,
                    self.ledger.measuring,
                    self.ledger.measure_start,
                    now,
                );
                self.closed_by_server(idx, now);
            }
            Ok(None) if conn.sent.is_empty() => {
                // An idle connection closed (keep-alive timeout): just reopen it.
                self.close(idx);
                self.connect(idx, now);
            }
            Ok(None) | Err(_) => self.fail(idx, Failure::Read, now),
        }
    }
}

fn record_uncorrected(
    stats: &mut ThreadStats,
    actual: Option<&mut SendTimes>,
    counted: bool,
    now: Instant,
) {
    let (Some(actual), Some(h)) = (actual, &mut stats.u_latency) else {
        return;
    };
    if let Some(t) = actual.pop() {
        if counted {
            let us =
                u64::try_from(now.saturating_duration_since(t).as_micros()).unwrap_or(u64::MAX);
            h.saturating_record(us);
        }
    }
}

/// What a read did to its connection.
enum Consumed {
    /// Still open; this many responses completed.
    More(usize),
    /// The server closed it after a response; it is being reopened.
    Closed,
}

/// Consecutive responses with one send time and one status, not yet counted: they share one
/// latency, so they cost one histogram update.
#[derive(Debug)]
struct Recorded {
    sent: Instant,
    status: u16,
    /// Responses in the run; none yet when 0.
    n: u64,
}

impl Recorded {
    fn empty(now: Instant) -> Self {
        Self {
            sent: now,
            status: 0,
            n: 0,
        }
    }

    /// Adds a response sent at `sent`. A response with another send time or status starts a
    /// new run; the finished one is returned, to be flushed.
    #[inline]
    fn push(&mut self, sent: Instant, status: u16) -> Option<Recorded> {
        if self.n > 0 && self.status == status && self.sent == sent {
            self.n += 1;
            return None;
        }
        let next = Self { sent, status, n: 1 };
        let done = std::mem::replace(self, next);
        (done.n > 0).then_some(done)
    }

    /// Counts the run's responses, answered at `now`. Requests sent (or scheduled) during the
    /// warm-up are not measured.
    #[inline]
    fn flush(
        &mut self,
        stats: &mut ThreadStats,
        measuring: bool,
        measure_start: Instant,
        now: Instant,
    ) {
        let n = std::mem::take(&mut self.n);
        if n == 0 || !measuring || self.sent < measure_start {
            return;
        }
        let sent = self.sent;
        stats.responses += n;
        stats.status.count_n(self.status, n);
        let us = u64::try_from(now.saturating_duration_since(sent).as_micros()).unwrap_or(u64::MAX);
        stats.latency.saturating_record_n(us, n);
        if let Some(iv) = &mut stats.intervals {
            // `record_n`, not `saturating_record_n`: the latter clamps instead of growing the
            // histogram.
            if iv
                .current
                .record_n(us.min(crate::report::MAX_LATENCY_US), n)
                .is_err()
            {
                iv.current.saturating_record_n(us, n);
            }
        }
    }
}
