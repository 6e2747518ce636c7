//! UDP serving on dedicated OS threads, one per socket.
//!
//! ```text
//!   socket ──recvmmsg (≤ 32, MSG_WAITFORONE)──► UDP thread ──sendmmsg──► peers
//!                                                  │ precheck verdicts and fast-path hits:
//!                                                  │ answered here, no allocation
//!                                                  └─ anything else ──bounded queue──► tokio task
//!                                                                      (hickory, Handler) ──send_to──► peer
//! ```
//!
//! At the rates a DNS server usually sees, the cost per query is dominated by waking up for each
//! datagram. A thread blocked in `recvmmsg` pays one system call per wake-up and takes whatever
//! has queued meanwhile in the same call, where the async loop paid an `epoll_wait`, a
//! `recvfrom`, a `sendto` and a last `recvfrom` that finds nothing, plus the hand-offs between
//! the reactor and the worker. The replies of one wake-up leave in one `sendmmsg`.
//!
//! The queue to the general path is bounded and the thread only ever tries it: when it is full
//! the query is dropped and counted ([`QueryObserver::dropped`](crate::QueryObserver::dropped)),
//! so a flood of queries that need hickory cannot stall the fast path.
//!
//! The threads wake at least every [`RECV_TIMEOUT`] (`SO_RCVTIMEO`) to see whether they should
//! stop, and end on their own only on a socket error that cannot be retried.

use std::{
    io, mem,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsRawFd, RawFd},
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hickory_server::net::xfer::Protocol;
use tokio::sync::mpsc;

use crate::{
    ADVERTISED_UDP_PAYLOAD, Handler,
    precheck::MAX_QUERY_LEN,
    ratelog::{Every, LOG_INTERVAL, MalformedLog},
    respond::Answerer,
};

/// Datagrams taken in one `recvmmsg`.
pub(crate) const BATCH: usize = 32;
/// Queries waiting for the general path, per socket. A few milliseconds of hickory's work at
/// most: beyond that a client has better luck retrying than waiting.
pub(crate) const GENERAL_QUEUE: usize = 1024;
/// How long a thread blocks in `recvmmsg` (or `sendmmsg`) before it looks at the stop flag.
pub(crate) const RECV_TIMEOUT: Duration = Duration::from_millis(150);
/// One byte more than the longest query: a longer datagram arrives cut, is seen as too long and
/// answered FORMERR.
const SLOT: usize = MAX_QUERY_LEN + 1;

/// A query for the general path.
pub(crate) struct General {
    msg: Vec<u8>,
    peer: SocketAddr,
}

/// The UDP thread's end of the queue to the general path: it never waits.
pub(crate) struct GeneralQueue {
    tx: mpsc::Sender<General>,
    handler: Handler,
    full: Every,
}

impl GeneralQueue {
    pub(crate) fn new(tx: mpsc::Sender<General>, handler: Handler) -> Self {
        GeneralQueue {
            tx,
            handler,
            full: Every::default(),
        }
    }

    /// Queues `msg` from `peer` for the general path; when the queue is full (or its reader
    /// gone), drops it, counts it and returns false.
    pub(crate) fn offer(&self, msg: &[u8], peer: SocketAddr) -> bool {
        // Reserve first: a dropped query costs no allocation.
        match self.tx.try_reserve() {
            Ok(permit) => {
                permit.send(General {
                    msg: msg.to_vec(),
                    peer,
                });
                true
            }
            Err(_) => {
                self.handler.observer().dropped();
                if let Some(count) = self.full.hit(LOG_INTERVAL) {
                    tracing::warn!(
                        count,
                        queue = GENERAL_QUEUE,
                        "DNS queries dropped: the queue to the general path is full"
                    );
                }
                false
            }
        }
    }
}

/// The UDP threads of one server and the tokio tasks behind them.
pub(crate) struct UdpThreads {
    stop: Arc<AtomicBool>,
    /// Each thread's result, sent as it ends.
    ended: mpsc::UnboundedReceiver<io::Result<()>>,
    running: usize,
    general: tokio::task::JoinSet<()>,
}

