//! The requests of an `--h3` connection: queued as they fall due (closed loop: as many as fit;
//! rate mode: those whose time has come), opened as streams as the server's limit allows, and
//! given back when a GOAWAY leaves them unsent.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use super::{Queued, QuicWorker};

impl QuicWorker<'_> {
    /// Requests taken back unsent (GOAWAY): returned to the budget and, in rate mode, to the
    /// schedule, so they are sent on the next connection charged from their original times.
    pub(super) fn give_back(&mut self, idx: usize, n: u64) {
        if n == 0 {
            return;
        }
        if self.ledger.measuring {
            if let Some(b) = &mut self.budget {
                *b += n;
            }
        }
        if self.plan.conn_interval.is_some() {
            let conn = &mut self.conns[idx];
            conn.scheduled = conn.scheduled.saturating_sub(n);
        }
    }

    /// Queues the requests due (closed loop: as many as fit; rate mode: those whose time has
    /// come) and opens a stream for each queued one the server's stream limit allows.
    pub(super) fn send_more(&mut self, idx: usize, now: Instant) {
        match self.plan.conn_interval {
            Some(interval) => self.queue_due(idx, interval, now),
            None => {
                let conn = &mut self.conns[idx];
                let mut k = self.depth.saturating_sub(conn.in_flight());
                if self.ledger.measuring {
                    if let Some(b) = &mut self.budget {
                        k = k.min(usize::try_from(*b).unwrap_or(usize::MAX));
                        *b -= k as u64;
                    }
                }
                if k > 0 && conn.in_flight() == 0 {
                    conn.waiting_since = now;
                }
                for _ in 0..k {
                    conn.queue.push_back(Queued {
                        sent: now,
                        again: None,
                    });
                }
            }
        }
        self.open_streams(idx, now);
    }

    /// Rate mode: queue every request whose scheduled time has come (within the depth), and arm
    /// a timer for the next one.
    pub(super) fn queue_due(&mut self, idx: usize, interval: Duration, now: Instant) {
        let conn = &mut self.conns[idx];
        let phase = Duration::from_secs_f64(
            interval.as_secs_f64() * conn.spec.global as f64 / self.plan.connections as f64,
        );
        let due = |k: u64| self.start + phase + interval.mul_f64(k as f64);
        while conn.in_flight() < self.depth {
            let t = due(conn.scheduled);
            if t > now {
                break;
            }
            let counted = self.ledger.measuring && t >= self.ledger.measure_start;
            if counted {
                match &mut self.budget {
                    Some(0) => break,
                    Some(b) => *b -= 1,
                    None => {}
                }
            }
            if conn.in_flight() == 0 {
                conn.waiting_since = now;
            }
            conn.queue.push_back(Queued {
                sent: t,
                again: None,
            });
            conn.scheduled += 1;
        }
        if conn.in_flight() < self.depth && self.budget != Some(0) {
            let next = due(conn.scheduled);
            if conn.timer.is_none_or(|t| t > next) {
                conn.timer = Some(next);
                self.timers.push(Reverse((next, idx, conn.generation)));
            }
        }
    }

    /// Opens a stream for each queued request, while the server's limit allows.
    pub(super) fn open_streams(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let group = &self.groups[conn.spec.group];
        let (Some(quic), Some(session)) = (conn.quic.as_mut(), conn.h3.as_mut()) else {
            return;
        };
        while let Some(q) = conn.queue.front().copied() {
            let (actual, index) = match q.again {
                Some(again) => again,
                None => (now, group.h2_cycle[conn.cursor]),
            };
            if !session.request(quic, index, &group.h3_requests[index], q.sent, actual) {
                break;
            }
            conn.queue.pop_front();
            if q.again.is_none() {
                conn.cursor = (conn.cursor + 1) % group.h2_cycle.len();
                self.ledger.count_sent(1);
            }
        }
    }
}
