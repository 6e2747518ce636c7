//! The monitors: ClusterResource{Import,Export}Monitor name a kind and where its instances name
//! Secrets (`secretPaths`); a Resource{Import,Export}MonitorBinding enables one in a namespace.
//! For every instance of the kind in a bound namespace and every path that names a Secret, the
//! binding keeps one SecretImport (workload cluster) or SecretExport (service cluster) named
//! `<instance>.<path>` (the documentation's `small-postgres-23.status.binding.name`), labelled as
//! the documentation shows and owned by the binding. Generated objects whose instance or path went
//! are deleted; an object of that name that the binding did not generate is left alone.
//!
//! Each binding watches the instances of its namespace (woken through [`Wakers`]); the agent needs
//! get/list/watch on the monitored kinds, granted by a ClusterRole bound to its ServiceAccount.

use std::{collections::BTreeMap, fmt::Debug, sync::Arc, time::Duration};

use jsonpath_rust::{
    parser::{model::JpQuery, parse_json_path},
    query::js_path_process,
};
use k8s_openapi::NamespaceResourceScope;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
    runtime::{
        controller::Action,
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::ObjectRef,
        watcher,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use xcc_sync::kit::Loop;

use super::{
    Error, FINALIZER, Reason, Verdict,
    api::{
        ClusterResourceExportMonitor, ClusterResourceImportMonitor, LocalRef, MonitoredResource,
        ReplicationStatus, ResourceExportMonitorBinding, ResourceImportMonitorBinding,
        SecretExport, SecretExportSpec, SecretImport, SecretImportSpec,
    },
    finalized, write_status,
};
use crate::{
    sink::{self, Counted},
    sources::{Schedule, Typed},
    sync_metrics::SyncMetrics,
    wakers::{WakeWatch, Wakers},
};
use kube::runtime::reflector::ReflectHandle;

const LABEL_PREFIX: &str = "replication.apiresources.multicluster.x-tanzu.vmware.com/";
/// On generated objects: the uid of the binding that generated them.
pub const MONITOR_BINDING_UID: &str =
    "replication.apiresources.multicluster.x-tanzu.vmware.com/monitor-binding-uid";

/// A path of `secretPaths` as a JSONPath query. The documentation writes kubectl's style
/// (`.status.binding.name`); `{.a.b}` and RFC 9535 (`$.a.b`) are accepted too.
pub fn secret_path(path: &str) -> Result<JpQuery, String> {
    let trimmed = path.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(trimmed);
    let query = if inner.starts_with('$') {
        inner.to_string()
    } else if inner.starts_with('.') || inner.starts_with('[') {
        format!("${inner}")
    } else {
        format!("$.{inner}")
    };
    parse_json_path(&query)
        .map_err(|e| format!("secretPaths entry {path:?} is not a JSONPath: {e}"))
}

/// What is wrong with a monitor, if anything: the three `monitored-resource-*` labels must repeat
/// `spec.resource`, and every path must parse.
pub fn validate_monitor(
    labels: &BTreeMap<String, String>,
    resource: &MonitoredResource,
    paths: &[String],
) -> Result<(), String> {
    for (suffix, want) in [
        ("monitored-resource-group", &resource.group),
        ("monitored-resource-version", &resource.version),
        ("monitored-resource-kind", &resource.kind),
    ] {
        let key = format!("{LABEL_PREFIX}{suffix}");
        match labels.get(&key) {
            Some(value) if value == want => {}
            Some(value) => {
                return Err(format!(
                    "label {key} is {value:?} but spec.resource says {want:?}"
                ));
            }
            None => return Err(format!("label {key} is missing (it must be {want:?})")),
        }
    }
    for path in paths {
        secret_path(path)?;
    }
    Ok(())
}

/// The Secret names `instance` gives at `paths`: `(path, name)` for every path that selects
/// exactly one non-empty string.
pub fn secret_names(instance: &Value, paths: &[String]) -> Vec<(String, String)> {
    paths
        .iter()
        .filter_map(|path| {
            let query = secret_path(path).ok()?;
            let found = js_path_process(&query, instance).ok()?;
            let [node] = found.as_slice() else {
                return None;
            };
            let name = node.val.as_str()?;
            (!name.is_empty()).then(|| (path.clone(), name.to_string()))
        })
        .collect()
}

/// `<instance>.<path>`, made a valid object name: `small-postgres-23` + `.status.binding.name`
/// → `small-postgres-23.status.binding.name`.
pub fn generated_name(instance: &str, path: &str) -> String {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$')
        .trim_start_matches('.');
    let raw = format!("{instance}.{path}").to_ascii_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(253);
    name.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// A label value, or `None` when the value cannot be one (longer than 63 characters, or
/// characters labels do not allow).
fn label_value(value: &str) -> Option<String> {
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value
            .chars()
            .next()
            .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric());
    valid.then(|| value.to_string())
}

/// The documentation's labels on a generated object.
pub fn owner_labels(
    resource: &MonitoredResource,
    instance: &DynamicObject,
    binding_uid: &str,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for (suffix, value) in [
        ("secret-owner-group", resource.group.clone()),
        ("secret-owner-version", resource.version.clone()),
        ("secret-owner-kind", resource.kind.clone()),
        ("secret-owner-name", instance.name_any()),
        ("secret-owner-uid", instance.uid().unwrap_or_default()),
        ("monitor-binding-uid", binding_uid.to_string()),
    ] {
        if let Some(value) = label_value(&value) {
            labels.insert(format!("{LABEL_PREFIX}{suffix}"), value);
        }
    }
    labels
}

/// One direction of the monitors.
pub trait Direction: Send + Sync + 'static {
    /// This direction's reconciler name in the sync metrics.
    const RECONCILER: &'static str;
    type Monitor: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    type Binding: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    type Generated: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;

    fn monitor(monitor: &Self::Monitor) -> (&MonitoredResource, &[String]);
    fn monitor_status(monitor: &Self::Monitor) -> Option<&ReplicationStatus>;
    fn monitor_ref(binding: &Self::Binding) -> &str;
    fn binding_status(binding: &Self::Binding) -> Option<&ReplicationStatus>;
    /// The object generated for Secret `secret`, before labels and owner are added.
    fn generate(binding: &Self::Binding, name: &str, secret: &str) -> Self::Generated;
}

