//! DNS over TCP (RFC 7766) with bounds a hostile client cannot push past.
//!
//! ```text
//!  accept ──► admit (at the cap: close the longest-idle connection, else the oldest)
//!    │ EMFILE/ENFILE: close one idle connection, sleep, log once per interval
//!    ▼
//!  connection: wait for a length prefix (idle timeout, or closed by admit)
//!              ─► read the message, answer, write (read timeout from the first byte on)
//! ```
//!
//! Queries on one connection are answered in order, one at a time (RFC 7766 §6.2.1.1 allows it),
//! which keeps a connection to one message buffer and one task.

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hickory_server::net::xfer::Protocol;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Notify,
    task::JoinSet,
};

use crate::{
    Handler, ServeOptions,
    precheck::MAX_QUERY_LEN,
    ratelog::{Cause, Every, LOG_INTERVAL, MalformedLog},
    respond::Answerer,
    server::fd_limit,
};

/// Descriptors kept free for everything that is not a DNS client connection (sockets of the
/// admin server, the records file, the Kubernetes client, ...).
const RESERVED_FDS: u64 = 64;
/// Pause of the accept loop when the process or the system is out of descriptors.
const EXHAUSTED_BACKOFF: Duration = Duration::from_millis(50);

/// What the connection table knows of one connection.
struct Conn {
    /// Milliseconds since the table's start at which the connection went idle, plus one;
    /// 0 while a message is being read or answered.
    idle_since: AtomicU64,
    /// Told when the connection must close to make room.
    close: Notify,
}

/// The open connections, for the cap.
struct Table {
    start: Instant,
    max: usize,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    conns: HashMap<u64, Arc<Conn>>,
}

impl Table {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, closing another first when at the cap. The flag says whether
    /// one was closed.
    fn admit(&self) -> (u64, Arc<Conn>, bool) {
        let mut inner = self.lock();
        let mut evicted = false;
        while inner.conns.len() >= self.max {
            if Self::evict(&mut inner, true).is_none() {
                break;
            }
            evicted = true;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let conn = Arc::new(Conn {
            idle_since: AtomicU64::new(self.now()),
            close: Notify::new(),
        });
        inner.conns.insert(id, conn.clone());
        (id, conn, evicted)
    }

    /// Closes the longest-idle connection; with `or_busy`, the oldest one when none is idle (a
    /// client holding a half-sent query is no better than an idle one). Returns its id.
    fn evict(inner: &mut TableInner, or_busy: bool) -> Option<u64> {
        let idle = inner
            .conns
            .iter()
            .filter_map(|(id, c)| {
                let since = c.idle_since.load(Ordering::Relaxed);
                (since != 0).then_some((since, *id))
            })
            .min()
            .map(|(_, id)| id);
        let victim = match idle {
            Some(id) => id,
            None if or_busy => *inner.conns.keys().min()?,
            None => return None,
        };
        if let Some(conn) = inner.conns.remove(&victim) {
            // `notify_one` keeps a permit if the task is not waiting right now.
            conn.close.notify_one();
        }
        Some(victim)
    }

    fn remove(&self, id: u64) {
        self.lock().conns.remove(&id);
    }
}

/// Removes a connection from the table however its task ends.
struct Registered<'t> {
    table: &'t Table,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.table.remove(self.id);
    }
}

/// The accept loop. Returns only on an error that accepting again cannot fix.
pub(crate) async fn serve_tcp(
    listener: TcpListener,
    handler: Handler,
    log: Arc<MalformedLog>,
    options: ServeOptions,
) -> io::Result<()> {
    let mut max = options.tcp_max_connections.max(1);
    if let Some(limit) = fd_limit() {
        let room = limit.saturating_sub(RESERVED_FDS).max(1);
        if (max as u64) > room {
            tracing::warn!(
                configured = max,
                fd_limit = limit,
                cap = room,
                "TCP connection cap lowered to stay below the open-file limit"
            );
            max = room as usize;
        }
    }
    let table = Arc::new(Table {
        start: Instant::now(),
        max,
        inner: Mutex::default(),
    });
    let exhausted = Every::default();
    let other_errors = Every::default();
    let mut connections = JoinSet::new();
    loop {
        // Reap finished connections so the set does not grow with every client ever served.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) if is_fd_exhaustion(&error) => {
                // Accepting again at once would fail again at once: free a descriptor by closing
                // the longest-idle connection, and pause.
                Table::evict(&mut table.lock(), false);
                if let Some(count) = exhausted.hit(LOG_INTERVAL) {
                    tracing::warn!(%error, count, connections = table.lock().conns.len(), "out of file descriptors accepting DNS over TCP; backing off");
                }
                tokio::time::sleep(EXHAUSTED_BACKOFF).await;
                continue;
            }
            Err(error) if is_per_connection(&error) => continue,
            Err(error) => {
                if let Some(count) = other_errors.hit(LOG_INTERVAL) {
                    tracing::warn!(%error, count, "cannot accept a DNS TCP connection");
                }
                tokio::time::sleep(EXHAUSTED_BACKOFF).await;
                continue;
            }
        };
        let (id, conn, evicted) = table.admit();
        let table_ref = table.clone();
        let answerer = Answerer::new(handler.clone(), log.clone(), Protocol::Tcp);
        let options = options.clone();
        let log = log.clone();
        connections.spawn(async move {
            let table = table_ref;
            let _registered = Registered { table: &table, id };
            let result = connection(stream, peer, &conn, &table, &answerer, &options).await;
            if let Err(cause) = result {
                log.note(cause, peer);
            }
        });
        if evicted {
            // Let the closed connection's task run and release its descriptor before the next
            // accept: at the cap, a burst of accepts would otherwise hold the evicted ones too.
            tokio::task::yield_now().await;
        }
    }
}

