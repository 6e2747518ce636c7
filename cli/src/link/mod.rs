//! `link`: API projection between a service cluster (upstream) and a workload cluster
//! (downstream), the Services Toolkit way, in one command.
//!
//! ```text
//!  service cluster (S)                          workload cluster (W)
//!  UpstreamClusterLink N/L  ──agent──▶ Secret   Secret N/L-upstream-kubeconfig (the copy)
//!                                  N/L-kubeconfig ──kubectl xcc link──▶ │
//!                                                DownstreamClusterLink N/L ──agent──▶ proxy
//! ```
//!
//! Everything is read and checked first: both contexts answer, both CRDs are installed, and no
//! object of the names it would write exists that it did not make for this pair of clusters
//! (label `app.kubernetes.io/managed-by=kubectl-xcc`, annotations naming the other cluster by
//! its kube-system UID). Then it applies the UpstreamClusterLink, waits for the agent's
//! kubeconfig, checks it against the trust rules the workload agent applies, and only then
//! writes on W. The token in the copy is short-lived: W's agent renews it in place with the
//! service cluster before it expires (running the command again also refreshes it).

mod names;
mod objects;
mod readiness;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams, Patch},
};
use xcc_kube::PeerTrust;

use crate::{
    Error,
    args::LinkArgs,
    cluster::{cluster_id, ensure_namespace},
    contexts::{self, Target},
    error::{describe, is_not_found},
};
pub use names::check_namespace;
use names::{default_name, link_name, upstream_secret, workload_secret};
use objects::{
    GROUP, SERVICE_CLUSTER, TOKEN_EXPIRES, WORKLOAD_CLUSTER, apply_params, copied_secret,
    downstream_link, kubeconfig_of, may_overwrite, resource, upstream_link,
};
use readiness::{Readiness, describe_failing, lasting, pending, readiness, wait};

/// The namespace of the reference's examples.
pub const DEFAULT_NAMESPACE: &str = "services-toolkit";

/// Fails when the CRD of `kind` (plural `plural`) is not served by `target`.
async fn require_crd(target: &Target, kind: &str, namespace: &str) -> Result<(), Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(target.client.clone(), namespace, &resource(kind));
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Err(Error::Failed(format!(
            "context {:?}: the CRD {}.{GROUP} ({kind}) is not installed; apply manifests/crds \
             and manifests/agent/projection.yaml there first; nothing was changed",
            target.context,
            resource(kind).plural
        ))),
        Err(e) => Err(Error::Failed(format!(
            "cannot read {kind}s on context {:?}: {}; nothing was changed",
            target.context,
            describe(&e)
        ))),
    }
}

pub async fn run(args: LinkArgs) -> Result<(), Error> {
    // Read and check everything before the first write.
    let pair = Pair::connect(&args).await?;
    let existing_copy = pair.check_ours().await?;
    // The service cluster: the link, then the kubeconfig its agent makes.
    pair.apply_upstream().await?;
    let (kubeconfig, expires) = pair.await_kubeconfig().await?;
    // The workload cluster: the copy, then the link.
    pair.write_copy(existing_copy.as_ref(), &kubeconfig, expires.as_deref())
        .await?;
    pair.apply_downstream().await?;
    let message = pair.await_downstream().await?;
    println!("{} is Ready: {message}", pair.downstream_what());
    pair.print_next(expires.as_deref());
    Ok(())
}

/// The two clusters `link` joins, and the names it reads and writes on them.
struct Pair {
    name: String,
    namespace: String,
    service: Target,
    workload: Target,
    /// The kube-system UIDs of the two clusters.
    service_uid: String,
    workload_uid: String,
    /// How long to wait for each link to be Ready.
    timeout: Duration,
}

