//! How an API server of the test bed reaches servers that run as local processes.
//!
//! A real cluster reaches an aggregated API server (an APIService) or a webhook through a
//! Service's cluster IP. The test bed has no kube-proxy and Kubernetes refuses loopback addresses
//! in endpoints, so each kube-apiserver sends its "cluster" traffic through an HTTP CONNECT proxy
//! on a Unix socket (`--egress-selector-config-file`, the same mechanism as konnectivity). The
//! proxy keeps the port of the requested `host:port` and connects to `127.0.0.1:port`: a Service
//! whose port is the local server's port is therefore reachable, whatever cluster IP it got. No
//! packet ever goes to the cluster IP itself.

use std::{
    io::{BufRead, BufReader, Write},
    net::{Shutdown, TcpStream},
    os::unix::net::{UnixListener, UnixStream},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

/// The proxy of one API server; stops accepting when dropped.
pub struct EgressProxy {
    socket: PathBuf,
    stopping: Arc<AtomicBool>,
}

/// The `EgressSelectorConfiguration` that sends "cluster" traffic to the proxy at `socket`.
pub fn config(socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: {}
",
        socket.display()
    )
}

impl EgressProxy {
    pub fn start(socket: &Path) -> std::io::Result<EgressProxy> {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        std::thread::Builder::new()
            .name("testbed-egress".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    if let Ok(conn) = conn {
                        std::thread::spawn(move || {
                            let _ = tunnel(conn);
                        });
                    }
                }
            })?;
        Ok(EgressProxy {
            socket: socket.to_path_buf(),
            stopping,
        })
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        // Wake the accept loop so that it sees the flag.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Reads `CONNECT host:port HTTP/1.1` and its headers, connects to 127.0.0.1:port, answers 200
/// and copies bytes both ways until either side closes.
fn tunnel(conn: UnixStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let mut conn_w = conn.try_clone()?;
    let port = request
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|target| target.rsplit_once(':'))
        .and_then(|(_, port)| port.parse::<u16>().ok());
    let Some(port) = port else {
        conn_w.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")?;
        return Ok(());
    };
    let upstream =
        match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5)) {
            Ok(s) => s,
            Err(_) => {
                conn_w.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")?;
                return Ok(());
            }
        };
    // As every client and server of ours: without it, Nagle's algorithm meets the peer's delayed
    // ACK and a small write waits up to 40 ms.
    upstream.set_nodelay(true)?;
    conn_w.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    // Bytes the reader already buffered past the headers belong to the tunnel.
    let buffered = reader.buffer().to_vec();
    let mut up_w = upstream.try_clone()?;
    up_w.write_all(&buffered)?;
    let mut up_r = upstream;
    let to_client = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_r, &mut conn_w);
        let _ = conn_w.shutdown(Shutdown::Both);
    });
    let mut conn_r = reader.into_inner();
    let _ = std::io::copy(&mut conn_r, &mut up_w);
    let _ = up_w.shutdown(Shutdown::Write);
    let _ = to_client.join();
    Ok(())
}