impl UdpThreads {
    /// Starts one thread per socket, and one task per socket for the general path. Must be
    /// called inside the tokio runtime that is to run the general path.
    pub(crate) fn start(
        sockets: Vec<tokio::net::UdpSocket>,
        handler: &Handler,
        log: &Arc<MalformedLog>,
    ) -> io::Result<Self> {
        let (ended_tx, ended) = mpsc::unbounded_channel();
        // Dropped on an early return: the threads already started then stop on their own.
        let mut threads = UdpThreads {
            stop: Arc::new(AtomicBool::new(false)),
            ended,
            running: 0,
            general: tokio::task::JoinSet::new(),
        };
        for socket in sockets {
            let socket = socket.into_std()?;
            socket.set_nonblocking(false)?;
            socket.set_read_timeout(Some(RECV_TIMEOUT))?;
            socket.set_write_timeout(Some(RECV_TIMEOUT))?;
            // The general path sends from a second descriptor of the same socket, without ever
            // blocking (see `serve_general`): blocking mode is shared between the two.
            let sender = socket2::Socket::from(socket.try_clone()?);
            let (tx, rx) = mpsc::channel(GENERAL_QUEUE);
            let answerer = Answerer::new(handler.clone(), log.clone(), Protocol::Udp);
            let queue = GeneralQueue::new(tx, handler.clone());
            let stop = threads.stop.clone();
            let ended_tx = ended_tx.clone();
            std::thread::Builder::new()
                .name("xcc-dns-udp".into())
                .spawn(move || {
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        serve_thread(&socket, &answerer, &queue, &stop)
                    }))
                    .unwrap_or_else(|_| Err(io::Error::other("the UDP serving thread panicked")));
                    drop(socket);
                    let _ = ended_tx.send(result);
                })?;
            threads.running += 1;
            let general = Answerer::new(handler.clone(), log.clone(), Protocol::Udp);
            threads.general.spawn(serve_general(rx, general, sender));
        }
        Ok(threads)
    }

    /// Waits until a thread ends, which it only does on a socket error it cannot get past, and
    /// returns that error. Never completes while every thread serves.
    pub(crate) async fn failed(&mut self) -> io::Error {
        match self.ended.recv().await {
            Some(result) => {
                self.running -= 1;
                result
                    .err()
                    .unwrap_or_else(|| io::Error::other("a UDP serving thread stopped"))
            }
            None => std::future::pending().await,
        }
    }

    /// Stops the threads and the general path, and waits until every thread has closed its
    /// socket (at most about [`RECV_TIMEOUT`]).
    pub(crate) async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        while self.running > 0 && self.ended.recv().await.is_some() {
            self.running -= 1;
        }
        self.general.shutdown().await;
    }
}

impl Drop for UdpThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers the queries the UDP thread handed over, and sends the answers on `socket`.
async fn serve_general(
    mut queue: mpsc::Receiver<General>,
    answerer: Answerer,
    socket: socket2::Socket,
) {
    let mut out = Vec::with_capacity(ADVERTISED_UDP_PAYLOAD as usize);
    let errors = Every::default();
    while let Some(General { msg, peer }) = queue.recv().await {
        if answerer.answer_general(&msg, peer, &mut out).await
            // MSG_DONTWAIT: a full send buffer drops this answer (the client retries) rather
            // than block the runtime.
            && let Err(error) = socket.send_to_with_flags(&out, &peer.into(), libc::MSG_DONTWAIT)
            && let Some(count) = errors.hit(LOG_INTERVAL)
        {
            tracing::debug!(%error, %peer, count, "UDP send error");
        }
    }
}