impl Pair {
    /// Checks the arguments, connects to both contexts, reads their cluster IDs and checks that
    /// both CRDs are installed.
    async fn connect(args: &LinkArgs) -> Result<Pair, Error> {
        let kubeconfig = contexts::load(args.kubeconfig.as_deref())?;
        contexts::require(&kubeconfig, &args.service_context)?;
        contexts::require(&kubeconfig, &args.workload_context)?;
        check_namespace(&args.namespace)?;
        let name = link_name(args.name.as_deref(), &args.workload_context)?;
        let namespace = args.namespace.as_str();
        let service =
            contexts::client(&kubeconfig, &args.service_context, args.request_timeout).await?;
        let workload =
            contexts::client(&kubeconfig, &args.workload_context, args.request_timeout).await?;
        let service_uid = cluster_id(&service).await?;
        let workload_uid = cluster_id(&workload).await?;
        require_crd(&service, "UpstreamClusterLink", namespace).await?;
        require_crd(&workload, "DownstreamClusterLink", namespace).await?;
        Ok(Pair {
            name,
            namespace: namespace.to_string(),
            service,
            workload,
            service_uid,
            workload_uid,
            timeout: args.timeout,
        })
    }

    fn upstream_links(&self) -> Api<DynamicObject> {
        let resource = resource("UpstreamClusterLink");
        Api::namespaced_with(self.service.client.clone(), &self.namespace, &resource)
    }

    fn downstream_links(&self) -> Api<DynamicObject> {
        let resource = resource("DownstreamClusterLink");
        Api::namespaced_with(self.workload.client.clone(), &self.namespace, &resource)
    }

    fn workload_secrets(&self) -> Api<Secret> {
        Api::namespaced(self.workload.client.clone(), &self.namespace)
    }

    /// The name of the kubeconfig's copy on the workload cluster.
    fn copy_name(&self) -> String {
        workload_secret(&self.name)
    }

    fn upstream_what(&self) -> String {
        let (namespace, name) = (&self.namespace, &self.name);
        on(
            format!("UpstreamClusterLink {namespace}/{name}"),
            &self.service,
        )
    }

    fn downstream_what(&self) -> String {
        let (namespace, name) = (&self.namespace, &self.name);
        on(
            format!("DownstreamClusterLink {namespace}/{name}"),
            &self.workload,
        )
    }

    fn copy_what(&self) -> String {
        let namespace = &self.namespace;
        on(
            format!("Secret {namespace}/{}", self.copy_name()),
            &self.workload,
        )
    }

    /// Fails unless every object `link` would write is absent or was made by it for this pair of
    /// clusters; returns the kubeconfig's copy on the workload cluster, if there is one.
    async fn check_ours(&self) -> Result<Option<Secret>, Error> {
        let (namespace, name) = (&self.namespace, &self.name);
        let upstream = self.upstream_links().get_opt(name).await.map_err(read(
            &self.service,
            format!("UpstreamClusterLink {namespace}/{name}"),
        ))?;
        if let Some(existing) = upstream {
            may_overwrite(
                &existing.metadata,
                &self.upstream_what(),
                WORKLOAD_CLUSTER,
                &self.workload_uid,
                "workload cluster",
            )?;
        }
        let copy_name = self.copy_name();
        let existing_copy = self
            .workload_secrets()
            .get_opt(&copy_name)
            .await
            .map_err(read(
                &self.workload,
                format!("Secret {namespace}/{copy_name}"),
            ))?;
        if let Some(existing) = &existing_copy {
            may_overwrite(
                &existing.metadata,
                &self.copy_what(),
                SERVICE_CLUSTER,
                &self.service_uid,
                "service cluster",
            )?;
        }
        let downstream = self.downstream_links().get_opt(name).await.map_err(read(
            &self.workload,
            format!("DownstreamClusterLink {namespace}/{name}"),
        ))?;
        if let Some(existing) = downstream {
            may_overwrite(
                &existing.metadata,
                &self.downstream_what(),
                SERVICE_CLUSTER,
                &self.service_uid,
                "service cluster",
            )?;
        }
        Ok(existing_copy)
    }

    /// Applies the UpstreamClusterLink on the service cluster.
    async fn apply_upstream(&self) -> Result<(), Error> {
        let (namespace, name) = (self.namespace.as_str(), self.name.as_str());
        ensure_namespace(&self.service, namespace).await?;
        let workload_name = default_name(&self.workload.context);
        let link = upstream_link(name, namespace, &workload_name, &self.workload_uid);
        let upstream_what = self.upstream_what();
        self.upstream_links()
            .patch(name, &apply_params(), &Patch::Apply(link))
            .await
            .map_err(Error::api(format!("cannot apply {upstream_what}")))?;
        println!("applied {upstream_what}");
        Ok(())
    }

