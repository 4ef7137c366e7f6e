//! A server: its sockets bound for every worker ([`Server::bind`]), its worker threads started
//! ([`Server::start`]), and the handles that reload or stop it while it runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::ServerConfig;
use crate::listener;
use crate::service::{Service, ServiceSlot, WorkerInfo};
use crate::worker;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot bind the metrics listener (--metrics) {addr}: {source}")]
    MetricsBind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("--h3-listen: {0}")]
    Quic(#[from] crate::quic::QuicError),
    #[error("cannot start worker: {0}")]
    Worker(std::io::Error),
    #[error("a worker failed: {0}")]
    WorkerFailed(String),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A server whose sockets are bound; [`Server::start`] starts its workers.
pub struct Server {
    cfg: Arc<ServerConfig>,
    /// Each worker's sockets, with the index of the address each listens on.
    listeners: Vec<Vec<(usize, std::net::TcpListener)>>,
    addrs: Vec<SocketAddr>,
    /// The first `plain_count` addresses are in clear, the rest TLS.
    plain_count: usize,
    /// For each address, whether connections from a balancer start with a PROXY header.
    proxy_protocol: Vec<bool>,
    service: Service,
    /// The QUIC sockets (one per worker), when `--h3-listen` is given.
    quic: Option<crate::quic::Bound>,
}

impl Server {
    /// Binds every listen address for every worker.
    ///
    /// # Errors
    /// [`ServerError::Bind`] when an address cannot be bound; [`ServerError::Config`] for zero
    /// workers or no address.
    pub fn bind(cfg: ServerConfig, service: Service) -> Result<Self, ServerError> {
        Self::bind_inherited(cfg, service, Vec::new())
    }

    /// [`Server::bind`], taking the listening sockets this process was handed
    /// ([`crate::inherit`]) for the addresses they are bound to, and binding the others.
    ///
    /// # Errors
    /// As [`Server::bind`]; [`ServerError::Config`] for a handed-over socket that no address
    /// uses.
    pub fn bind_inherited(
        cfg: ServerConfig,
        service: Service,
        inherited: Vec<crate::inherit::InheritedSocket>,
    ) -> Result<Self, ServerError> {
        if cfg.workers == 0 {
            return Err(ServerError::Config("--workers must be at least 1".into()));
        }
        if cfg.listen.is_empty() && cfg.tls_listen.is_empty() {
            return Err(ServerError::Config("no address to listen on".into()));
        }
        if !cfg.tls_listen.is_empty() && cfg.tls.is_none() {
            return Err(ServerError::Config(
                "--tls-listen needs a certificate (--cert and --key)".into(),
            ));
        }
        let all: Vec<SocketAddr> = cfg.listen.iter().chain(&cfg.tls_listen).copied().collect();
        let mut handed = Vec::new();
        let mut handed_udp = Vec::new();
        let mut channels = Vec::new();
        for sock in inherited {
            if sock.kind == crate::inherit::Kind::Quic {
                handed_udp.push(sock);
            } else if let crate::inherit::Kind::QuicHandoff { generation, worker } = sock.kind {
                channels.push(crate::quic::HandedChannel {
                    generation,
                    worker,
                    fd: sock.fd,
                });
            } else if matches!(
                sock.kind,
                crate::inherit::Kind::Metrics | crate::inherit::Kind::Health
            ) {
                // The CLI's listeners, not the workers'.
            } else {
                handed.push(std::net::TcpListener::from(sock.fd));
            }
        }
        let (listeners, addrs) = listener::bind_all(&all, cfg.workers, cfg.backlog, &mut handed)
            .map_err(|(addr, source)| ServerError::Bind { addr, source })?;
        if let Some(unused) = handed.first() {
            return Err(ServerError::Config(format!(
                "a socket handed over on {} is not a listen address: give it as --listen or --tls-listen, or name it http or https (FileDescriptorName=)",
                unused.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string())
            )));
        }
        let plain_count = cfg.listen.len();
        let pp = &cfg.proxy_protocol;
        let proxy_protocol = cfg
            .listen
            .iter()
            .map(|a| pp.clear.contains(a))
            .chain(cfg.tls_listen.iter().map(|a| pp.tls.contains(a)))
            .collect();
        let quic = match (&cfg.quic, &cfg.tls) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(ServerError::Config(
                    "--h3-listen needs a certificate (--tls-listen with --cert and --key)".into(),
                ))
            }
            (Some(q), Some(tls)) => {
                let mut q = q.clone();
                if q.port_from_tls {
                    q.listen.set_port(addrs[plain_count].port());
                }
                let rustls = tls
                    .quic_config(&crate::h3::alpn())
                    .map_err(|e| ServerError::Config(format!("--h3-listen: {e}")))?;
                let handed = std::mem::take(&mut handed_udp)
                    .into_iter()
                    .map(|s| std::net::UdpSocket::from(s.fd))
                    .collect();
                let channels = std::mem::take(&mut channels);
                Some(crate::quic::bind(
                    &q,
                    cfg.workers,
                    rustls,
                    handed,
                    channels,
                )?)
            }
        };
        if let Some(unused) = handed_udp.first() {
            return Err(ServerError::Config(format!(
                "a UDP socket handed over on {} is not the --h3-listen address",
                unused.addr.map_or_else(String::new, |a| a.to_string())
            )));
        }
        // Channels to older processes' QUIC connections, with no QUIC here to read for them:
        // closed (those processes go on sending; they no longer receive).
        drop(channels);
        Ok(Self {
            cfg: Arc::new(cfg),
            listeners,
            addrs,
            plain_count,
            proxy_protocol,
            service,
            quic,
        })
    }

    /// The addresses actually bound in clear (port 0 resolved).
    #[must_use]
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs[..self.plain_count]
    }

    /// The addresses actually bound with TLS (port 0 resolved).
    #[must_use]
    pub fn tls_addrs(&self) -> &[SocketAddr] {
        &self.addrs[self.plain_count..]
    }

    /// The UDP address HTTP/3 is served on (port 0 resolved), when it is.
    #[must_use]
    pub fn h3_addr(&self) -> Option<SocketAddr> {
        self.quic.as_ref().map(|q| q.addr)
    }

    /// Starts the workers.
    ///
    /// # Errors
    /// When a worker thread or its event loop cannot be created.
    pub fn start(self) -> Result<Running, ServerError> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let handing_over = Arc::new(AtomicBool::new(false));
        let slot = Arc::new(ServiceSlot::new(Arc::clone(&self.service)));
        let cpus = allowed_cpus();
        let mut wakers = Vec::new();
        let mut threads = Vec::new();
        let h3_addr = self.h3_addr();
        let (mut quic_sockets, quic_shared): (Vec<Option<_>>, _) = match self.quic {
            Some(q) => {
                let crate::quic::Bound {
                    sockets,
                    inboxes,
                    shared,
                    ..
                } = q;
                (
                    sockets.into_iter().zip(inboxes).map(Some).collect(),
                    Some(shared),
                )
            }
            None => (Vec::new(), None),
        };
        // What a USR2 hands to the new process: every socket, whichever worker holds it (the
        // workers keep them open until they stop accepting, which is after the hand-over).
        let mut handover: Vec<crate::upgrade::HandedSocket> = Vec::new();
        for (i, sock) in self.listeners.iter().flatten() {
            handover.push(crate::upgrade::HandedSocket {
                fd: std::os::fd::AsRawFd::as_raw_fd(sock),
                name: if *i >= self.plain_count {
                    "https"
                } else {
                    "http"
                }
                .into(),
            });
        }
        for (sock, _) in quic_sockets.iter().flatten() {
            handover.push(crate::upgrade::HandedSocket {
                fd: std::os::fd::AsRawFd::as_raw_fd(sock),
                name: "quic".into(),
            });
        }
        // The QUIC hand-off channels (`quic::handoff`): the new process passes this one's
        // connections' datagrams through them, and those of the older ones still alive.
        if let Some(shared) = &quic_shared {
            for (fd, name) in shared.handoff.handed() {
                handover.push(crate::upgrade::HandedSocket {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
                    name: name.into(),
                });
            }
        }
        for (index, listeners) in self.listeners.into_iter().enumerate() {
            let poll = mio::Poll::new().map_err(ServerError::Worker)?;
            let waker = Arc::new(
                mio::Waker::new(poll.registry(), worker::WAKER).map_err(ServerError::Worker)?,
            );
            wakers.push(Arc::clone(&waker));
            let worker = worker::Worker {
                waker,
                index,
                cfg: Arc::clone(&self.cfg),
                poll,
                listeners: listeners
                    .into_iter()
                    .map(|(i, sock)| worker::Listener {
                        sock: mio::net::TcpListener::from_std(sock),
                        tls: i >= self.plain_count,
                        proxy_protocol: self.proxy_protocol[i],
                    })
                    .collect(),
                shutdown: Arc::clone(&shutdown),
                handing_over: Arc::clone(&handing_over),
                services: Arc::clone(&slot),
                quic: quic_sockets
                    .get_mut(index)
                    .and_then(Option::take)
                    .zip(quic_shared.clone())
                    .map(|((sock, inbox), shared)| (sock, inbox, shared)),
            };
            let service = Arc::clone(&self.service);
            let pin = self
                .cfg
                .pin
                .then(|| cpus.get(index % cpus.len().max(1)).copied())
                .flatten();
            let thread = std::thread::Builder::new()
                .name(format!("lowlat-worker-{index}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to_cpu(cpu);
                    }
                    let router = service(&WorkerInfo { index });
                    worker.run(router)
                })
                .map_err(ServerError::Worker)?;
            threads.push(thread);
        }
        Ok(Running {
            handover,
            h3_addr,
            addrs: self.addrs,
            plain_count: self.plain_count,
            reload: ReloadHandle {
                slot,
                wakers: wakers.clone(),
            },
            shutdown: ShutdownHandle {
                flag: shutdown,
                handing_over,
                wakers,
            },
            threads,
        })
    }
}