/// The loop of one UDP thread: receive a batch, answer what can be answered here, queue the
/// rest, send the batch's answers; until `stop` is set or the socket fails for good.
fn serve_thread(
    socket: &std::net::UdpSocket,
    answerer: &Answerer,
    queue: &GeneralQueue,
    stop: &AtomicBool,
) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    let mut batch = Batch::new();
    let errors = Every::default();
    while !stop.load(Ordering::Relaxed) {
        let received = match batch.receive(fd) {
            Ok(received) => received,
            Err(error) => {
                match error.raw_os_error() {
                    // The receive timeout, or a signal: look at the stop flag again.
                    Some(libc::EAGAIN | libc::EINTR) => {}
                    // This socket is no socket any more: nothing will ever come.
                    Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL | libc::EFAULT) => {
                        return Err(error);
                    }
                    // ICMP errors from earlier sends surface here (ECONNREFUSED); nothing to do
                    // but go on, quietly. Anything else might repeat at once: pause rather than
                    // spin.
                    code => {
                        if let Some(count) = errors.hit(LOG_INTERVAL) {
                            tracing::debug!(%error, count, "UDP receive error");
                        }
                        if !matches!(code, Some(libc::ECONNREFUSED | libc::ECONNRESET)) {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                continue;
            }
        };
        let replies = batch.answer(received, answerer, queue);
        batch.send(fd, replies, &errors);
    }
    Ok(())
}

/// The buffers of one thread's `recvmmsg` and `sendmmsg`, allocated once.
///
/// The message headers hold pointers into the other vectors' heap blocks, which never grow or
/// move after [`Batch::new`]: the vectors are only indexed, never resized.
struct Batch {
    /// `BATCH` receive slots of `SLOT` bytes each.
    bufs: Vec<u8>,
    /// The sender of each received datagram, and the destination of its answer.
    names: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// Answers; each keeps its capacity from one batch to the next.
    outs: Vec<Vec<u8>>,
    out_iovecs: Vec<libc::iovec>,
    out_headers: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new() -> Self {
        #[expect(
            unsafe_code,
            reason = "the C structs of recvmmsg/sendmmsg start zeroed"
        )]
        // SAFETY: all-zero bytes are a valid value of these plain C structs (null pointers,
        // zero lengths and flags).
        let (name, iovec, header): (libc::sockaddr_storage, libc::iovec, libc::mmsghdr) =
            unsafe { (mem::zeroed(), mem::zeroed(), mem::zeroed()) };
        let mut batch = Batch {
            bufs: vec![0; BATCH * SLOT],
            names: vec![name; BATCH],
            iovecs: vec![iovec; BATCH],
            headers: vec![header; BATCH],
            outs: (0..BATCH)
                .map(|_| Vec::with_capacity(ADVERTISED_UDP_PAYLOAD as usize))
                .collect(),
            out_iovecs: vec![iovec; BATCH],
            out_headers: vec![header; BATCH],
        };
        for i in 0..BATCH {
            batch.iovecs[i] = libc::iovec {
                iov_base: batch.bufs[i * SLOT..].as_mut_ptr().cast(),
                iov_len: SLOT,
            };
            let header = &mut batch.headers[i].msg_hdr;
            header.msg_name = (&raw mut batch.names[i]).cast();
            header.msg_iov = &raw mut batch.iovecs[i];
            header.msg_iovlen = 1;
        }
        batch
    }

    /// Blocks until at least one datagram arrives (or the receive timeout passes), then takes
    /// up to `BATCH` of those waiting. Returns how many.
    fn receive(&mut self, fd: RawFd) -> io::Result<usize> {
        for header in &mut self.headers {
            header.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as _;
            header.msg_hdr.msg_flags = 0;
            header.msg_len = 0;
        }
        #[expect(unsafe_code, reason = "batched receive: std has no recvmmsg")]
        // SAFETY: `headers` holds BATCH entries, each pointing at its own name storage (with its
        // size in msg_namelen) and one iovec over its own SLOT bytes of `bufs`; all live as long
        // as `self` and none moves (see the type's doc). No timeout pointer: SO_RCVTIMEO bounds
        // the wait.
        let received = unsafe {
            libc::recvmmsg(
                fd,
                self.headers.as_mut_ptr(),
                BATCH as _,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        if received < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((received as usize).min(BATCH))
    }

    /// Answers the `received` datagrams: the answers that can be given here go into `outs` and
    /// the send headers, the others to `queue`. Returns the number of answers to send.
    fn answer(&mut self, received: usize, answerer: &Answerer, queue: &GeneralQueue) -> usize {
        let mut replies = 0;
        for i in 0..received {
            let header = &self.headers[i];
            let len = (header.msg_len as usize).min(SLOT);
            let msg = &self.bufs[i * SLOT..i * SLOT + len];
            let namelen = header.msg_hdr.msg_namelen;
            // Port 0 cannot be answered (and is a spoofing favourite).
            let Some(peer) = socket_addr(&self.names[i], namelen).filter(|p| p.port() != 0) else {
                continue;
            };
            let out = &mut self.outs[replies];
            match answerer.answer_now(msg, peer, out) {
                Some(true) => {
                    self.out_iovecs[replies] = libc::iovec {
                        iov_base: out.as_mut_ptr().cast(),
                        iov_len: out.len(),
                    };
                    let send = &mut self.out_headers[replies];
                    send.msg_hdr.msg_name = (&raw mut self.names[i]).cast();
                    send.msg_hdr.msg_namelen = namelen;
                    send.msg_hdr.msg_iov = &raw mut self.out_iovecs[replies];
                    send.msg_hdr.msg_iovlen = 1;
                    send.msg_len = 0;
                    replies += 1;
                }
                Some(false) => {}
                None => {
                    queue.offer(msg, peer);
                }
            }
        }
        replies
    }

    /// Sends the first `replies` answers prepared by [`Batch::answer`].
    fn send(&mut self, fd: RawFd, replies: usize, errors: &Every) {
        let mut from = 0;
        while from < replies {
            #[expect(unsafe_code, reason = "batched send: std has no sendmmsg")]
            // SAFETY: the headers from `from` to `replies` were filled by `answer` for this
            // batch: each points at a received peer's name (with its length) and one iovec over
            // an answer in `outs`, none of which has changed since.
            let sent = unsafe {
                libc::sendmmsg(
                    fd,
                    self.out_headers[from..].as_mut_ptr(),
                    (replies - from) as _,
                    0,
                )
            };
            if sent > 0 {
                from += sent as usize;
                continue;
            }
            // `sendmmsg` fails only when the first message cannot go: skip it, send the rest.
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if let Some(count) = errors.hit(LOG_INTERVAL) {
                tracing::debug!(%error, count, "UDP send error");
            }
            from += 1;
        }
    }
}

/// The address the kernel wrote into `name`, if it is an IPv4 or IPv6 one.
fn socket_addr(name: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(name.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            #[expect(unsafe_code, reason = "reading the kernel's sockaddr form")]
            // SAFETY: the family says the storage holds a sockaddr_in, which is smaller than
            // sockaddr_storage and no more aligned.
            let v4 =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            #[expect(unsafe_code, reason = "reading the kernel's sockaddr form")]
            // SAFETY: as above, for sockaddr_in6.
            let v6 =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(v6.sin6_addr.s6_addr),
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use crate::{QueryObserver, RecordTable, Zone, ZoneSettings};

    use super::*;

    #[derive(Default)]
    struct CountDrops(AtomicU64);

    impl QueryObserver for CountDrops {
        fn observe(&self, _: &crate::Answered) {}
        fn dropped(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn handler(observer: Arc<CountDrops>) -> Handler {
        let table = RecordTable::new(
            vec![Zone::new("xcc.test").unwrap()],
            ZoneSettings {
                ttl: 30,
                negative_ttl: 15,
            },
        )
        .unwrap();
        Handler::new(Arc::new(table), observer)
    }

    /// With the queue full, offers return at once, drop the query and count it; what was
    /// queued before is intact and, once read, makes room again.
    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let observer = Arc::new(CountDrops::default());
        let (tx, mut rx) = mpsc::channel(2);
        let queue = GeneralQueue::new(tx, handler(observer.clone()));
        let peer: SocketAddr = "192.0.2.1:5353".parse().unwrap();
        assert!(queue.offer(b"first", peer));
        assert!(queue.offer(b"second", peer));
        for _ in 0..5 {
            assert!(!queue.offer(b"dropped", peer));
        }
        assert_eq!(observer.0.load(Ordering::Relaxed), 5);
        let first = rx.try_recv().unwrap();
        assert_eq!((first.msg.as_slice(), first.peer), (&b"first"[..], peer));
        assert!(queue.offer(b"third", peer));
        assert_eq!(rx.try_recv().unwrap().msg, b"second");
        assert_eq!(rx.try_recv().unwrap().msg, b"third");
        assert!(rx.try_recv().is_err());
        // A reader that is gone counts the same: the thread never waits on it.
        drop(rx);
        assert!(!queue.offer(b"late", peer));
        assert_eq!(observer.0.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn peer_addresses_are_read_back_from_the_kernel_form() {
        for addr in ["192.0.2.7:53", "[2001:db8::7]:5353"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let sock = socket2::SockAddr::from(addr);
            #[expect(
                unsafe_code,
                reason = "the kernel's form of an address, as recvmmsg gives it"
            )]
            // SAFETY: SockAddr's storage is a sockaddr_storage of `len` valid bytes.
            let storage = unsafe { &*sock.as_ptr().cast::<libc::sockaddr_storage>() };
            assert_eq!(socket_addr(storage, sock.len()), Some(addr));
        }
        #[expect(
            unsafe_code,
            reason = "an address of no family, as the kernel may give"
        )]
        // SAFETY: all-zero is a valid sockaddr_storage (family AF_UNSPEC).
        let unspec: libc::sockaddr_storage = unsafe { mem::zeroed() };
        assert_eq!(socket_addr(&unspec, 0), None);
    }
}
