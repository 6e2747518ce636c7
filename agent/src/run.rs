//! Wiring: runtime, table, feeds, DNS and admin servers, and shutdown on SIGTERM/SIGINT.

use std::sync::{Arc, atomic::AtomicBool};

use anyhow::Context;
use xcc_dns::{Handler, RecordTable, Sockets, Zone, ZoneSettings};

use kube::runtime::events::{Recorder, Reporter};

use crate::{
    admin::{self, AdminState},
    args::{Args, KubeArgs, LogArgs, LogFormat},
    metrics::Metrics,
    records::RecordsFeed,
    slices::{self, SliceIndex},
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
    // One thread: a current-thread runtime, which skips the cross-thread wake-ups of the
    // work-stealing scheduler (a third less CPU per query when pinned to one core).
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    let runtime = builder
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

    let feed = match args.records.file.clone() {
        Some(path) => {
            let mut feed = RecordsFeed::new(path, table.clone(), metrics.clone());
            // Fail fast on a bad file at start: there is no last good table to fall back on yet.
            feed.refresh()?;
            ready.store(true, std::sync::atomic::Ordering::Release);
            Feed::Records(feed)
        }
        None => Feed::Slices(kube_client(&args.kube).await?),
    };

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
            ready: ready.clone(),
        },
        stopped(stop_rx.clone()),
    ));
    let source = match &feed {
        Feed::Records(feed) => format!("records file {}", feed.path().display()),
        Feed::Slices(_) => format!("EndpointSlices in namespace {}", args.kube.namespace),
    };
    let watcher = match feed {
        Feed::Records(feed) => {
            tokio::spawn(feed.watch(args.records.poll_interval, stop_rx.clone()))
        }
        Feed::Slices(client) => {
            let reporter = Reporter {
                controller: "xcc-agent".into(),
                instance: args.kube.pod_name.clone(),
            };
            let recorder = Recorder::new(client.clone(), reporter);
            let run = slices::run(
                client,
                args.kube.namespace.clone(),
                SliceIndex::new(table.clone()),
                recorder,
                metrics.clone(),
                ready.clone(),
            );
            let stop = stopped(stop_rx.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = run => {}
                    () = stop => {}
                }
            })
        }
    };
    tracing::info!(
        dns = %dns_addr,
        admin = %admin_addr,
        zones = ?args.dns.zones,
        udp_sockets,
        threads = tokio::runtime::Handle::current().metrics().num_workers(),
        %source,
        "xcc-agent serving"
    );

    let signal = shutdown_signal().await?;
    tracing::info!(signal, "shutting down");
    let _ = stop_tx.send(true);
    dns.await.context("DNS server task")??;
    admin.await.context("admin server task")??;
    watcher.await.context("feed task")?;
    tracing::info!("stopped");
    Ok(())
}

/// Where the table's records come from.
enum Feed {
    Records(RecordsFeed),
    Slices(kube::Client),
}

async fn kube_client(args: &KubeArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration: run in a pod, set KUBECONFIG or --kubeconfig, \
             or give --records FILE for standalone mode",
        )?,
    };
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
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