/// Replaces the service of a running server: new requests see the new one.
#[derive(Clone)]
pub struct ReloadHandle {
    slot: Arc<ServiceSlot>,
    wakers: Vec<Arc<mio::Waker>>,
}

impl ReloadHandle {
    /// Puts `service` in place; every worker builds its router from it at its next loop turn.
    pub fn set_service(&self, service: Service) {
        *self
            .slot
            .service
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = service;
        self.slot.generation.fetch_add(1, Ordering::AcqRel);
        for waker in &self.wakers {
            let _ = waker.wake();
        }
    }
}

/// Asks a running server to shut down gracefully. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
    handing_over: Arc<AtomicBool>,
    wakers: Vec<Arc<mio::Waker>>,
}

impl ShutdownHandle {
    /// Stops accepting, lets requests in flight finish (up to the grace period), closes idle
    /// connections; the workers then exit.
    pub fn shutdown(&self) {
        self.flag.store(true, Ordering::Release);
        for waker in &self.wakers {
            let _ = waker.wake();
        }
    }

    /// [`ShutdownHandle::shutdown`] once a new process serves the same sockets (USR2): the
    /// clients are let go gently, since they have somewhere to go — HTTP/2 gets RFC 9113
    /// §6.8's two GOAWAYs a round trip apart, so that no stream crossing them is refused, and
    /// an idle HTTP/1.1 keep-alive connection closes only once idle half a second (its next
    /// answer says `Connection: close`), so that no request sent as it closes is lost.
    pub fn hand_over(&self) {
        self.handing_over.store(true, Ordering::Release);
        self.shutdown();
    }
}