/// Errors that say the process or the system has no descriptor left.
fn is_fd_exhaustion(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Errors that concern one connection only (it went away before we accepted it).
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(error.raw_os_error(), Some(libc::EPROTO | libc::EPERM))
}

/// Serves one connection until the client closes it, it idles out, stalls, misbehaves or is
/// closed to make room. `Err` only for a cause worth a (rate-limited) warning.
async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    conn: &Conn,
    table: &Table,
    answerer: &Answerer,
    options: &ServeOptions,
) -> Result<(), Cause> {
    let _ = stream.set_nodelay(true);
    // Allocated on the first query: a connection that never sends one costs no buffer.
    let mut msg = Vec::new();
    let mut out = Vec::new();
    loop {
        conn.idle_since.store(table.now(), Ordering::Relaxed);
        let mut prefix = [0u8; 2];
        // Reading one byte is all or nothing, so dropping this read on a timeout or a close
        // loses nothing.
        tokio::select! {
            read = tokio::time::timeout(options.tcp_idle_timeout, stream.read(&mut prefix[..1])) => {
                match read {
                    Ok(Ok(1)) => {}
                    // Closed by the client, an error, or idle too long.
                    _ => return Ok(()),
                }
            }
            () = conn.close.notified() => return Ok(()),
        }
        conn.idle_since.store(0, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + options.tcp_read_timeout;
        let read = async {
            stream.read_exact(&mut prefix[1..]).await?;
            let len = usize::from(u16::from_be_bytes(prefix));
            if len > MAX_QUERY_LEN {
                return Ok(false);
            }
            msg.resize(len, 0);
            stream.read_exact(&mut msg).await?;
            Ok::<_, io::Error>(true)
        };
        tokio::select! {
            read = tokio::time::timeout_at(deadline, read) => match read {
                Ok(Ok(true)) => {}
                // Longer than any query: not worth reading to answer FORMERR.
                Ok(Ok(false)) => return Err(Cause::TcpFraming),
                Ok(Err(_)) => return Ok(()),
                // Stalled half-way: the slow-read attack RFC 7766 §10 warns about.
                Err(_) => return Err(Cause::TcpFraming),
            },
            () = conn.close.notified() => return Ok(()),
        }
        if !answerer.answer(&msg, peer, &mut out).await {
            continue;
        }
        let Ok(len) = u16::try_from(out.len()) else {
            // The encoder caps TCP answers at 65,535 bytes; this cannot happen, but never send a
            // wrong prefix.
            return Ok(());
        };
        // One write for prefix and message: one segment for small answers.
        out.splice(0..0, len.to_be_bytes());
        let deadline = tokio::time::Instant::now() + options.tcp_read_timeout;
        match tokio::time::timeout_at(deadline, stream.write_all(&out)).await {
            Ok(Ok(())) => {}
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize) -> Table {
        Table {
            start: Instant::now(),
            max,
            inner: Mutex::default(),
        }
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_is_closed_first() {
        let t = table(3);
        let (a, ca, _) = t.admit();
        let (b, cb, _) = t.admit();
        let (c, cc, _) = t.admit();
        // `a` is busy; `b` went idle before `c`.
        ca.idle_since.store(0, Ordering::Relaxed);
        cb.idle_since.store(5, Ordering::Relaxed);
        cc.idle_since.store(9, Ordering::Relaxed);
        let (d, _, evicted) = t.admit();
        assert!(evicted);
        let ids: Vec<u64> = {
            let mut ids: Vec<u64> = t.lock().conns.keys().copied().collect();
            ids.sort();
            ids
        };
        assert_eq!(ids, vec![a, c, d]);
        // The evicted connection holds a permit: its task wakes as soon as it waits.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), cb.close.notified())
                .await
                .expect("the evicted connection was told to close");
        });
        let _ = b;
    }

    #[test]
    fn with_none_idle_the_oldest_is_closed() {
        let t = table(2);
        let (a, ca, _) = t.admit();
        let (b, cb, _) = t.admit();
        ca.idle_since.store(0, Ordering::Relaxed);
        cb.idle_since.store(0, Ordering::Relaxed);
        let (c, _, _) = t.admit();
        let mut ids: Vec<u64> = t.lock().conns.keys().copied().collect();
        ids.sort();
        assert_eq!(ids, vec![b, c]);
        let _ = a;
    }

    #[test]
    fn descriptor_exhaustion_is_told_apart_from_a_lost_client() {
        assert!(is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
        assert!(is_per_connection(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
    }
}
