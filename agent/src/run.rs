//! Wiring: runtime, table, feeds, DNS and admin servers, and shutdown on SIGTERM/SIGINT.

use std::sync::{Arc, atomic::AtomicBool};

use anyhow::Context;
use xcc_dns::{Handler, RecordTable, Sockets, Zone, ZoneSettings};

use crate::{
    admin::{self, AdminState},
    args::{Args, LogArgs, LogFormat},
    metrics::Metrics,
    records::RecordsFeed,
};

pub fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.filter).unwrap_or_else(|error| {
        eprintln!(
            "xcc-agent: bad --log filter {:?} ({error}); using \"info\"",
            args.filter
        );
        tracing_subscriber::EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match args.format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub fn main(args: Args) -> anyhow::Result<()> {
    let threads = if args.dns.threads == 0 {
        cpus()
    } else {
        args.dns.threads
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("xcc-agent")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let zones = args
        .dns
        .zones
        .iter()
        .map(|z| Zone::new(z))
        .collect::<Result<Vec<_>, _>>()?;
    let settings = ZoneSettings {
        ttl: args.dns.ttl,
        negative_ttl: args.dns.negative_ttl,
    };
    let table = Arc::new(RecordTable::new(zones, settings)?);
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let Some(path) = args.records.file.clone() else {
        anyhow::bail!(
            "nothing to serve: give --records FILE (or XCC_RECORDS) to serve a records file; \
             see examples/records.yaml"
        );
    };
    let mut feed = RecordsFeed::new(path.clone(), table.clone(), metrics.clone());
    // Fail fast on a bad file at start: there is no last good table to fall back on yet.
    feed.refresh()?;
    ready.store(true, std::sync::atomic::Ordering::Release);

    let udp_sockets = if args.dns.udp_sockets == 0 {
        cpus()
    } else {
        args.dns.udp_sockets
    };
    let sockets = Sockets::bind(args.dns.listen, udp_sockets)?;
    let dns_addr = sockets.local_addr()?;
    let admin_listener = tokio::net::TcpListener::bind(args.admin.admin_listen)
        .await
        .with_context(|| {
            format!(
                "cannot bind the admin server on {}",
                args.admin.admin_listen
            )
        })?;
    let admin_addr = admin_listener.local_addr()?;

    let handler = Handler::new(table.clone(), metrics.clone());
    let dns = tokio::spawn(xcc_dns::serve(handler, sockets, stopped(stop_rx.clone())));
    let admin = tokio::spawn(admin::serve(
        admin_listener,
        AdminState {
            metrics: metrics.clone(),
            ready,
        },
        stopped(stop_rx.clone()),
    ));
    let watcher = tokio::spawn(feed.watch(args.records.poll_interval, stop_rx.clone()));
    tracing::info!(
        dns = %dns_addr,
        admin = %admin_addr,
        zones = ?args.dns.zones,
        udp_sockets,
        threads = tokio::runtime::Handle::current().metrics().num_workers(),
        records = %path.display(),
        "xcc-agent serving"
    );

    let signal = shutdown_signal().await?;
    tracing::info!(signal, "shutting down");
    let _ = stop_tx.send(true);
    dns.await.context("DNS server task")??;
    admin.await.context("admin server task")??;
    watcher.await.context("records watcher task")?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves once the shutdown flag is raised.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn shutdown_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