    /// Waits for the UpstreamClusterLink to be Ready and its Secret to hold a kubeconfig, and
    /// checks that kubeconfig against the trust rules; returns it with its token's expiry.
    async fn await_kubeconfig(&self) -> Result<(Vec<u8>, Option<String>), Error> {
        let (namespace, name) = (self.namespace.as_str(), self.name.as_str());
        let (upstream_what, workload) = (self.upstream_what(), &self.workload);
        let secret_name = upstream_secret(name);
        let (kubeconfig_text, expires) = wait(
            self.timeout,
            || self.look_upstream(&secret_name),
            |why| {
                Error::Failed(format!(
                    "{upstream_what} is not Ready after {}: {why}; nothing was written on \
                     context {:?}",
                    humantime::format_duration(self.timeout),
                    workload.context
                ))
            },
        )
        .await?;
        // The workload agent refuses what the trust rules refuse: so is it refused here,
        // unwritten.
        xcc_kube::trust::check(
            &kubeconfig_text,
            &format!(
                "the kubeconfig of Secret {namespace}/{secret_name} on context {:?}",
                self.service.context
            ),
            PeerTrust::default(),
        )
        .map_err(|e| {
            Error::Failed(format!(
                "{}; nothing was written on context {:?}",
                describe(&e),
                workload.context
            ))
        })?;
        // The workload agent builds a client of it: so is one built here, so that what only
        // building finds (bad base64, PEM or key) is said now and nothing is copied.
        let mut secret = Secret::default();
        secret.metadata.name = Some(secret_name.clone());
        secret.metadata.namespace = Some(namespace.to_string());
        secret.data = Some(
            [(
                objects::KUBECONFIG_KEY.to_string(),
                k8s_openapi::ByteString(kubeconfig_text.clone()),
            )]
            .into(),
        );
        xcc_kube::trust::peer_client(&secret, objects::KUBECONFIG_KEY, PeerTrust::default())
            .await
            .map_err(|e| {
                Error::Failed(format!(
                    "{} (on context {:?}); nothing was written on context {:?}",
                    describe(&e),
                    self.service.context,
                    workload.context
                ))
            })?;
        println!(
            "{upstream_what} is Ready: Secret {namespace}/{secret_name} holds a kubeconfig for \
             ServiceAccount xcc-upstream-{name}"
        );
        Ok((kubeconfig_text, expires))
    }

    /// One look at the UpstreamClusterLink and at its Secret `secret_name`: the kubeconfig and
    /// its expiry once Ready, why not yet, or the error that waiting cannot mend.
    async fn look_upstream(
        &self,
        secret_name: &str,
    ) -> Result<Result<(Vec<u8>, Option<String>), String>, Error> {
        let namespace = self.namespace.as_str();
        let upstream_what = self.upstream_what();
        let Some(link) = self
            .upstream_links()
            .get_opt(&self.name)
            .await
            .map_err(Error::api(format!("cannot read {upstream_what}")))?
        else {
            return Ok(Err("it is gone (deleted meanwhile?)".to_string()));
        };
        match readiness(&link) {
            Readiness::Pending => Ok(Err(pending(namespace))),
            Readiness::NotReady(failing) if lasting(&failing) => Err(Error::Failed(format!(
                "{upstream_what} is not Ready: {}; nothing was written on context {:?}",
                describe_failing(&failing),
                self.workload.context
            ))),
            Readiness::NotReady(failing) => Ok(Err(describe_failing(&failing))),
            Readiness::Ready(_) => {
                let service_secrets: Api<Secret> =
                    Api::namespaced(self.service.client.clone(), namespace);
                let secret = service_secrets
                    .get_opt(secret_name)
                    .await
                    .map_err(Error::api(format!(
                        "cannot read Secret {namespace}/{secret_name} on context {:?}",
                        self.service.context
                    )))?;
                match secret.as_ref().and_then(|s| Some((kubeconfig_of(s)?, s))) {
                    Some((text, secret)) => {
                        Ok(Ok((text, secret.annotations().get(TOKEN_EXPIRES).cloned())))
                    }
                    None => Ok(Err(format!(
                        "Ready, but Secret {namespace}/{secret_name} holds no kubeconfig yet"
                    ))),
                }
            }
        }
    }

