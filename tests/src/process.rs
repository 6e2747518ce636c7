//! Child processes that cannot outlive the tests.
//!
//! Children are spawned by one thread that lives as long as the test process, with
//! `PR_SET_PDEATHSIG = SIGKILL`: the kernel kills them when that thread — that is, the test
//! process — dies, even by SIGKILL. (The signal follows the spawning *thread*, so spawning from a
//! short-lived test or runtime thread would kill them too early.) Dropping a [`Process`] stops it.

use std::{
    fs::File,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock, mpsc},
    time::{Duration, Instant},
};

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("testbed-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // Keep this thread alive for the life of the process: its exit would kill
                // every child (PDEATHSIG follows the thread).
                loop {
                    std::thread::park();
                }
            })
            .expect("spawner thread");
        Mutex::new(tx)
    })
}

/// A running child, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct Process {
    /// What it is, for logs and messages.
    pub name: String,
    child: Option<Child>,
}

/// Spawns `program args`, logging its output to `log`.
pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Process> {
    let out = File::create(log)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    #[expect(
        unsafe_code,
        reason = "a child that dies with the test (PR_SET_PDEATHSIG)"
    )]
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, tx))
        .map_err(|_| anyhow::anyhow!("spawner thread is gone"))?;
    let child = rx
        .recv()?
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", program.display()))?;
    Ok(Process {
        name: name.to_string(),
        child: Some(child),
    })
}

impl Process {
    /// Its process id (0 once it is stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the process has exited (and its exit status, if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL at once (a crash, a lost node: nothing is cleaned up); reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `limit` for the process to exit: how long it took and how it
    /// exited, or `None` if it still runs after `limit` (it is left running: dropping it or
    /// [`Process::kill`] ends it). Reaps the process when it exited.
    pub fn terminate(&mut self, limit: Duration) -> (Duration, Option<std::process::ExitStatus>) {
        let Some(child) = self.child.as_mut() else {
            return (Duration::ZERO, None);
        };
        let started = Instant::now();
        #[expect(unsafe_code, reason = "std's Child can only SIGKILL")]
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        while started.elapsed() < limit {
            if let Ok(Some(status)) = child.try_wait() {
                let took = started.elapsed();
                self.child = None;
                return (took, Some(status));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (started.elapsed(), None)
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; reaps the process.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        #[expect(
            unsafe_code,
            reason = "std's Child can only SIGKILL, and SIGTERM comes first"
        )]
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// A port on 127.0.0.1 that is free for TCP and UDP, never handed out twice by this process.
///
/// Ports come from below the kernel's ephemeral range (`ip_local_port_range`), so no outgoing
/// connection of a concurrent test can take one between this call and the child's bind: asking
/// the kernel for port 0 and releasing it would race with every client socket on the machine.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const HIGH: u32 = 32_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let _ = NEXT.compare_exchange(
        0,
        LOW + (std::process::id().wrapping_mul(7919) % (HIGH - LOW)),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..(HIGH - LOW) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (n - LOW) % (HIGH - LOW)) as u16;
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {LOW} and {HIGH}")
}

/// How many TCP connections process `pid` holds established to port `port` (of any address):
/// proof that it talks to a server, also one that never answers (an API server stopped with
/// SIGSTOP, whose kernel still accepts connections).
pub fn connections_to(pid: u32, port: u16) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let sockets: std::collections::HashSet<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // 01: ESTABLISHED.
            if remote_port == Some(port) && *state == "01" && sockets.contains(*inode) {
                count += 1;
            }
        }
    }
    count
}