/// A started server.
pub struct Running {
    /// Every listening socket, for a USR2 to hand over.
    handover: Vec<crate::upgrade::HandedSocket>,
    h3_addr: Option<SocketAddr>,
    addrs: Vec<SocketAddr>,
    plain_count: usize,
    reload: ReloadHandle,
    shutdown: ShutdownHandle,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// The addresses the server listens on in clear.
    #[must_use]
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs[..self.plain_count]
    }

    /// The addresses the server listens on with TLS.
    #[must_use]
    pub fn tls_addrs(&self) -> &[SocketAddr] {
        &self.addrs[self.plain_count..]
    }

    /// The UDP address HTTP/3 is served on, when it is.
    #[must_use]
    pub fn h3_addr(&self) -> Option<SocketAddr> {
        self.h3_addr
    }

    /// Every listening socket (TCP and UDP), named by what it carries, for a binary upgrade.
    #[must_use]
    pub fn handover(&self) -> &[crate::upgrade::HandedSocket] {
        &self.handover
    }

    /// A handle that starts a graceful shutdown.
    #[must_use]
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// A handle that replaces the service while the server runs.
    #[must_use]
    pub fn reload_handle(&self) -> ReloadHandle {
        self.reload.clone()
    }

    /// Waits until every worker has exited.
    ///
    /// # Errors
    /// When a worker's event loop failed.
    pub fn wait(self) -> Result<(), ServerError> {
        let mut failure = None;
        for thread in self.threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(e.to_string()),
                Err(_) => failure = Some("a worker panicked".into()),
            }
        }
        failure.map_or(Ok(()), |f| Err(ServerError::WorkerFailed(f)))
    }
}

/// The CPUs this process may run on (honours `taskset`).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is a plain bit array for which all-zero is valid; `sched_getaffinity`
    // writes at most `size_of::<cpu_set_t>()` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size passed is the size of `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set) };
    if rc != 0 {
        return vec![0];
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, so within the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to one CPU; failure is ignored (pinning is an optimisation).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: as in `allowed_cpus`, all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `CPU_SET` writes one bit of `set`; the caller took `cpu` from the allowed set,
    // which is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is this thread; the size is the size of `set`.
    let _ = unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    };
}