pub struct Import;
pub struct Export;

impl Direction for Import {
    const RECONCILER: &'static str = "import-monitor";
    type Monitor = ClusterResourceImportMonitor;
    type Binding = ResourceImportMonitorBinding;
    type Generated = SecretImport;

    fn monitor(monitor: &Self::Monitor) -> (&MonitoredResource, &[String]) {
        (&monitor.spec.resource, &monitor.spec.secret_paths)
    }
    fn monitor_status(monitor: &Self::Monitor) -> Option<&ReplicationStatus> {
        monitor.status.as_ref()
    }
    fn monitor_ref(binding: &Self::Binding) -> &str {
        &binding.spec.monitor_ref.name
    }
    fn binding_status(binding: &Self::Binding) -> Option<&ReplicationStatus> {
        binding.status.as_ref()
    }
    fn generate(binding: &Self::Binding, name: &str, secret: &str) -> SecretImport {
        SecretImport::new(
            name,
            SecretImportSpec {
                secret: LocalRef {
                    name: secret.to_string(),
                },
                remote_kubeconfig: binding.spec.remote_kubeconfig.clone(),
            },
        )
    }
}

impl Direction for Export {
    const RECONCILER: &'static str = "export-monitor";
    type Monitor = ClusterResourceExportMonitor;
    type Binding = ResourceExportMonitorBinding;
    type Generated = SecretExport;

    fn monitor(monitor: &Self::Monitor) -> (&MonitoredResource, &[String]) {
        (&monitor.spec.resource, &monitor.spec.secret_paths)
    }
    fn monitor_status(monitor: &Self::Monitor) -> Option<&ReplicationStatus> {
        monitor.status.as_ref()
    }
    fn monitor_ref(binding: &Self::Binding) -> &str {
        &binding.spec.monitor_ref.name
    }
    fn binding_status(binding: &Self::Binding) -> Option<&ReplicationStatus> {
        binding.status.as_ref()
    }
    fn generate(binding: &Self::Binding, name: &str, secret: &str) -> SecretExport {
        SecretExport::new(
            name,
            SecretExportSpec {
                secret: LocalRef {
                    name: secret.to_string(),
                },
                service_account: binding.spec.service_account.clone(),
            },
        )
    }
}

