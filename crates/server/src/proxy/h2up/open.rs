//! HTTP/2 exchanges started: each request given to a connection to its server with a stream
//! free (or one about to be, before the server's SETTINGS say how many), else to a new
//! connection; the streams of the exchanges waiting on a connection opened as far as the
//! server allows.

use std::rc::Rc;

use lowlat_http::h2::client::{ClientConn, OpenError, MIN_READ_BUFFER};
use mio::{Interest, Token};

use super::request::open_stream;
use super::{
    base, Conn, Exchange, H2Upstreams, Outcome, Phase, CLOSED, CONNECT, CONN_OFFSET,
    EXCHANGE_OFFSET, INVALID,
};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::group::WorkerGroup;
use crate::proxy::health::now_ms;
use crate::proxy::job::ProxyJob;
use crate::proxy::upstream::Sock;

/// Streams assumed allowed on a connection before the server's SETTINGS say (requests queue on
/// it meanwhile rather than each opening a connection).
const ASSUMED_STREAMS: usize = 100;

impl H2Upstreams {
    /// Sends `job` to `server` over an HTTP/2 connection with room, or a new one.
    pub(crate) fn assign(
        &mut self,
        server: usize,
        job: ProxyJob,
        client: (Token, u32),
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> Result<(), ProxyJob> {
        let group = Rc::clone(&job.group);
        let upload = job.upload.clone();
        let room = self.conns.iter().find_map(|(k, c)| {
            let same = Rc::ptr_eq(&c.group, &group) && c.server == server;
            let used = c.streams.len() + c.waiting.len();
            (same && !c.session.going_away() && used < c.session.stream_limit(ASSUMED_STREAMS))
                .then_some(k)
        });
        let conn = match room {
            Some(k) => k,
            None => match self.connect(&group, server, ctx) {
                Some(k) => k,
                None => return Err(job),
            },
        };
        let xkey = self.exchanges.insert(Exchange {
            conn,
            group: Rc::clone(&group),
            server,
            stream: 0,
            client,
            head_request: job.head_request,
            added: job.added.clone(),
            job: Some(job),
            fill: None,
            upload,
            upload_resume: false,
            head: None,
            head_relayed: false,
            status: 0,
            announced: None,
            relayed: 0,
            body: Vec::new(),
            trailers: None,
            outcome: Outcome::Pending,
            deadline: ctx.now + group.cfg.timeouts.first_byte,
            sent_at: ctx.now,
        });
        group.active.borrow_mut()[server] += 1;
        self.conns[conn].waiting.push(xkey);
        self.gauges(&group, server, ctx.worker);
        down.relay_link(Token(base() + EXCHANGE_OFFSET + xkey));
        self.drive(conn, ctx);
        Ok(())
    }

    fn connect(
        &mut self,
        group: &Rc<WorkerGroup>,
        server: usize,
        ctx: &mut WorkerCtx<'_>,
    ) -> Option<usize> {
        let s = &group.cfg.servers[server];
        group.health.stats.connect(server, ctx.worker);
        let mut sock = match Sock::connect(s) {
            Ok(sock) => sock,
            Err(e) => {
                tracing::debug!(server = %s.label, "upstream connect: {e}");
                group.health.failed(server, now_ms());
                group.health.stats.failure(server, ctx.worker, CONNECT);
                return None;
            }
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        ctx.registry
            .register(
                sock.source(),
                Token(base() + CONN_OFFSET + key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .ok()?;
        entry.insert(Conn {
            sock,
            group: Rc::clone(group),
            server,
            phase: Phase::Connecting,
            session: Box::new(ClientConn::new()),
            wpos: 0,
            rbuf: vec![0; MIN_READ_BUFFER * 2],
            rlen: 0,
            readable: false,
            writable: false,
            broken: false,
            streams: Vec::new(),
            waiting: Vec::new(),
            uploads: 0,
            deadline: ctx.now + group.cfg.timeouts.connect,
        });
        Some(key)
    }

    /// Opens streams for the exchanges waiting, as far as the server allows.
    pub(super) fn open_waiting(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        let c = &mut self.conns[key];
        while let Some(&xkey) = c.waiting.first() {
            if c.session.can_open().is_err() {
                break;
            }
            c.waiting.remove(0);
            let Some(x) = self.exchanges.get_mut(xkey) else {
                continue;
            };
            let Some(job) = &x.job else { continue };
            let tls = c.group.cfg.servers[c.server].tls.is_some();
            let streaming = x.upload.is_some();
            match open_stream(
                &mut c.session,
                &job.request,
                tls,
                streaming,
                &mut self.scratch,
            ) {
                Some(Ok(id)) => {
                    c.uploads += usize::from(streaming);
                    x.stream = id;
                    x.sent_at = ctx.now;
                    x.deadline = ctx.now + c.group.cfg.timeouts.first_byte;
                    c.streams.push((id, xkey));
                }
                Some(Err(OpenError::Full)) => {
                    c.waiting.insert(0, xkey);
                    break;
                }
                Some(Err(OpenError::Closing)) => {
                    // Not sent: elsewhere.
                    x.outcome = Outcome::Failed {
                        kind: CLOSED,
                        retry: true,
                    };
                    self.touched.push(xkey);
                }
                None => {
                    tracing::debug!("the forwarded request does not parse as HTTP/1.1");
                    x.outcome = Outcome::Failed {
                        kind: INVALID,
                        retry: false,
                    };
                    self.touched.push(xkey);
                }
            }
        }
    }
}
