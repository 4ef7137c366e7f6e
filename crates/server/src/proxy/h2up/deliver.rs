//! An HTTP/2 exchange's news handed to its client: the head, the body as the client's backlog
//! allows (the window given back to the server as it goes; a body that does not add up to its
//! `content-length` cut), the trailers and the end; a failure answered 502/504, sent once more
//! elsewhere where that is safe, or cut short after the head.

use std::rc::Rc;

use lowlat_http::client::Header;

use super::{Delivered, H2Upstreams, Outcome, PendingHead, CONNECT, INVALID, TIMEOUT};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::headers::response_field_passes;
use crate::proxy::health::now_ms;
use crate::proxy::job::{RelayBody, MAX_REFUSALS};

/// Stop delivering (and so stop giving window back) while a client has this much unwritten.
const HIGH_WATER: usize = 256 * 1024;

impl H2Upstreams {
    /// Hands exchange `key`'s news to its client.
    pub(super) fn deliver(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> Delivered {
        let Some(x) = self.exchanges.get_mut(key) else {
            return Delivered::Nothing;
        };
        let (group, server) = (Rc::clone(&x.group), x.server);
        if std::mem::take(&mut x.upload_resume) && x.upload.is_some() {
            down.upload_drained(ctx);
        }
        if let Some(head) = x.head.take() {
            let PendingHead {
                status,
                bytes,
                ranges,
                end_stream,
            } = *head;
            let fields: Vec<Header<'_>> = ranges
                .iter()
                .filter(|(n, _)| !bytes[n.clone()].starts_with(b":"))
                .filter_map(|(n, v)| {
                    Some(Header {
                        name: std::str::from_utf8(&bytes[n.clone()]).ok()?,
                        value: &bytes[v.clone()],
                    })
                })
                .collect();
            let length = fields
                .iter()
                .find(|f| f.name == "content-length")
                .and_then(|f| std::str::from_utf8(f.value).ok()?.trim().parse().ok());
            let bodiless = x.head_request || status == 204 || status == 304 || end_stream;
            let relay = match length {
                _ if bodiless => RelayBody::None { length },
                Some(n) => RelayBody::Length(n),
                None => RelayBody::Unknown,
            };
            x.status = status;
            x.announced = match relay {
                RelayBody::Length(n) => Some(n),
                RelayBody::None { .. } => Some(0),
                RelayBody::Unknown => None,
            };
            let pass = |name: &str| response_field_passes(name, std::iter::empty());
            let added = x.added.as_deref().unwrap_or_default();
            down.relay_head(ctx, status, "", &fields, &pass, added, relay);
            x.head_relayed = true;
            if let Some(mut job) = x.job.take() {
                x.fill = job.cache.take();
                job.group.give_buffer(job.request);
            }
        }
        if !x.body.is_empty() && down.backlog() < HIGH_WATER {
            let n = x.body.len();
            if !x.head_request {
                down.relay_body(ctx, &x.body);
                x.relayed += n as u64;
            }
            x.body.clear();
            let (conn, stream) = (x.conn, x.stream);
            if let Some(c) = self.conns.get_mut(conn) {
                c.session.release(stream, n);
            }
        }
        let x = &mut self.exchanges[key];
        if x.announced.is_some_and(|n| x.relayed > n)
            || (matches!(x.outcome, Outcome::Ended)
                && x.body.is_empty()
                && x.announced.is_some_and(|n| x.relayed != n))
        {
            // More or less than the head announced: cut, never relayed as complete.
            tracing::debug!(server = %group.cfg.servers[server].label, "upstream HTTP/2 response body does not match its content-length");
            x.outcome = Outcome::Failed {
                kind: INVALID,
                retry: false,
            };
        }
        let delivered = match x.outcome {
            Outcome::Pending => Delivered::Nothing,
            Outcome::Refused(status) => {
                let relayed = x.head_relayed;
                if let Some(job) = x.job.take() {
                    job.group.give_buffer(job.request);
                }
                self.remove_exchange(key, ctx.worker);
                if relayed {
                    down.relay_abort(ctx);
                } else {
                    down.relay_error(ctx, status);
                }
                Delivered::Nothing
            }
            Outcome::Ended if !x.body.is_empty() => Delivered::Nothing,
            Outcome::Ended => {
                if let Some(trailers) = x.trailers.take() {
                    let fields: Vec<(&[u8], &[u8])> = trailers
                        .iter()
                        .map(|(n, v)| (n.as_slice(), v.as_slice()))
                        .collect();
                    if !fields.is_empty() {
                        down.relay_trailers(ctx, &fields);
                    }
                }
                let took = ctx.now.saturating_duration_since(x.sent_at);
                group
                    .health
                    .stats
                    .response(server, ctx.worker, x.status, took);
                down.relay_end(ctx, &group.cfg.servers[server].label, x.status, took);
                self.remove_exchange(key, ctx.worker);
                Delivered::Nothing
            }
            Outcome::Failed { kind, retry } => {
                group.health.stats.failure(server, ctx.worker, kind);
                // A refused stream is the server's choice, not its failure; a refused connect
                // is a failure (and the request, never sent, may go elsewhere).
                let refused = retry && kind != CONNECT;
                if !refused {
                    group.health.failed(server, now_ms());
                }
                let relayed = x.head_relayed;
                let job = x.job.take();
                let client = x.client;
                self.remove_exchange(key, ctx.worker);
                if relayed {
                    down.relay_abort(ctx);
                    Delivered::Nothing
                } else {
                    match job {
                        // Sent once more when that is safe: an idempotent request, or one
                        // never processed (a refused connect or stream: RFC 9113 §8.7). A
                        // refused stream does not use up the one retry (a server going away
                        // refuses what it will not do; one closing after every response
                        // refuses all but one each time), up to `MAX_REFUSALS` times, but is
                        // sent elsewhere if it can be.
                        Some(mut job)
                            if (job.idempotent || retry)
                                && (!job.retried || (refused && job.refusals < MAX_REFUSALS))
                                && job.upload.as_ref().is_none_or(|u| u.borrow().sent() == 0) =>
                        {
                            if refused && job.refusals < MAX_REFUSALS {
                                job.refusals += 1;
                            } else {
                                job.retried = true;
                            }
                            let now = now_ms();
                            let other =
                                job.group.choose(job.hash, Some(server), now).or_else(|| {
                                    refused
                                        .then(|| job.group.choose(job.hash, None, now))
                                        .flatten()
                                });
                            match other {
                                Some(s) => Delivered::Retry(job, client, s),
                                None => {
                                    job.group.give_buffer(job.request);
                                    down.relay_error(ctx, status_for(kind));
                                    Delivered::Nothing
                                }
                            }
                        }
                        job => {
                            if let Some(job) = job {
                                job.group.give_buffer(job.request);
                            }
                            down.relay_error(ctx, status_for(kind));
                            Delivered::Nothing
                        }
                    }
                }
            }
        };
        down.flush_relayed(ctx);
        // Window updates released above go out now.
        let conn = self.exchanges.get(key).map(|x| x.conn);
        if let Some(conn) = conn {
            if self.conns.contains(conn) {
                let _ = self.write(conn, ctx);
            }
        }
        delivered
    }
}

fn status_for(kind: usize) -> u16 {
    if kind == TIMEOUT {
        504
    } else {
        502
    }
}