/// The objects `binding` (uid `binding_uid`) should have generated for `instances`.
pub fn desired<D: Direction>(
    binding: &D::Binding,
    binding_uid: &str,
    resource: &MonitoredResource,
    paths: &[String],
    instances: &[DynamicObject],
) -> Vec<D::Generated> {
    let owner = binding.controller_owner_ref(&());
    let mut out = Vec::new();
    for instance in instances {
        let content = serde_json::to_value(instance).unwrap_or(Value::Null);
        for (path, secret) in secret_names(&content, paths) {
            let mut generated = D::generate(
                binding,
                &generated_name(&instance.name_any(), &path),
                &secret,
            );
            let meta = generated.meta_mut();
            meta.namespace = binding.namespace();
            meta.labels = Some(owner_labels(resource, instance, binding_uid));
            meta.owner_references = owner.clone().map(|o| vec![o]);
            out.push(generated);
        }
    }
    out
}

pub struct Context<D: Direction> {
    pub client: Client,
    pub instances: Wakers<D::Binding>,
    /// Where the writes of generated objects are counted.
    pub counted: Counted,
}

pub async fn reconcile_binding<D: Direction>(
    binding: Arc<D::Binding>,
    ctx: Arc<Context<D>>,
) -> Result<Action, Error> {
    let namespace = binding.namespace().unwrap_or_default();
    let api: Api<D::Binding> = Api::namespaced(ctx.client.clone(), &namespace);
    finalized(
        finalizer(&api, FINALIZER, binding, |event| async {
            match event {
                FinalizerEvent::Apply(binding) => {
                    let verdict = sync_binding::<D>(&binding, &ctx).await;
                    let changed = write_status(
                        &api,
                        binding.as_ref(),
                        D::binding_status(&binding),
                        &verdict,
                        &ctx.counted,
                    )
                    .await?;
                    if changed {
                        tracing::info!(
                            kind = %D::Binding::kind(&()),
                            %namespace,
                            binding = %binding.name_any(),
                            ready = verdict.ready,
                            reason = %verdict.reason,
                            message = %verdict.message,
                            "monitor binding status"
                        );
                    }
                    Ok(Action::requeue(super::requeue(&verdict)))
                }
                FinalizerEvent::Cleanup(binding) => {
                    ctx.instances.stop(&ObjectRef::from_obj(binding.as_ref()));
                    let generated: Api<D::Generated> =
                        Api::namespaced(ctx.client.clone(), &namespace);
                    let uid = binding.uid().unwrap_or_default();
                    delete_generated(&generated, &uid, &[], &ctx.counted).await?;
                    Ok(Action::await_change())
                }
            }
        })
        .await,
    )
}

pub fn error_policy<D: Direction>(
    binding: Arc<D::Binding>,
    error: &Error,
    _: Arc<Context<D>>,
) -> Action {
    tracing::warn!(
        kind = %D::Binding::kind(&()),
        namespace = %binding.namespace().unwrap_or_default(),
        binding = %binding.name_any(),
        error = %xcc_kube::bounded(&error),
        "monitor binding reconcile failed"
    );
    Action::requeue(Duration::from_secs(5))
}

