//! Container images for the test bed's nodes, built locally without a registry.
//!
//! Each image is one layer: a root filesystem assembled in a scratch directory, packed with `tar`
//! into a Docker image archive (`manifest.json` + config + layer, the format `docker save` writes)
//! and imported into a node's containerd with `ctr -n k8s.io images import`. Pods use them by tag
//! with `imagePullPolicy: Never` or `IfNotPresent` (nothing is ever pulled).
//!
//! | image | what |
//! |---|---|
//! | [`PAUSE`] | the pod sandbox: a 15-line static C program (`tests/fixtures/pause.c`), containerd's `sandbox_image` |
//! | [`BUSYBOX`] | Debian's static busybox with a link per applet (`sh`, `wget`, `nslookup`, `httpd`, ...), and `lookup` (`tests/fixtures/lookup/lookup.c`: lookups through the C library with the pod's resolv.conf, and their latency), user root |
//! | `registry.k8s.io/coredns/coredns:<version>` ([`coredns`]) | the test bed's static CoreDNS at `/coredns` |
//! | [`SOCAT`] | the MCS conformance suite's server: Debian's `socat` (1.7.4.4, the tag's version) with the libraries `ldd` names, static busybox with a link per applet (`sh`, `grep -E`, `awk`, `tr`, `echo`, ...), entrypoint `socat` as upstream's |
//! | [`NETSHOOT`] | the suite's client: Debian's `nc` (netcat-openbsd: `-4`/`-6`/`-v`/`-w`), `nslookup` and `dig` (bind9-dnsutils, whose output the suite parses), `dash` as `/bin/sh` (busybox's shell would run its own `nc` and `nslookup` applets first), their libraries, static busybox for the rest (`grep`, `tail`, `awk`, `sleep`, ...); no entrypoint, command `sh` |
//! | `xcc:<workspace version>` ([`xcc`]) | the stripped release binaries `xcc-agent`, `xcc-controller`, `xcc-coredns-patcher` at `/usr/local/bin/`, the libc files `ldd` names, CA certificates, `/etc/passwd` with `nonroot` (65532), user 65532: the layout of the project's `Dockerfile` (distroless cc) |
//!
//! Archives are cached in `$XCC_TESTBED_DIR/images/` (default `~/.cache/xcc-testbed/images/`),
//! named by image and a SHA-256 of their inputs (every file's content and destination, the image
//! config): an unchanged image is never rebuilt, a changed input makes a new archive.
//!
//! The xcc image needs the release build (`cargo build --release --locked -p xcc-agent -p
//! xcc-controller -p xcc-coredns-patcher`, a step of `./test.sh`); it fails, naming that command,
//! when a binary is missing or older than one of its sources (as listed in cargo's dep-info file).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::binaries::{Binaries, NodeBinaries};

/// The pod sandbox image (containerd's `sandbox_image` on the test bed's nodes).
pub const PAUSE: &str = "registry.k8s.io/pause:3.10";
/// Static busybox: test client pods, and an HTTP server (`busybox httpd -f -p 80 -h /www`).
pub const BUSYBOX: &str = "docker.io/library/busybox:1.35";
/// `alpine/socat:1.7.4.4` as the MCS conformance suite names it: socat and a busybox shell.
pub const SOCAT: &str = "docker.io/alpine/socat:1.7.4.4";
/// `nicolaka/netshoot:v0.15` as the MCS conformance suite names it: nc, nslookup, dig, busybox.
pub const NETSHOOT: &str = "docker.io/nicolaka/netshoot:v0.15";
/// The release binaries of xcc, as the manifests name them.
pub const XCC_BINARIES: [&str; 3] = ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"];

const RELEASE_BUILD: &str =
    "cargo build --release --locked -p xcc-agent -p xcc-controller -p xcc-coredns-patcher";

