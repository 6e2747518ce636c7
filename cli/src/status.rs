//! `status`: every xcc object the context sees, one table, through dynamic objects (this crate
//! does not depend on the agent's types). Kinds whose CRD is absent are named in a footer.

use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams},
};
use serde::Serialize;
use serde_json::Value;

use crate::{
    Error,
    args::{Output, StatusArgs},
    contexts,
    error::is_not_found,
    output::{Table, structured},
};

/// A kind `status` lists, with its plural given (guessing gets GatewayDNS wrong).
pub struct Kind {
    pub kind: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    /// Whether its objects live in namespaces (listed in one namespace unless -A).
    pub namespaced: bool,
    /// Where the kind keeps its state when it has no Ready condition: (state, reason) paths
    /// under `status`.
    pub state: Option<(&'static str, Option<&'static str>)>,
}

impl Kind {
    pub fn resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }
}

pub const KINDS: [Kind; 7] = [
    Kind {
        kind: "Cluster",
        group: "clusterregistry.k8s.cisco.com",
        version: "v1alpha1",
        plural: "clusters",
        namespaced: false,
        state: Some(("state", Some("message"))),
    },
    Kind {
        kind: "ResourceSyncRule",
        group: "clusterregistry.k8s.cisco.com",
        version: "v1alpha1",
        plural: "resourcesyncrules",
        namespaced: false,
        state: None,
    },
    Kind {
        kind: "SecretExport",
        group: "replication.apiresources.multicluster.x-tanzu.vmware.com",
        version: "v1alpha1",
        plural: "secretexports",
        namespaced: true,
        state: None,
    },
    Kind {
        kind: "SecretImport",
        group: "replication.apiresources.multicluster.x-tanzu.vmware.com",
        version: "v1alpha1",
        plural: "secretimports",
        namespaced: true,
        state: None,
    },
    Kind {
        kind: "GatewayDNS",
        group: "connectivity.tanzu.vmware.com",
        version: "v1alpha1",
        plural: "gatewaydns",
        namespaced: true,
        state: None,
    },
    Kind {
        kind: "Replicator",
        group: "plumber.jnytnai0613.github.io",
        version: "v1",
        plural: "replicators",
        namespaced: false,
        state: Some(("synced", None)),
    },
    Kind {
        kind: "ClusterDetector",
        group: "plumber.jnytnai0613.github.io",
        version: "v1",
        plural: "clusterdetectors",
        namespaced: true,
        state: Some(("clusterstatus", Some("reason"))),
    },
];

/// One object's line.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The Ready condition's status, or the kind's own state field.
    pub ready: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub context: String,
    /// The namespace of the namespaced kinds' objects; none: every namespace (-A).
    pub namespace: Option<String>,
    pub items: Vec<Row>,
    /// Kinds whose CRD this cluster does not serve.
    pub absent_kinds: Vec<String>,
    /// Kinds this context may not list (RBAC).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forbidden_kinds: Vec<String>,
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The row of `object` of `kind`.
pub fn row(kind: &Kind, object: &DynamicObject) -> Row {
    let status = &object.data["status"];
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let (ready, reason, message) = match (ready, kind.state) {
        (Some(c), _) => (text(&c["status"]), text(&c["reason"]), text(&c["message"])),
        (None, Some((state, reason))) => (
            text(&status[state]),
            reason.map(|r| text(&status[r])).unwrap_or_default(),
            String::new(),
        ),
        (None, None) => (String::new(), String::new(), String::new()),
    };
    Row {
        kind: kind.kind.into(),
        namespace: object.namespace(),
        name: object.name_any(),
        ready: if ready.is_empty() {
            "Unknown".into()
        } else {
            ready
        },
        reason,
        message,
    }
}

pub fn render(report: &Report) -> String {
    let mut table = Table::new(&["KIND", "NAMESPACE", "NAME", "READY", "REASON", "MESSAGE"]);
    for r in &report.items {
        let mut message = r.message.clone();
        if message.chars().count() > 80 {
            message = message.chars().take(77).collect::<String>() + "...";
        }
        table.push(vec![
            r.kind.clone(),
            r.namespace.clone().unwrap_or_default(),
            r.name.clone(),
            r.ready.clone(),
            r.reason.clone(),
            message,
        ]);
    }
    let mut out = if report.items.is_empty() {
        match &report.namespace {
            Some(namespace) => format!(
                "no xcc objects on context {} (namespaced kinds: in namespace {namespace}; -A for all)\n",
                report.context
            ),
            None => format!("no xcc objects on context {}\n", report.context),
        }
    } else {
        table.render()
    };
    if !report.absent_kinds.is_empty() {
        out.push_str(&format!(
            "\nnot installed on this cluster: {}\n",
            report.absent_kinds.join(", ")
        ));
    }
    if !report.forbidden_kinds.is_empty() {
        out.push_str(&format!(
            "not listed, this context may not list them: {}\n",
            report.forbidden_kinds.join(", ")
        ));
    }
    out
}