    /// Writes the kubeconfig's copy on the workload cluster (`existing`: the copy there now).
    async fn write_copy(
        &self,
        existing: Option<&Secret>,
        kubeconfig: &[u8],
        expires: Option<&str>,
    ) -> Result<(), Error> {
        let (namespace, name) = (self.namespace.as_str(), self.name.as_str());
        ensure_namespace(&self.workload, namespace).await?;
        let unchanged = existing.is_some_and(|s| {
            kubeconfig_of(s).as_deref() == Some(kubeconfig)
                && s.annotations().get(TOKEN_EXPIRES).map(String::as_str) == expires
        });
        let copy = copied_secret(name, namespace, kubeconfig, &self.service_uid, expires);
        let copy_what = self.copy_what();
        self.workload_secrets()
            .patch(&self.copy_name(), &apply_params(), &Patch::Apply(copy))
            .await
            .map_err(Error::api(format!("cannot apply {copy_what}")))?;
        if unchanged {
            println!("{copy_what} already holds that kubeconfig");
        } else {
            println!("wrote the kubeconfig into {copy_what}");
        }
        Ok(())
    }

    /// Applies the DownstreamClusterLink on the workload cluster.
    async fn apply_downstream(&self) -> Result<(), Error> {
        let (namespace, name) = (self.namespace.as_str(), self.name.as_str());
        let service_name = default_name(&self.service.context);
        let link = downstream_link(name, namespace, &service_name, &self.service_uid);
        let downstream_what = self.downstream_what();
        self.downstream_links()
            .patch(name, &apply_params(), &Patch::Apply(link))
            .await
            .map_err(Error::api(format!("cannot apply {downstream_what}")))?;
        println!("applied {downstream_what}");
        Ok(())
    }

    /// Waits for the DownstreamClusterLink to be Ready; returns its Ready message.
    async fn await_downstream(&self) -> Result<String, Error> {
        let downstream_what = self.downstream_what();
        let look = || async {
            let Some(link) = self
                .downstream_links()
                .get_opt(&self.name)
                .await
                .map_err(Error::api(format!("cannot read {downstream_what}")))?
            else {
                return Ok(Err("it is gone (deleted meanwhile?)".to_string()));
            };
            match readiness(&link) {
                Readiness::Pending => Ok(Err(pending(&self.namespace))),
                Readiness::NotReady(failing) if lasting(&failing) => Err(Error::Failed(format!(
                    "{downstream_what} is not Ready: {}",
                    describe_failing(&failing)
                ))),
                Readiness::NotReady(failing) => Ok(Err(describe_failing(&failing))),
                Readiness::Ready(message) => Ok(Ok(message)),
            }
        };
        wait(self.timeout, look, |why| {
            Error::Failed(format!(
                "{downstream_what} is not Ready after {}: {why}",
                humantime::format_duration(self.timeout)
            ))
        })
        .await
    }

    /// What the link gives, and what is left to do.
    fn print_next(&self, expires: Option<&str>) {
        let (namespace, name) = (&self.namespace, &self.name);
        let (service, workload) = (&self.service.context, &self.workload.context);
        let expiry = match expires {
            Some(at) => format!("expires at {at}"),
            None => "expires (the Secret does not say when)".to_string(),
        };
        println!(
            "linked: {workload} projects APIs of {service} through DownstreamClusterLink \
             {namespace}/{name}"
        );
        println!(
            "next: on {service} an APIExportRoleBinding (upstreamClusterLinkRef \
             {namespace}/{name}) grants the link a ClusterRole; on {workload} a \
             ClusterAPIGroupImport (downstreamClusterLinkRef {namespace}/{name}) per API group, \
             and an APIResourceImport per namespace"
        );
        println!(
            "the token of the copied kubeconfig {expiry}; the workload cluster's agent renews it \
             with the service cluster in its last third (running this command again also \
             refreshes it)"
        );
    }
}

/// `what` on `target`'s context.
fn on(what: String, target: &Target) -> String {
    format!("{what} on context {:?}", target.context)
}

/// The error of a failed read of `what` on `target`, before anything was written.
fn read(target: &Target, what: String) -> impl FnOnce(kube::Error) -> Error + use<> {
    let context = target.context.clone();
    move |e: kube::Error| {
        Error::Failed(format!(
            "cannot read {what} on context {context:?}: {}; nothing was changed",
            describe(&e)
        ))
    }
}