/// An image archive ready for `ctr images import`.
#[derive(Clone, Debug)]
pub struct Image {
    /// Full reference, e.g. `docker.io/library/xcc:0.1.0`.
    pub reference: String,
    /// The image's archive (`docker save` format), to import on a node.
    pub archive: PathBuf,
}

/// The CoreDNS image's reference for the test bed's CoreDNS version.
pub fn coredns(node: &NodeBinaries) -> String {
    format!("registry.k8s.io/coredns/coredns:{}", node.coredns_version)
}

/// `xcc:<version of the workspace>` (as the manifests name it), fully qualified.
pub fn xcc() -> String {
    format!("docker.io/library/xcc:{}", workspace_version())
}

/// The workspace's `version` (`[workspace.package]` of the root Cargo.toml).
pub fn workspace_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where the images are cached.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XCC_TESTBED_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/xcc-testbed")))
        .unwrap_or_else(|| std::env::temp_dir().join("xcc-testbed"))
        .join("images")
}

/// Builds (or finds in the cache) every image the nodes need: pause, busybox, CoreDNS and xcc.
pub fn build_all(binaries: &Binaries) -> anyhow::Result<Vec<Image>> {
    let node = binaries
        .node
        .as_ref()
        .context("the test bed has no node binaries: run tests/testbed/install.sh")?;
    let cache = cache_dir();
    std::fs::create_dir_all(&cache)?;
    let scratch = tempfile::Builder::new()
        .prefix("xcc-images-")
        .tempdir_in(&cache)?;
    Ok(vec![
        pause(&cache, scratch.path())?,
        busybox(&cache, scratch.path())?,
        build(
            &cache,
            &coredns(node),
            &[File::copy(&node.coredns_static, "coredns", 0o755)],
            &["/coredns"],
            None,
        )?,
        socat(&cache)?,
        netshoot(&cache)?,
        xcc_image(&cache)?,
    ])
}

/// A file of an image: its content comes from `source`, it lands at `dest` (relative).
struct File {
    source: Source,
    dest: String,
    mode: u32,
}

enum Source {
    Copy(PathBuf),
    /// The stripped copy of a binary.
    Strip(PathBuf),
    Text(String),
    Symlink(String),
    Dir,
}

impl File {
    fn copy(source: &Path, dest: &str, mode: u32) -> File {
        File {
            source: Source::Copy(source.to_path_buf()),
            dest: dest.into(),
            mode,
        }
    }
    fn text(dest: &str, text: &str) -> File {
        File {
            source: Source::Text(text.into()),
            dest: dest.into(),
            mode: 0o644,
        }
    }
    fn dir(dest: &str, mode: u32) -> File {
        File {
            source: Source::Dir,
            dest: dest.into(),
            mode,
        }
    }
}

fn pause(cache: &Path, scratch: &Path) -> anyhow::Result<Image> {
    let source = workspace_root().join("tests/fixtures/pause.c");
    // Keyed by the C source: compile only when that image is not cached yet.
    let key_file = File::copy(&source, "pause.c", 0o644);
    let pause_config = Config {
        entrypoint: &["/pause"],
        cmd: &[],
        user: None,
    };
    let key = key(&[key_file], &pause_config)?;
    let archive = cache.join(format!("pause-{key}.tar"));
    if !archive.is_file() {
        let bin = scratch.join("pause");
        run(Command::new("gcc")
            .args(["-static", "-O2", "-o"])
            .arg(&bin)
            .arg(&source))
        .context("compiling the pause program (gcc -static)")?;
        write_archive(
            &archive,
            PAUSE,
            &[File::copy(&bin, "pause", 0o755)],
            &pause_config,
        )?;
    }
    Ok(Image {
        reference: PAUSE.into(),
        archive,
    })
}

