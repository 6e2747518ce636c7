//! Sockets and the serving loop. `serve` takes already-bound sockets and a shutdown future, so
//! tests and the agent decide where to listen and when to stop.

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use socket2::{Domain, Socket, Type};
use tokio::net::{TcpListener, UdpSocket};

use crate::{Error, Handler, ratelog::MalformedLog, udp::UdpThreads};

/// The sockets a server answers on: UDP sockets sharing one port with `SO_REUSEPORT` (the kernel
/// spreads queries across them) and one TCP listener on the same port.
#[derive(Debug)]
pub struct Sockets {
    /// One UDP socket per worker, all bound to the same address.
    pub udp: Vec<UdpSocket>,
    /// The TCP listener on that address.
    pub tcp: TcpListener,
}

impl Sockets {
    /// Binds `udp_count` (at least one) UDP sockets and one TCP listener on `addr`. With port 0
    /// the first socket picks a free port and the others join it.
    pub fn bind(addr: SocketAddr, udp_count: usize) -> Result<Self, Error> {
        Self::bind_with(addr, udp_count, UDP_RECV_BUFFER)
    }

    /// Like [`Sockets::bind`], asking for `udp_recv_buffer` bytes of receive buffer on each UDP
    /// socket (0: the kernel's default, `net.core.rmem_default`).
    ///
    /// With port 0, the port the kernel picks for UDP may be taken for TCP (by an outgoing
    /// connection's local port, say): then another port is picked, a few times at most.
    pub fn bind_with(
        addr: SocketAddr,
        udp_count: usize,
        udp_recv_buffer: usize,
    ) -> Result<Self, Error> {
        const TRIES: usize = 16;
        let mut tries = 1;
        loop {
            match Self::bind_once(addr, udp_count, udp_recv_buffer) {
                Err(Error::Bind { source, .. })
                    if addr.port() == 0
                        && source.kind() == io::ErrorKind::AddrInUse
                        && tries < TRIES =>
                {
                    tries += 1;
                }
                result => return result,
            }
        }
    }

    fn bind_once(
        addr: SocketAddr,
        udp_count: usize,
        udp_recv_buffer: usize,
    ) -> Result<Self, Error> {
        let wrap = |source: io::Error| Error::Bind { addr, source };
        let first = reuseport_socket(addr, Type::DGRAM).map_err(wrap)?;
        let local = first
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| wrap(io::Error::other("bound socket has no address")))?;
        let mut udp = vec![into_tokio_udp(first, udp_recv_buffer).map_err(wrap)?];
        for _ in 1..udp_count.max(1) {
            let socket = reuseport_socket(local, Type::DGRAM).map_err(wrap)?;
            udp.push(into_tokio_udp(socket, udp_recv_buffer).map_err(wrap)?);
        }
        let tcp = reuseport_socket(local, Type::STREAM).map_err(wrap)?;
        tcp.listen(1024).map_err(wrap)?;
        tcp.set_nonblocking(true).map_err(wrap)?;
        let tcp = TcpListener::from_std(tcp.into()).map_err(wrap)?;
        Ok(Sockets { udp, tcp })
    }

    /// The address all sockets share.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

fn reuseport_socket(addr: SocketAddr, kind: Type) -> io::Result<Socket> {
    let proto = if kind == Type::DGRAM {
        socket2::Protocol::UDP
    } else {
        socket2::Protocol::TCP
    };
    let socket = Socket::new(Domain::for_address(addr), kind, Some(proto))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Receive buffer asked for on UDP sockets by default: a burst of queries while the thread is
/// descheduled waits here instead of being dropped. The kernel caps it at `net.core.rmem_max`.
pub const UDP_RECV_BUFFER: usize = 4 << 20;

fn into_tokio_udp(socket: Socket, recv_buffer: usize) -> io::Result<UdpSocket> {
    socket.set_nonblocking(true)?;
    if recv_buffer > 0 {
        // Best effort: a smaller buffer only means earlier drops under overload.
        let _ = socket.set_recv_buffer_size(recv_buffer);
    }
    UdpSocket::from_std(socket.into())
}

/// Limits of the serving loops.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// TCP connections open at once; at the cap, a new connection closes the longest-idle one.
    /// Also kept below the process's file-descriptor limit.
    pub tcp_max_connections: usize,
    /// How long a TCP connection may wait for its next query (RFC 7766 §6.2.3).
    pub tcp_idle_timeout: Duration,
    /// How long a TCP query may take to arrive once its first byte has, and its answer to be
    /// written: a client that stalls half-way is dropped after this.
    pub tcp_read_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            tcp_max_connections: 1000,
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_read_timeout: Duration::from_secs(3),
        }
    }
}

/// Serves DNS on `sockets` with the default [`ServeOptions`] until `shutdown` completes.
pub async fn serve(
    handler: Handler,
    sockets: Sockets,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    serve_with(handler, sockets, ServeOptions::default(), shutdown).await
}

/// Serves DNS on `sockets` until `shutdown` completes, then stops every loop and returns.
///
/// One OS thread per UDP socket receives and answers its datagrams in batches, handing the
/// queries that need hickory to this runtime (see [`crate::udp`]); TCP has its own accept loop
/// (see [`crate::tcp`]) so that connection limits, deadlines and descriptor exhaustion are
/// handled here. Both run every message through the same pre-decode walk and the same
/// [`Handler`]. Returns an error when a socket fails for good.
pub async fn serve_with(
    handler: Handler,
    sockets: Sockets,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let log = Arc::new(MalformedLog::new(handler.shared_observer()));
    let mut udp = UdpThreads::start(sockets.udp, &handler, &log)
        .map_err(|error| Error::Serve(format!("cannot start the UDP threads: {error}")))?;
    let mut tcp = tokio::spawn(crate::tcp::serve_tcp(sockets.tcp, handler, log, options));
    let result = tokio::select! {
        // The loops only end on a socket error that cannot be retried.
        ended = &mut tcp => match ended {
            Ok(Err(error)) => Err(Error::Serve(error.to_string())),
            Ok(Ok(())) => Err(Error::Serve("a DNS socket closed".into())),
            Err(error) => Err(Error::Serve(error.to_string())),
        },
        error = udp.failed() => Err(Error::Serve(error.to_string())),
        () = shutdown => Ok(()),
    };
    tcp.abort();
    let _ = tcp.await;
    udp.stop().await;
    result
}

/// Raises the soft limit on open files to the hard limit, so that TCP clients exhaust our
/// connection cap rather than the process's descriptors. Returns the soft limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[expect(unsafe_code, reason = "std cannot read or raise rlimits")]
    // SAFETY: getrlimit/setrlimit only read or write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(rlim_u64(limit.rlim_cur))
}

/// The soft limit on open files, if it can be read.
pub(crate) fn fd_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[expect(unsafe_code, reason = "std cannot read rlimits")]
    // SAFETY: getrlimit only writes the struct we pass.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    read.then_some(rlim_u64(limit.rlim_cur))
}

/// `rlim_t` is `u64` on the targets we build for, but not on every one.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn rlim_u64(value: libc::rlim_t) -> u64 {
    value as u64
}
