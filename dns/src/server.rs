//! Sockets and the serving loop. `serve` takes already-bound sockets and a shutdown future, so
//! tests and the agent decide where to listen and when to stop.

use std::{future::Future, io, net::SocketAddr, time::Duration};

use hickory_server::Server;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, UdpSocket};

use crate::{Error, Handler};

/// How long an idle TCP connection is kept open (RFC 7766 suggests a few seconds).
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;

/// The sockets a server answers on: UDP sockets sharing one port with `SO_REUSEPORT` (the kernel
/// spreads queries across them) and one TCP listener on the same port.
#[derive(Debug)]
pub struct Sockets {
    pub udp: Vec<UdpSocket>,
    pub tcp: TcpListener,
}

impl Sockets {
    /// Binds `udp_count` (at least one) UDP sockets and one TCP listener on `addr`. With port 0
    /// the first socket picks a free port and the others join it.
    pub fn bind(addr: SocketAddr, udp_count: usize) -> Result<Self, Error> {
        let wrap = |source: io::Error| Error::Bind { addr, source };
        let first = reuseport_socket(addr, Type::DGRAM).map_err(wrap)?;
        let local = first
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| wrap(io::Error::other("bound socket has no address")))?;
        let mut udp = vec![into_tokio_udp(first).map_err(wrap)?];
        for _ in 1..udp_count.max(1) {
            let socket = reuseport_socket(local, Type::DGRAM).map_err(wrap)?;
            udp.push(into_tokio_udp(socket).map_err(wrap)?);
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
        Protocol::UDP
    } else {
        Protocol::TCP
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

/// Receive buffer asked for on UDP sockets: a burst of queries while the thread is descheduled
/// waits here instead of being dropped. The kernel caps it at `net.core.rmem_max`.
const UDP_RECV_BUFFER: usize = 4 << 20;

fn into_tokio_udp(socket: Socket) -> io::Result<UdpSocket> {
    socket.set_nonblocking(true)?;
    // Best effort: a smaller buffer only means earlier drops under overload.
    let _ = socket.set_recv_buffer_size(UDP_RECV_BUFFER);
    UdpSocket::from_std(socket.into())
}

/// Serves DNS on `sockets` until `shutdown` completes, then stops accepting and returns.
pub async fn serve(
    handler: Handler,
    sockets: Sockets,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let mut server = Server::new(handler);
    for socket in sockets.udp {
        server.register_socket(socket);
    }
    server.register_listener(sockets.tcp, TCP_IDLE_TIMEOUT, TCP_RESPONSE_BUFFER);
    tokio::select! {
        result = server.block_until_done() => result.map_err(|e| Error::Serve(e.to_string())),
        () = shutdown => server
            .shutdown_gracefully()
            .await
            .map_err(|e| Error::Serve(e.to_string())),
    }
}