fn busybox(cache: &Path, scratch: &Path) -> anyhow::Result<Image> {
    let bin = Path::new("/bin/busybox");
    let linked = Command::new("ldd").arg(bin).output()?;
    if linked.status.success() {
        bail!(
            "/bin/busybox is not static: install the Debian package busybox-static (tests/testbed/install.sh does)"
        );
    }
    let list = Command::new(bin).arg("--list").output()?;
    let mut files = vec![
        File::copy(bin, "bin/busybox", 0o755),
        File::dir("tmp", 0o1777),
        File::dir("www", 0o755),
        File::text(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        ),
        File::text("etc/group", "root:x:0:\nnobody:x:65534:\n"),
    ];
    // `lookup` (tests/fixtures/lookup/lookup.c): names resolved through the C library, as an
    // application does, with the pod's resolv.conf; linked against the C library, which comes
    // along (busybox's own resolver is not the one applications use).
    let lookup = scratch.join("lookup");
    run(Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&lookup)
        .arg(workspace_root().join("tests/fixtures/lookup/lookup.c")))
    .context("compiling the lookup program (gcc)")?;
    for lib in ldd(&lookup)? {
        let dest = lib.strip_prefix("/").unwrap_or(&lib).display().to_string();
        files.push(File::copy(&lib, &dest, 0o755));
    }
    files.push(File::copy(&lookup, "bin/lookup", 0o755));
    for applet in String::from_utf8(list.stdout)?.split_whitespace() {
        if applet != "busybox" {
            files.push(File {
                source: Source::Symlink("busybox".into()),
                dest: format!("bin/{applet}"),
                mode: 0o777,
            });
        }
    }
    build(cache, BUSYBOX, &files, &["/bin/sh"], None)
}

/// Static busybox at `bin/busybox` and a link in `bin/` per applet, except `skip` (commands the
/// image has from Debian instead).
fn busybox_files(skip: &[&str]) -> anyhow::Result<Vec<File>> {
    let bin = Path::new("/bin/busybox");
    let linked = Command::new("ldd").arg(bin).output()?;
    if linked.status.success() {
        bail!(
            "/bin/busybox is not static: install the Debian package busybox-static (tests/testbed/install.sh does)"
        );
    }
    let list = Command::new(bin).arg("--list").output()?;
    let mut files = vec![File::copy(bin, "bin/busybox", 0o755)];
    for applet in String::from_utf8(list.stdout)?.split_whitespace() {
        if applet != "busybox" && !skip.contains(&applet) {
            files.push(File {
                source: Source::Symlink("busybox".into()),
                dest: format!("bin/{applet}"),
                mode: 0o777,
            });
        }
    }
    Ok(files)
}

/// Debian's `programs` (each `(host path, path in the image)`) with every library `ldd` names.
fn debian_programs(programs: &[(&str, &str)]) -> anyhow::Result<Vec<File>> {
    let mut files = Vec::new();
    let mut libs = std::collections::BTreeSet::new();
    for (host, dest) in programs {
        let path = Path::new(host);
        if !path.is_file() {
            bail!(
                "{host} is missing: tests/testbed/install.sh installs it (Debian packages socat, netcat-openbsd, bind9-dnsutils)"
            );
        }
        libs.extend(ldd(path)?);
        files.push(File::copy(path, dest, 0o755));
    }
    for lib in libs {
        let dest = lib.strip_prefix("/").unwrap_or(&lib).display().to_string();
        files.push(File::copy(&lib, &dest, 0o755));
    }
    Ok(files)
}

/// The root user and `nobody`, `/tmp`: what both images of the MCS suite share.
fn base_files() -> Vec<File> {
    vec![
        File::dir("tmp", 0o1777),
        File::text(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        ),
        File::text("etc/group", "root:x:0:\nnobody:x:65534:\n"),
    ]
}

