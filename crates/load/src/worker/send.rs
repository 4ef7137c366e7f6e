//! Sending on a loader connection: how many requests it may have in flight, the batches of
//! pre-built (or scripted) requests written in one `write`, rate mode's schedule, and what a
//! short write leaves for the next writable event (HTTP/1.1, HTTP/2 and WebSocket alike).

use std::cmp::Reverse;
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::plan::H2Request;
use crate::script::ThreadScript;
use crate::transport::Stream;

use super::{held_script, Conn, ConnState, Failure, Worker};

impl Worker<'_> {
    /// Closed loop, as responses make room: the next send, after the script's `delay()` when
    /// it has one (wrk calls it before every send, the first included).
    pub(super) fn send_next(&mut self, idx: usize, k: usize, now: Instant) {
        if self.script_stopped() {
            // thread:stop() in the response() just read: nothing more goes out (as in wrk).
            return;
        }
        if !self.script_plan.is_some_and(|s| s.delay) {
            return self.send_more(idx, k, now);
        }
        if self.conns[idx].timer.is_some() || self.room(idx) == 0 {
            return;
        }
        let Some(script) = held_script(&mut self.script) else {
            return;
        };
        let wait = match script.delay() {
            Ok(wait) => wait,
            Err(e) => return self.script_failed(e),
        };
        if wait.is_zero() {
            return self.send_more(idx, k, now);
        }
        let conn = &mut self.conns[idx];
        let at = now + wait;
        conn.timer = Some(at);
        self.timers.push(Reverse((at, idx, conn.generation)));
    }

    /// The script failed, or called `thread:stop()`.
    pub(super) fn script_stopped(&self) -> bool {
        self.script_ended
            || self
                .script
                .as_deref()
                .and_then(Option::as_ref)
                .is_some_and(ThreadScript::stopped)
    }

    /// How many more requests connection `idx` may have in flight: with a script's
    /// `request()`, whether one more batch fits (0 or the batch size).
    pub(super) fn room(&self, idx: usize) -> usize {
        let conn = &self.conns[idx];
        let room = depth_of(conn, self.depth).saturating_sub(conn.sent.len());
        match self.script_plan {
            Some(s) if s.dynamic => {
                if room >= s.per_call || conn.sent.is_empty() {
                    s.per_call
                } else {
                    0
                }
            }
            _ => room,
        }
    }

    /// Calls the script's `request()` for connection `idx` and queues what it returned (at
    /// most `allowed` of its requests, for a counted run): its bytes, or with `--h2` its
    /// streams. Returns how many requests were queued; `None` when the script failed.
    pub(super) fn next_batch(&mut self, idx: usize, allowed: usize, now: Instant) -> Option<usize> {
        let (Some(script), Some(plan)) = (held_script(&mut self.script), self.script_plan) else {
            return None;
        };
        let conn = &mut self.conns[idx];
        let start = conn.out.len();
        let requests = match script.request(&mut conn.out) {
            Ok(r) => r,
            Err(e) => {
                conn.out.truncate(start);
                self.script_failed(e);
                return None;
            }
        };
        let k = requests.len().min(allowed);
        conn.out.truncate(start + requests.ends[k - 1]);
        if self.plan.h2 {
            let mut kept = requests.clone();
            kept.ends.truncate(k);
            let h2_out = &mut conn.h2_out;
            crate::script::wire::to_h2(&conn.out[start..], &kept, plan.scheme, |(fields, body)| {
                h2_out.push(H2Request { fields, body });
            });
            conn.out.truncate(start);
        } else {
            conn.heads.extend(&requests.heads[..k]);
        }
        if script.stopped() {
            self.script_ended = true;
        }
        if conn.sent.is_empty() {
            conn.waiting_since = now;
        }
        Some(k)
    }

    /// The script raised an error, or returned what cannot be sent: the run ends with it.
    pub(super) fn script_failed(&mut self, message: String) {
        if let Some(plan) = self.script_plan {
            plan.script.fail(message);
        }
        self.script_ended = true;
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Closed loop: queue up to `k` more requests (within the budget and the depth) and write.
    pub(super) fn send_more(&mut self, idx: usize, k: usize, now: Instant) {
        if self.script_plan.is_some_and(|s| s.dynamic) {
            return self.send_batches(idx, now);
        }
        let conn = &mut self.conns[idx];
        let room = depth_of(conn, self.depth).saturating_sub(conn.sent.len());
        let mut k = k.min(room);
        if self.ledger.measuring {
            if let Some(b) = &mut self.budget {
                k = k.min(usize::try_from(*b).unwrap_or(usize::MAX));
                *b -= k as u64;
            }
        }
        if k == 0 {
            return;
        }
        if conn.sent.is_empty() {
            conn.waiting_since = now;
        }
        conn.sent.push(now, k);
        conn.owed += k;
        self.flush(idx, now);
    }

    /// Closed loop with a script's `request()`: one batch per call, as many as fit within the
    /// depth and the budget, then one write.
    pub(super) fn send_batches(&mut self, idx: usize, now: Instant) {
        let mut queued = 0;
        while self.room(idx) > 0 && !self.script_ended {
            let allowed = match (self.ledger.measuring, self.budget) {
                (true, Some(0)) => break,
                (true, Some(b)) => usize::try_from(b).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let Some(k) = self.next_batch(idx, allowed, now) else {
                return;
            };
            if self.ledger.measuring {
                if let Some(b) = &mut self.budget {
                    *b -= k as u64;
                }
            }
            let conn = &mut self.conns[idx];
            conn.sent.push(now, k);
            conn.owed += k;
            queued += k;
        }
        if queued > 0 {
            self.flush(idx, now);
        }
    }

    /// Rate mode: queue every request whose scheduled time has come (within the depth), write
    /// them, and arm a timer for the next one.
    pub(super) fn send_due(&mut self, idx: usize, now: Instant) {
        let Some(interval) = self.plan.conn_interval else {
            return;
        };
        let conn = &self.conns[idx];
        if conn.state != ConnState::Open || self.script_stopped() {
            return;
        }
        // A WebSocket's messages wait for its 101: the ones due meanwhile are queued at the
        // upgrade (`consume_ws`), charged from their schedule. Queued before it (a read of TLS
        // session tickets calls this), they would fill the depth with messages nothing writes.
        if conn.ws.as_ref().is_some_and(|w| !w.upgraded()) {
            return;
        }
        let phase = Duration::from_secs_f64(
            interval.as_secs_f64() * conn.spec.global as f64 / self.plan.connections as f64,
        );
        let start = self.start;
        let due = move |k: u64| start + phase + interval.mul_f64(k as f64);
        // With a script's `request()`, each call is one batch; its requests take consecutive
        // slots of the schedule and are charged from the first one's time, as in wrk2.
        let dynamic = self.script_plan.is_some_and(|s| s.dynamic);
        let mut queued = 0;
        while self.room(idx) > 0 && !self.script_ended {
            let t = due(self.conns[idx].scheduled);
            if t > now {
                break;
            }
            let counted = self.ledger.measuring && t >= self.ledger.measure_start;
            let allowed = match (counted, self.budget) {
                (true, Some(0)) => break,
                (true, Some(b)) => usize::try_from(b).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let k = if dynamic {
                match self.next_batch(idx, allowed, now) {
                    Some(k) => k,
                    None => return,
                }
            } else {
                1
            };
            if counted {
                if let Some(b) = &mut self.budget {
                    *b -= k as u64;
                }
            }
            let conn = &mut self.conns[idx];
            if conn.sent.is_empty() {
                conn.waiting_since = now;
            }
            conn.sent.push(t, k);
            conn.scheduled += k as u64;
            queued += k;
        }
        self.conns[idx].owed += queued;
        if self.room(idx) > 0 && self.budget != Some(0) {
            let conn = &mut self.conns[idx];
            let next = due(conn.scheduled);
            if conn.timer.is_none_or(|t| t > next) {
                conn.timer = Some(next);
                self.timers.push(Reverse((next, idx, conn.generation)));
            }
        }
        if queued > 0 {
            self.flush(idx, now);
        }
    }

    /// Writes what is owed: first the rest of a short write, then the owed requests, one write.
    pub(super) fn flush(&mut self, idx: usize, now: Instant) {
        if self.plan.ws.is_some() {
            return self.flush_ws(idx, now);
        }
        if self.plan.h2 {
            return self.flush_h2(idx, now);
        }
        let conn = &mut self.conns[idx];
        let Some(stream) = &mut conn.stream else {
            return;
        };
        let batch = &self.groups[conn.spec.group].requests;
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return, // TLS records still wait for the socket: wait for writable.
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if self.script_plan.is_some_and(|s| s.dynamic) {
            // What the script's request() returned, in `out`.
            if conn.owed > 0 {
                if let Some(actual) = &mut conn.actual {
                    actual.push(now, conn.owed);
                }
                self.ledger.count_sent(conn.owed);
                conn.owed = 0;
            }
            while conn.out_pos < conn.out.len() {
                match stream.write(&conn.out[conn.out_pos..]) {
                    Ok(n) => {
                        conn.out_pos += n;
                        if conn.out_pos < conn.out.len() {
                            return; // The socket buffer is full: wait for a writable event.
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.fail(idx, Failure::Write, now);
                        return;
                    }
                }
            }
            conn.out.clear();
            conn.out_pos = 0;
            return;
        }
        loop {
            let (start, end) = match conn.partial {
                Some(range) => range,
                None if conn.owed > 0 => {
                    // At most `depth` requests: what the batch was laid out for.
                    let k = conn.owed.min(self.depth);
                    let range = batch.range(conn.cursor, k);
                    conn.cursor = batch.window(conn.cursor, k).1;
                    conn.owed -= k;
                    if let Some(actual) = &mut conn.actual {
                        actual.push(now, k);
                    }
                    self.ledger.count_sent(k);
                    range
                }
                None => return,
            };
            match stream.write(batch.slice(start, end)) {
                Ok(n) if start + n == end => conn.partial = None,
                Ok(n) => {
                    conn.partial = Some((start + n, end));
                    return; // The socket buffer is full: wait for a writable event.
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.partial = Some((start, end));
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    conn.partial = Some((start, end))
                }
                Err(_) => {
                    self.fail(idx, Failure::Write, now);
                    return;
                }
            }
        }
    }

    /// HTTP/2: the owed requests become frames behind any control frames waiting, then one
    /// write of all of it.
    pub(super) fn flush_h2(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(stream), Some(h2)) = (&mut conn.stream, &mut conn.h2) else {
            return;
        };
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if conn.owed > 0 {
            let group = &self.groups[conn.spec.group];
            let k = conn.owed;
            // The owed requests are the newest in `sent`; each stream keeps its own time.
            let first = conn.sent.len() - k;
            if self.script_plan.is_some_and(|s| s.dynamic) {
                for (i, req) in conn.h2_out.drain(..).enumerate() {
                    let sent = conn.sent.nth(first + i).unwrap_or(now);
                    h2.request_once(&req, sent);
                }
            } else {
                for i in 0..k {
                    let sent = conn.sent.nth(first + i).unwrap_or(now);
                    let index = group.h2_cycle[conn.cursor];
                    h2.request(index, &group.h2_requests[index], sent);
                    conn.cursor = (conn.cursor + 1) % group.h2_cycle.len();
                }
            }
            conn.owed = 0;
            if let Some(actual) = &mut conn.actual {
                actual.push(now, k);
            }
            self.ledger.count_sent(k);
        }
        match write_queued(stream, &h2.out, &mut h2.out_pos) {
            Ok(true) => h2.written(),
            // The socket buffer is full: wait for a writable event.
            Ok(false) => {}
            Err(()) => self.fail(idx, Failure::Write, now),
        }
    }

    /// WebSocket: once the handshake is done, the owed messages are queued (one copy of the
    /// prebuilt frame each) behind any pong, then one write of all of it.
    pub(super) fn flush_ws(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(stream), Some(ws)) = (&mut conn.stream, &mut conn.ws) else {
            return;
        };
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if conn.owed > 0 && ws.upgraded() {
            let k = conn.owed;
            for _ in 0..k {
                ws.message();
            }
            conn.owed = 0;
            if let Some(actual) = &mut conn.actual {
                actual.push(now, k);
            }
            self.ledger.count_sent(k);
        }
        match write_queued(stream, &ws.out, &mut ws.out_pos) {
            Ok(true) => ws.written(),
            // The socket buffer is full: wait for a writable event.
            Ok(false) => {}
            Err(()) => self.fail(idx, Failure::Write, now),
        }
    }
}

/// `-U`: the response to the oldest written request came at `now`; its latency from the actual
/// send goes into the uncorrected histogram (one record per response: -U is a diagnostic).
/// Requests a connection may have in flight: the depth (`--pipeline`, or `-m` streams), within
/// what an HTTP/2 server allows (SETTINGS_MAX_CONCURRENT_STREAMS).
fn depth_of(conn: &Conn, depth: usize) -> usize {
    conn.h2.as_ref().map_or(depth, |h| depth.min(h.max_streams))
}

/// Writes `out[*pos..]` as far as the socket takes it. `Ok(true)`: all of it is out; `Ok(false)`:
/// the socket is full (a writable event will say when to go on); `Err`: the write failed.
fn write_queued(stream: &mut Stream, out: &[u8], pos: &mut usize) -> Result<bool, ()> {
    while *pos < out.len() {
        match stream.write(&out[*pos..]) {
            Ok(n) => {
                *pos += n;
                if *pos < out.len() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    Ok(true)
}