/// Deletes the objects generated by binding `uid` whose names are not in `keep` (each as it was
/// listed: one replaced meanwhile survives).
async fn delete_generated<G>(
    api: &Api<G>,
    uid: &str,
    keep: &[String],
    counted: &Counted,
) -> Result<usize, kube::Error>
where
    G: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let selector = format!("{MONITOR_BINDING_UID}={uid}");
    let mut deleted = 0;
    for object in api.list(&ListParams::default().labels(&selector)).await? {
        let name = object.name_any();
        if !keep.contains(&name)
            && sink::delete_exact(api, &name, object.uid(), object.resource_version(), counted)
                .await?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Generates the objects a binding asks for: reads its monitor, lists the monitored instances
/// (watching them to wake the binding), writes one generated object per instance and deletes
/// the stale ones.
async fn sync_binding<D: Direction>(binding: &D::Binding, ctx: &Context<D>) -> Verdict {
    let namespace = binding.namespace().unwrap_or_default();
    let uid = binding.uid().unwrap_or_default();
    let key = ObjectRef::from_obj(binding);
    let monitor = match read_monitor::<D>(binding, ctx, &key).await {
        Ok(monitor) => monitor,
        Err(verdict) => return verdict,
    };
    let (resource, paths) = D::monitor(&monitor);
    let instances = match watch_and_list_instances(ctx, key, &namespace, resource).await {
        Ok(instances) => instances,
        Err(verdict) => return verdict,
    };
    let desired = desired::<D>(binding, &uid, resource, paths, &instances);
    let generated_kind = D::Generated::kind(&());
    match write_generated::<D>(ctx, &namespace, &uid, &desired).await {
        Err(verdict) => verdict,
        Ok(conflicts) if !conflicts.is_empty() => Verdict::not(
            Reason::Conflict,
            format!(
                "{generated_kind}s {} exist and were not generated by this binding; they are left as is",
                conflicts.join(", ")
            ),
        ),
        Ok(_) => Verdict::ok(
            Reason::Synced,
            format!(
                "{} {generated_kind}(s) for {} {} instance(s)",
                desired.len(),
                instances.len(),
                resource.kind
            ),
        ),
    }
}

/// The binding's monitor, if it exists and is valid; its watch of instances stops when the
/// monitor is gone.
async fn read_monitor<D: Direction>(
    binding: &D::Binding,
    ctx: &Context<D>,
    key: &ObjectRef<D::Binding>,
) -> Result<D::Monitor, Verdict> {
    let monitor_name = D::monitor_ref(binding);
    let monitor_kind = D::Monitor::kind(&());
    let monitor = match Api::<D::Monitor>::all(ctx.client.clone())
        .get_opt(monitor_name)
        .await
    {
        Ok(Some(monitor)) => monitor,
        Ok(None) => {
            ctx.instances.stop(key);
            return Err(Verdict::not(
                Reason::MonitorNotFound,
                format!("{monitor_kind} {monitor_name} (spec.monitorRef) does not exist"),
            ));
        }
        Err(error) => {
            return Err(Verdict::not(
                Reason::WriteFailed,
                format!("cannot read {monitor_kind} {monitor_name}: {error}"),
            ));
        }
    };
    let (resource, paths) = D::monitor(&monitor);
    if let Err(problem) = validate_monitor(monitor.labels(), resource, paths) {
        return Err(Verdict::not(
            Reason::InvalidMonitor,
            format!("{monitor_kind} {monitor_name}: {problem}"),
        ));
    }
    Ok(monitor)
}

/// The instances of the monitored kind in `namespace`, whose watch (started here, or kept)
/// wakes the binding `key` on every change.
async fn watch_and_list_instances<D: Direction>(
    ctx: &Context<D>,
    key: ObjectRef<D::Binding>,
    namespace: &str,
    resource: &MonitoredResource,
) -> Result<Vec<DynamicObject>, Verdict> {
    let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
    let api_resource: ApiResource = match kube::discovery::pinned_kind(&ctx.client, &gvk).await {
        Ok((api_resource, _)) => api_resource,
        Err(error) => {
            return Err(Verdict::not(
                Reason::ResourceNotFound,
                format!(
                    "kind {}/{} {} is not served here: {error}",
                    resource.group, resource.version, resource.kind
                ),
            ));
        }
    };
    let instances_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &api_resource);
    ctx.instances.ensure(
        key,
        format!(
            "{}/{} {namespace}",
            api_resource.api_version, api_resource.plural
        ),
        WakeWatch::new(
            instances_api.clone(),
            watcher::Config::default(),
            Schedule::Local,
            format!("{} in {namespace}", api_resource.plural),
        ),
    );
    match instances_api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(Verdict::not(
            Reason::Forbidden,
            format!(
                "xcc-agent may not list {} in {namespace}: bind a ClusterRole granting \
                 get, list and watch on them to its ServiceAccount ({})",
                api_resource.plural, s.message
            ),
        )),
        Err(error) => Err(Verdict::not(
            Reason::WriteFailed,
            format!(
                "cannot list {} in {namespace}: {error}",
                api_resource.plural
            ),
        )),
    }
}

/// Writes `desired` through the sink (leaving alone an object of the same name that another
/// binding or someone else made) and deletes the binding's stale objects; returns the names
/// left alone.
async fn write_generated<D: Direction>(
    ctx: &Context<D>,
    namespace: &str,
    uid: &str,
    desired: &[D::Generated],
) -> Result<Vec<String>, Verdict> {
    let generated: Api<D::Generated> = Api::namespaced(ctx.client.clone(), namespace);
    let names: Vec<String> = desired.iter().map(|g| g.name_any()).collect();
    let generated_kind = D::Generated::kind(&());
    let mut conflicts = Vec::new();
    for object in desired {
        let name = object.name_any();
        let result = async {
            if let Some(current) = generated.get_opt(&name).await?
                && current
                    .labels()
                    .get(MONITOR_BINDING_UID)
                    .map(String::as_str)
                    != Some(uid)
            {
                return Ok(false);
            }
            let desired = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
            sink::apply_whole(&generated, &name, desired, &ctx.counted).await?;
            Ok::<_, kube::Error>(true)
        }
        .await;
        match result {
            Ok(true) => {}
            Ok(false) => conflicts.push(name),
            Err(error) => {
                return Err(Verdict::not(
                    Reason::WriteFailed,
                    format!("cannot write {generated_kind} {namespace}/{name}: {error}"),
                ));
            }
        }
    }
    if let Err(error) = delete_generated(&generated, uid, &names, &ctx.counted).await {
        return Err(Verdict::not(
            Reason::WriteFailed,
            format!("cannot delete stale {generated_kind}s in {namespace}: {error}"),
        ));
    }
    Ok(conflicts)
}