/// [`SOCAT`]: what the suite's listener script runs (`sh`, `grep -E`, `awk`, `tr`, `echo`,
/// `socat ... SYSTEM:'echo ...'`, whose `SYSTEM` is `/bin/sh -c`).
fn socat(cache: &Path) -> anyhow::Result<Image> {
    let mut files = base_files();
    files.extend(busybox_files(&[])?);
    files.extend(debian_programs(&[("/usr/bin/socat", "usr/bin/socat")])?);
    build(cache, SOCAT, &files, &["socat"], None)
}

/// [`NETSHOOT`]: the suite's request pod runs `sh -c` with `nc -4 -v -w 2`, `nslookup -type=A|AAAA|SRV`
/// (bind9's output format, which it parses), `grep`, `tail`, `awk`.
fn netshoot(cache: &Path) -> anyhow::Result<Image> {
    let mut files = base_files();
    // Debian's busybox runs its own applets before looking at PATH (`sh -c 'nc ...'` would run
    // busybox's nc): the shell is Debian's dash, which runs what PATH finds.
    files.extend(busybox_files(&["sh", "nc", "nslookup", "netcat"])?);
    files.extend(debian_programs(&[
        ("/bin/dash", "bin/sh"),
        ("/bin/nc.openbsd", "usr/bin/nc"),
        ("/usr/bin/nslookup", "usr/bin/nslookup"),
        ("/usr/bin/dig", "usr/bin/dig"),
    ])?);
    build_config(
        cache,
        NETSHOOT,
        &files,
        &Config {
            entrypoint: &[],
            cmd: &["sh"],
            user: None,
        },
    )
}

fn xcc_image(cache: &Path) -> anyhow::Result<Image> {
    let binaries = release_binaries()?;
    let mut files = vec![
        File::dir("tmp", 0o1777),
        File::dir("home/nonroot", 0o755),
        File::text(
            "etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        ),
        File::text(
            "etc/group",
            "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
        ),
    ];
    let certs = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if certs.is_file() {
        files.push(File::copy(
            certs,
            "etc/ssl/certs/ca-certificates.crt",
            0o644,
        ));
    }
    let mut libs = std::collections::BTreeSet::new();
    for bin in &binaries {
        libs.extend(ldd(bin)?);
        files.push(File {
            source: Source::Strip(bin.clone()),
            dest: format!(
                "usr/local/bin/{}",
                bin.file_name().expect("a file").to_string_lossy()
            ),
            mode: 0o755,
        });
    }
    for lib in libs {
        let dest = lib.strip_prefix("/").unwrap_or(&lib).display().to_string();
        files.push(File::copy(&lib, &dest, 0o755));
    }
    build(
        cache,
        &xcc(),
        &files,
        &["xcc-agent", "--help"],
        Some("65532:65532"),
    )
}

/// The release binaries, checked to be at least as new as every source they are built from (the
/// files cargo's dep-info `<binary>.d` lists, which are exactly the workspace sources of that
/// binary: cargo rebuilds when one of them is newer).
pub fn release_binaries() -> anyhow::Result<Vec<PathBuf>> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let mut out = Vec::new();
    for name in XCC_BINARIES {
        let bin = target.join("release").join(name);
        let Ok(meta) = std::fs::metadata(&bin) else {
            bail!(
                "the xcc image needs the release binary {}, which is missing: run `{RELEASE_BUILD}` (./test.sh does)",
                bin.display()
            );
        };
        let built = meta.modified()?;
        let dep_info = target.join("release").join(format!("{name}.d"));
        let sources = std::fs::read_to_string(&dep_info).with_context(|| {
            format!(
                "reading {} (cargo's list of the sources of {name}): run `{RELEASE_BUILD}`",
                dep_info.display()
            )
        })?;
        // Git's own files are listed for the revision stamp only (kube-support's build script):
        // a commit made meanwhile changes no behaviour of the binary.
        let sources = dep_info_sources(&sources)
            .into_iter()
            .filter(|s| !s.components().any(|c| c.as_os_str() == ".git"));
        for source in sources {
            let newer = match std::fs::metadata(&source).and_then(|m| m.modified()) {
                Ok(modified) => modified > built,
                Err(_) => true, // gone: the binary was built from sources that changed since
            };
            if newer {
                bail!(
                    "the release binary {} is older than its source {}: run `{RELEASE_BUILD}` (./test.sh does)",
                    bin.display(),
                    source.display()
                );
            }
        }
        out.push(bin);
    }
    Ok(out)
}

