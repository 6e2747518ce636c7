//! `xcc-controller --uninstall`: undo what the controller did, so that the original XCC (or
//! nothing) can take over. Run it with the controller stopped:
//! 1. xcc's finalizer comes off every GatewayDNS, so deleting one no longer waits for a controller
//!    that is gone;
//! 2. on every Cluster API cluster of every namespace, the EndpointSlices in `xcc-dns` that
//!    xcc-controller wrote (label `endpointslice.kubernetes.io/managed-by` = xcc-controller, both
//!    XCC annotations; the GatewayDNS of any namespace, as `spec.resolveFrom` reaches other
//!    namespaces' clusters) are deleted. The original
//!    controller's slices (no such label) and anything made by a person are never touched.
//!
//! A slice the original dns-server cannot read (IPv6) is deleted only where an xcc-agent is
//! announced: elsewhere an original dns-server may run, and it dies when such a slice is deleted.
//! Those are listed instead. A cluster that cannot be reached is reported, the others are still
//! cleaned, and the exit status says so.

use std::collections::BTreeSet;

use anyhow::Context as _;
use k8s_openapi::{
    api::{coordination::v1::Lease, discovery::v1::EndpointSlice},
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
};

use xcc_kube::bounded;

use crate::{
    args::Args,
    desired::{
        HOSTNAME_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, REF_ANNOTATION, SLICE_NAMESPACE,
        readable_by,
    },
    gatewaydns::GatewayDNS,
    reconcile::FINALIZER,
    workload::{CALL_TIMEOUT, Workloads, delete_slice, read_announcement},
};

/// What `--uninstall` did; `failures` non-empty means it must be run again.
#[derive(Debug, Default)]
pub struct Report {
    pub finalizers_removed: Vec<String>,
    pub deleted: Vec<String>,
    pub left: Vec<String>,
    pub failures: Vec<String>,
}

/// Runs the uninstall against the management cluster of `args`, printing each step to stdout and
/// each failure to stderr. `Ok(false)`: some cluster could not be cleaned.
pub async fn run(args: &Args) -> anyhow::Result<bool> {
    let client = args.own.client().await?;
    let report = uninstall(client, args).await?;
    for line in &report.finalizers_removed {
        println!("finalizer removed: GatewayDNS {line}");
    }
    for line in &report.deleted {
        println!("deleted: {line}");
    }
    for line in &report.left {
        println!("left: {line}");
    }
    for line in &report.failures {
        xcc_kube::logging::fatal(
            "xcc-controller",
            &format!("xcc-controller --uninstall: {line}"),
        );
    }
    println!(
        "uninstall: {} finalizer(s) removed, {} EndpointSlice(s) deleted, {} left, {} cluster(s) failed",
        report.finalizers_removed.len(),
        report.deleted.len(),
        report.left.len(),
        report.failures.len()
    );
    Ok(report.failures.is_empty())
}

async fn uninstall(client: Client, args: &Args) -> anyhow::Result<Report> {
    refuse_while_running(&client, args).await?;
    let mut report = Report::default();
    remove_finalizers(&client, &mut report).await?;
    clean_clusters(client, args, &mut report).await?;
    Ok(report)
}

/// Fails while a controller holds the leader Lease: one still running would put back at once
/// what this removes.
async fn refuse_while_running(client: &Client, args: &Args) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), args.lease_namespace());
    let lease_name = args.lease_name();
    match leases.get_opt(lease_name).await {
        Ok(Some(lease)) => {
            if let Some(holder) = live_holder(&lease, Timestamp::now()) {
                anyhow::bail!(
                    "xcc-controller {holder} holds Lease {}/{lease_name}: it is still running and would undo the uninstall; stop it first (kubectl -n {} scale deployment xcc-controller --replicas=0) and run again once its Lease has expired",
                    args.lease_namespace(),
                    args.lease_namespace()
                );
            }
        }
        Ok(None) => {}
        // Without leader election there may be no Lease, nor the right to read it.
        Err(error) => {
            tracing::debug!(%error, "cannot read the leader Lease; not checking for a running controller")
        }
    }
    Ok(())
}

/// Removes this controller's finalizer from every GatewayDNS.
async fn remove_finalizers(client: &Client, report: &mut Report) -> anyhow::Result<()> {
    let gateways: Api<GatewayDNS> = Api::all(client.clone());
    let all = gateways
        .list(&ListParams::default())
        .await
        .context("cannot list GatewayDNS on the management cluster")?;
    for gateway in &all.items {
        let finalizers = gateway.finalizers().to_vec();
        if !finalizers.iter().any(|f| f == FINALIZER) {
            continue;
        }
        let namespace = gateway.namespace().unwrap_or_default();
        let name = gateway.name_any();
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
        // With the resourceVersion read: if someone changed the object meanwhile, fail (409)
        // rather than drop the finalizer someone else just added.
        let patch = serde_json::json!({
            "metadata": {
                "finalizers": kept,
                "resourceVersion": gateway.resource_version(),
            }
        });
        let api: Api<GatewayDNS> = Api::namespaced(client.clone(), &namespace);
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => report
                .finalizers_removed
                .push(format!("{namespace}/{name}")),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => report.failures.push(format!(
                "cannot remove the finalizer {FINALIZER} from GatewayDNS {namespace}/{name}: {e}"
            )),
        }
    }
    Ok(())
}