/// What the monitors' reconciler reads and where its status writes are counted.
pub struct MonitorContext {
    /// The local cluster.
    pub client: Client,
    /// Where the monitors' status writes are counted.
    pub counted: Counted,
}

/// A monitor's own status: are its labels and paths valid?
pub async fn reconcile_monitor<D: Direction>(
    monitor: Arc<D::Monitor>,
    ctx: Arc<MonitorContext>,
) -> Result<Action, Error> {
    let (resource, paths) = D::monitor(&monitor);
    let verdict = match validate_monitor(monitor.labels(), resource, paths) {
        Ok(()) => Verdict::ok(Reason::Valid, "labels and secretPaths are valid"),
        Err(problem) => Verdict::not(Reason::InvalidMonitor, problem),
    };
    let api: Api<D::Monitor> = Api::all(ctx.client.clone());
    write_status(
        &api,
        monitor.as_ref(),
        D::monitor_status(&monitor),
        &verdict,
        &ctx.counted,
    )
    .await?;
    Ok(Action::await_change())
}

pub fn monitor_error_policy<D: Direction>(
    monitor: Arc<D::Monitor>,
    error: &Error,
    _ctx: Arc<MonitorContext>,
) -> Action {
    tracing::warn!(monitor = %monitor.name_any(), error = %xcc_kube::bounded(&error), "monitor status could not be written");
    Action::requeue(Duration::from_secs(5))
}