/// The prerequisites of a Makefile-style dep-info file (`target: a.rs b\ c.rs ...`).
fn dep_info_sources(text: &str) -> Vec<PathBuf> {
    let Some(line) = text.lines().next() else {
        return vec![];
    };
    let Some((_, deps)) = line.split_once(": ") else {
        return vec![];
    };
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' => {
                if !current.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    out
}

/// The shared libraries (and the dynamic loader) `ldd` names for `bin`, symlinks resolved to the
/// paths the loader asks for.
fn ldd(bin: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(bin).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if text.contains("not a dynamic executable") {
            return Ok(vec![]);
        }
        bail!("ldd {} failed", bin.display());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// What an image runs: its config's `Entrypoint`, `Cmd` and `User`.
struct Config<'a> {
    entrypoint: &'a [&'a str],
    cmd: &'a [&'a str],
    user: Option<&'a str>,
}

/// The cached archive of an image made of `files`, built when missing.
fn build(
    cache: &Path,
    reference: &str,
    files: &[File],
    entrypoint: &[&str],
    user: Option<&str>,
) -> anyhow::Result<Image> {
    build_config(
        cache,
        reference,
        files,
        &Config {
            entrypoint,
            cmd: &[],
            user,
        },
    )
}

/// [`build`] with a whole [`Config`].
fn build_config(
    cache: &Path,
    reference: &str,
    files: &[File],
    config: &Config<'_>,
) -> anyhow::Result<Image> {
    let key = key(files, config)?;
    let stem: String = reference
        .rsplit('/')
        .next()
        .unwrap_or(reference)
        .replace(':', "-");
    let archive = cache.join(format!("{stem}-{key}.tar"));
    if !archive.is_file() {
        write_archive(&archive, reference, files, config)?;
        prune(cache, &stem, &archive);
    }
    Ok(Image {
        reference: reference.into(),
        archive,
    })
}