/// Deletes this controller's slices on every workload cluster of every Cluster API Cluster.
async fn clean_clusters(client: Client, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let clusters = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta1",
        "Cluster",
    ));
    let clusters = match Api::<DynamicObject>::all_with(client.clone(), &clusters)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        // Without Cluster API there is nowhere we could have written.
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e).context("cannot list Cluster API Clusters"),
    };
    let (trigger, _unused) = tokio::sync::mpsc::unbounded_channel();
    let workloads = Workloads::new(
        client.clone(),
        xcc_kube::PeerClients::new(args.trust),
        trigger,
        args.announcement_ttl,
    );
    let mut seen = BTreeSet::new();
    for cluster in &clusters {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        if !seen.insert((namespace.clone(), name.clone())) {
            continue;
        }
        if let Err(failure) = clean_cluster(&workloads, &namespace, &name, report).await {
            report
                .failures
                .push(format!("cluster {namespace}/{name}: {failure}"));
        }
    }
    Ok(())
}

/// Deletes xcc-controller's slices on cluster `namespace/cluster`.
async fn clean_cluster(
    workloads: &Workloads,
    namespace: &str,
    cluster: &str,
    report: &mut Report,
) -> Result<(), String> {
    let client = workloads
        .client(namespace, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), SLICE_NAMESPACE);
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let existing = match tokio::time::timeout(
        CALL_TIMEOUT,
        slices.list(&ListParams::default().labels(&selector)),
    )
    .await
    {
        Ok(Ok(list)) => list.items,
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Vec::new(),
        Ok(Err(kube::Error::Api(s))) => {
            return Err(format!(
                "cannot list EndpointSlices in {SLICE_NAMESPACE}: {} ({})",
                s.message, s.code
            ));
        }
        Ok(Err(e)) => {
            return Err(format!(
                "unreachable, nothing deleted there (cannot list EndpointSlices in {SLICE_NAMESPACE}: {}); run --uninstall again once it answers",
                bounded(&e)
            ));
        }
        Err(_) => {
            return Err(format!(
                "unreachable, nothing deleted there (timed out listing EndpointSlices in {SLICE_NAMESPACE}); run --uninstall again once it answers"
            ));
        }
    };
    // Of any namespace's GatewayDNS: `spec.resolveFrom` sends slices to other namespaces' clusters.
    let ours: Vec<&EndpointSlice> = existing
        .iter()
        .filter(|s| {
            let annotations = s.annotations();
            annotations.contains_key(HOSTNAME_ANNOTATION)
                && annotations.contains_key(REF_ANNOTATION)
        })
        .collect();
    if ours.is_empty() {
        return Ok(());
    }
    let agent = read_announcement(&client).await?;
    let mut failures = Vec::new();
    for slice in ours {
        let name = slice.name_any();
        let what = format!(
            "EndpointSlice {SLICE_NAMESPACE}/{name} ({}) on cluster {namespace}/{cluster}",
            slice.address_type
        );
        if !readable_by(slice, agent.as_ref()) {
            report.left.push(format!(
                "{what}: no xcc-agent is announced there, and the original XCC dns-server crashes when a slice it cannot read is deleted; delete it by hand where no original dns-server runs"
            ));
            continue;
        }
        match delete_slice(&slices, &name).await {
            Ok(true) => report.deleted.push(what),
            Ok(false) => {}
            Err(problem) => failures.push(format!("{problem} (on cluster {namespace}/{cluster})")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// The holder of `lease` if its last renewal is younger than its duration at `now`.
fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    (now.as_second() < renewed.as_second() + duration).then_some(holder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime,
    };

    fn lease(holder: Option<&str>, renewed: i64, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_running_controller_is_recognised_by_its_fresh_lease() {
        let now = Timestamp::from_second(1_700_000_100).unwrap();
        assert_eq!(
            live_holder(&lease(Some("xcc-controller-abc"), 1_700_000_095, 15), now).as_deref(),
            Some("xcc-controller-abc")
        );
        assert_eq!(
            live_holder(&lease(Some("xcc-controller-abc"), 1_700_000_080, 15), now),
            None,
            "expired: the controller is gone"
        );
        assert_eq!(
            live_holder(&lease(None, 1_700_000_095, 15), now),
            None,
            "released"
        );
        assert_eq!(live_holder(&Lease::default(), now), None);
    }
}