/// Runs the monitor and binding controllers of direction `D` until `stop` is cancelled.
/// `generated` is the shared watch of the kind they generate (the replication reconcilers read
/// it too); the monitors themselves are watched once for both controllers, the bindings once
/// (both on the core's typed watches).
pub async fn run<D: Direction>(
    client: Client,
    generated: ReflectHandle<D::Generated>,
    metrics: SyncMetrics,
    stop: CancellationToken,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let monitor_kind = Typed::<D::Monitor>::new();
    let binding_kind = Typed::<D::Binding>::new();
    let counted = Counted {
        metrics: metrics.clone(),
        reconciler: D::RECONCILER,
    };
    let bindings = Loop::of(&counted, &binding_kind).owned(generated);
    let store = bindings.store();
    let bindings = bindings
        .wake_by(monitor_kind.subscribe(), move |monitor| {
            let name = monitor.name_any();
            store
                .state()
                .iter()
                .filter(|b| D::monitor_ref(b) == name)
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect::<Vec<_>>()
        })
        .wake_on(super::channel_stream(rx))
        .run(
            reconcile_binding::<D>,
            error_policy::<D>,
            Arc::new(Context {
                client: client.clone(),
                instances: Wakers::new(tx),
                counted: counted.clone(),
            }),
            stop.clone(),
        );
    let monitors = Loop::of(&counted, &monitor_kind).run(
        reconcile_monitor::<D>,
        monitor_error_policy::<D>,
        Arc::new(MonitorContext {
            client: client.clone(),
            counted: counted.clone(),
        }),
        stop,
    );
    let watches = [
        xcc_sync::task::spawn_owned(binding_kind.run(Api::all(client.clone()), metrics.clone())),
        xcc_sync::task::spawn_owned(monitor_kind.run(Api::all(client.clone()), metrics)),
    ];
    futures::join!(bindings, monitors);
    for watch in watches {
        watch.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use serde_json::json;

    fn postgres() -> MonitoredResource {
        MonitoredResource {
            group: "sql.tanzu.vmware.com".into(),
            version: "v1".into(),
            kind: "Postgres".into(),
        }
    }

    fn labels(kind: &str) -> BTreeMap<String, String> {
        [
            ("monitored-resource-group", "sql.tanzu.vmware.com"),
            ("monitored-resource-version", "v1"),
            ("monitored-resource-kind", kind),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.to_string()))
        .collect()
    }

    #[test]
    fn the_documented_monitor_is_valid_and_mismatched_labels_are_not() {
        let paths = vec![".status.binding.name".to_string()];
        assert_eq!(
            validate_monitor(&labels("Postgres"), &postgres(), &paths),
            Ok(())
        );
        let err = validate_monitor(&labels("MySQL"), &postgres(), &paths).unwrap_err();
        assert!(err.contains("monitored-resource-kind"), "{err}");
        let err = validate_monitor(&BTreeMap::new(), &postgres(), &paths).unwrap_err();
        assert!(err.contains("missing"), "{err}");
        let err =
            validate_monitor(&labels("Postgres"), &postgres(), &["..[".to_string()]).unwrap_err();
        assert!(err.contains("not a JSONPath"), "{err}");
    }

    #[test]
    fn paths_in_every_accepted_style_find_the_secret() {
        let instance = json!({"status": {"binding": {"name": "pg-binding"}, "list": ["a", "b"]}});
        for path in [
            ".status.binding.name",
            "{.status.binding.name}",
            "$.status.binding.name",
            "status.binding.name",
        ] {
            assert_eq!(
                secret_names(&instance, &[path.to_string()]),
                [(path.to_string(), "pg-binding".to_string())],
                "{path}"
            );
        }
        // Missing, non-string and several values name no Secret.
        for path in [".status.missing", ".status.binding", ".status.list[*]"] {
            assert!(
                secret_names(&instance, &[path.to_string()]).is_empty(),
                "{path}"
            );
        }
    }

    #[test]
    fn generated_names_follow_the_documentation() {
        assert_eq!(
            generated_name("small-postgres-23", ".status.binding.name"),
            "small-postgres-23.status.binding.name"
        );
        assert_eq!(
            generated_name("db", "{.spec.secrets[0].name}"),
            "db.spec.secrets-0-.name"
        );
        assert_eq!(generated_name("db", "$.Status.Name"), "db.status.name");
    }

    #[test]
    fn generated_imports_carry_the_documented_labels_and_the_binding_as_owner() {
        let mut binding = ResourceImportMonitorBinding::new(
            "postgres",
            super::super::api::ResourceImportMonitorBindingSpec {
                monitor_ref: LocalRef {
                    name: "postgres".into(),
                },
                remote_kubeconfig: LocalRef {
                    name: "energy-source".into(),
                },
            },
        );
        binding.metadata.namespace = Some("project-1".into());
        binding.metadata.uid = Some("0b5e55ed90dde55".into());
        let instance = DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("small-postgres-23".into()),
                namespace: Some("project-1".into()),
                uid: Some("cafe0123d09e".into()),
                ..Default::default()
            },
            data: json!({"status": {"binding": {"name": "dumbo"}}}),
        };
        let without_secret = DynamicObject {
            metadata: ObjectMeta {
                name: Some("new".into()),
                ..Default::default()
            },
            data: json!({"status": {}}),
            ..instance.clone()
        };
        let out = desired::<Import>(
            &binding,
            "0b5e55ed90dde55",
            &postgres(),
            &[".status.binding.name".into()],
            &[instance, without_secret],
        );
        assert_eq!(out.len(), 1);
        let import = &out[0];
        assert_eq!(import.name_any(), "small-postgres-23.status.binding.name");
        assert_eq!(import.namespace().as_deref(), Some("project-1"));
        assert_eq!(import.spec.secret.name, "dumbo");
        assert_eq!(import.spec.remote_kubeconfig.name, "energy-source");
        let want: BTreeMap<String, String> = [
            ("secret-owner-group", "sql.tanzu.vmware.com"),
            ("secret-owner-version", "v1"),
            ("secret-owner-kind", "Postgres"),
            ("secret-owner-name", "small-postgres-23"),
            ("secret-owner-uid", "cafe0123d09e"),
            ("monitor-binding-uid", "0b5e55ed90dde55"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.to_string()))
        .collect();
        assert_eq!(import.labels(), &want);
        assert_eq!(
            import.owner_references()[0].kind,
            "ResourceImportMonitorBinding"
        );
    }

    #[test]
    fn values_that_cannot_be_labels_are_left_out() {
        assert_eq!(
            label_value("small-postgres-23").as_deref(),
            Some("small-postgres-23")
        );
        assert_eq!(label_value(""), Some(String::new()));
        assert_eq!(label_value(&"a".repeat(64)), None);
        assert_eq!(label_value("-a"), None);
    }
}