/// Removes the archives of earlier inputs of image `stem` (each release build makes a new xcc
/// archive), except those written in the last ten minutes, which a concurrent test bed may be
/// importing.
fn prune(cache: &Path, stem: &str, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let Some(key) = name
            .strip_prefix(&format!("{stem}-"))
            .and_then(|rest| rest.strip_suffix(".tar"))
        else {
            continue;
        };
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > std::time::Duration::from_secs(600));
        if path != keep && key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()) && old {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// SHA-256 (16 hex digits) of the image's inputs.
fn key(files: &[File], config: &Config<'_>) -> anyhow::Result<String> {
    let (entrypoint, user) = (config.entrypoint, config.user);
    let mut manifest = format!("v1 {entrypoint:?} {user:?}\n");
    if !config.cmd.is_empty() {
        manifest.push_str(&format!("cmd {:?}\n", config.cmd));
    }
    let sources: Vec<&Path> = files
        .iter()
        .filter_map(|f| match &f.source {
            Source::Copy(p) | Source::Strip(p) => Some(p.as_path()),
            _ => None,
        })
        .collect();
    let sums = sha256_files(&sources)?;
    let mut sums = sums.into_iter();
    for f in files {
        let what = match &f.source {
            Source::Copy(_) => format!("copy {}", sums.next().expect("one per source")),
            Source::Strip(_) => format!("strip {}", sums.next().expect("one per source")),
            Source::Text(t) => format!("text {t:?}"),
            Source::Symlink(t) => format!("link {t}"),
            Source::Dir => "dir".into(),
        };
        manifest.push_str(&format!("{} {:o} {what}\n", f.dest, f.mode));
    }
    Ok(sha256_bytes(manifest.as_bytes())?[..16].to_string())
}

fn sha256_files(paths: &[&Path]) -> anyhow::Result<Vec<String>> {
    if paths.is_empty() {
        return Ok(vec![]);
    }
    let out = Command::new("sha256sum").args(paths).output()?;
    if !out.status.success() {
        bail!(
            "sha256sum failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect())
}

fn sha256_bytes(bytes: &[u8]) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child.stdin.take().expect("piped").write_all(bytes)?;
    let out = child.wait_with_output()?;
    Ok(String::from_utf8(out.stdout)?
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let out = command.output()?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Writes a Docker image archive of `files` to `archive` (atomically: a temporary name, then a
/// rename, so that concurrent builders of the same image never see half an archive).
fn write_archive(
    archive: &Path,
    reference: &str,
    files: &[File],
    image: &Config<'_>,
) -> anyhow::Result<()> {
    let work = tempfile::Builder::new()
        .prefix("xcc-image-")
        .tempdir_in(archive.parent().expect("in the cache"))?;
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir_all(&rootfs)?;
    for f in files {
        let dest = rootfs.join(&f.dest);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match &f.source {
            Source::Copy(p) => {
                std::fs::copy(p, &dest).with_context(|| format!("copying {}", p.display()))?;
            }
            Source::Strip(p) => run(Command::new("strip")
                .arg("--strip-all")
                .arg("-o")
                .arg(&dest)
                .arg(p))
            .with_context(|| format!("stripping {}", p.display()))?,
            Source::Text(t) => std::fs::write(&dest, t)?,
            Source::Symlink(t) => std::os::unix::fs::symlink(t, &dest)?,
            Source::Dir => std::fs::create_dir_all(&dest)?,
        }
        if !matches!(f.source, Source::Symlink(_)) {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(f.mode))?;
        }
    }
    let layer = work.path().join("layer.tar");
    run(Command::new("tar")
        .args([
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
        ])
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."))?;
    let diff_id = sha256_files(&[&layer])?.remove(0);
    let mut config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": image.entrypoint,
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
    });
    if image.entrypoint.is_empty() {
        config["config"]
            .as_object_mut()
            .expect("an object")
            .remove("Entrypoint");
    }
    if !image.cmd.is_empty() {
        config["config"]["Cmd"] = image.cmd.into();
    }
    if let Some(user) = image.user {
        config["config"]["User"] = user.into();
    }
    let config = serde_json::to_vec(&config)?;
    let config_id = sha256_bytes(&config)?;
    let image_dir = work.path().join("image");
    std::fs::create_dir_all(image_dir.join(&diff_id))?;
    std::fs::rename(&layer, image_dir.join(&diff_id).join("layer.tar"))?;
    std::fs::write(image_dir.join(format!("{config_id}.json")), &config)?;
    let manifest = serde_json::json!([{
        "Config": format!("{config_id}.json"),
        "RepoTags": [reference],
        "Layers": [format!("{diff_id}/layer.tar")],
    }]);
    std::fs::write(
        image_dir.join("manifest.json"),
        serde_json::to_vec(&manifest)?,
    )?;
    let tmp = work.path().join("image.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(&image_dir)
        .arg("-cf")
        .arg(&tmp)
        .arg("."))?;
    std::fs::rename(&tmp, archive)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_info_lists_every_source_with_escaped_spaces() {
        let text = "/t/release/xcc-agent: /w/agent/src/main.rs /w/my\\ dir/lib.rs /w/dns/src/zone.rs\n\n/w/agent/src/main.rs:\n";
        assert_eq!(
            dep_info_sources(text),
            vec![
                PathBuf::from("/w/agent/src/main.rs"),
                PathBuf::from("/w/my dir/lib.rs"),
                PathBuf::from("/w/dns/src/zone.rs"),
            ]
        );
    }
}