pub async fn run(args: StatusArgs) -> Result<(), Error> {
    let kubeconfig = contexts::load_args(&args.kube)?;
    let context = contexts::pick(&kubeconfig, args.context.as_deref())?;
    let namespace = match (args.all_namespaces, &args.namespace) {
        (true, _) => None,
        (false, Some(namespace)) => {
            crate::link::check_namespace(namespace)?;
            Some(namespace.clone())
        }
        (false, None) => Some(contexts::namespace(&kubeconfig, &context)),
    };
    let target = contexts::client(&kubeconfig, &context, args.kube.request_timeout()).await?;
    let mut report = Report {
        context: context.clone(),
        namespace: namespace.clone(),
        items: Vec::new(),
        absent_kinds: Vec::new(),
        forbidden_kinds: Vec::new(),
    };
    for kind in &KINDS {
        let api: Api<DynamicObject> = match (&namespace, kind.namespaced) {
            (Some(namespace), true) => {
                Api::namespaced_with(target.client.clone(), namespace, &kind.resource())
            }
            _ => Api::all_with(target.client.clone(), &kind.resource()),
        };
        match api.list(&ListParams::default()).await {
            Ok(list) => report
                .items
                .extend(list.items.iter().map(|object| row(kind, object))),
            Err(e) if is_not_found(&e) => report.absent_kinds.push(kind.kind.into()),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                report.forbidden_kinds.push(kind.kind.into())
            }
            Err(e) => {
                return Err(Error::api(format!(
                    "cannot list {} on context {context:?} ({})",
                    kind.plural, target.server
                ))(e));
            }
        }
    }
    let text = match args.output {
        Output::Table => render(&report),
        output => structured(&report, output)?,
    };
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn rows_take_the_ready_condition_or_the_kinds_own_state() {
        let rule = object(json!({
            "apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1", "kind": "ResourceSyncRule",
            "metadata": {"name": "accounts"},
            "status": {"conditions": [
                {"type": "Other", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "MissingPermission", "message": "cannot list"}
            ]}
        }));
        assert_eq!(
            row(&KINDS[1], &rule),
            Row {
                kind: "ResourceSyncRule".into(),
                namespace: None,
                name: "accounts".into(),
                ready: "False".into(),
                reason: "MissingPermission".into(),
                message: "cannot list".into(),
            }
        );
        let detector = object(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "ClusterDetector",
            "metadata": {"name": "kubernetes.kubernetes-admin", "namespace": "plumber-system"},
            "status": {"clusterstatus": "RUNNING", "reason": ""}
        }));
        let r = row(&KINDS[6], &detector);
        assert_eq!(
            (r.ready.as_str(), r.namespace.as_deref()),
            ("RUNNING", Some("plumber-system"))
        );
        let replicator = object(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "replicator-sample"}, "status": {"synced": "synced"}
        }));
        assert_eq!(row(&KINDS[5], &replicator).ready, "synced");
        let fresh = object(json!({
            "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1", "kind": "GatewayDNS",
            "metadata": {"name": "g", "namespace": "dev-team"}
        }));
        assert_eq!(row(&KINDS[4], &fresh).ready, "Unknown");
    }

    #[test]
    fn the_table_names_absent_kinds_in_a_footer() {
        let report = Report {
            context: "first".into(),
            namespace: None,
            items: vec![Row {
                kind: "Cluster".into(),
                namespace: None,
                name: "first".into(),
                ready: "Ready".into(),
                reason: String::new(),
                message: String::new(),
            }],
            absent_kinds: vec!["GatewayDNS".into(), "Replicator".into()],
            forbidden_kinds: vec!["SecretImport".into()],
        };
        assert_eq!(
            render(&report),
            "KIND      NAMESPACE   NAME    READY   REASON   MESSAGE\n\
             Cluster   -           first   Ready   -        -\n\
             \nnot installed on this cluster: GatewayDNS, Replicator\n\
             not listed, this context may not list them: SecretImport\n"
        );
    }

    #[test]
    fn plurals_are_given_not_guessed() {
        let gateway = KINDS.iter().find(|k| k.kind == "GatewayDNS").unwrap();
        assert_eq!(gateway.resource().plural, "gatewaydns");
        assert_eq!(
            gateway.resource().api_version,
            "connectivity.tanzu.vmware.com/v1alpha1"
        );
    }
}
