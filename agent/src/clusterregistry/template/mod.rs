//! Go templates in override values, as cluster-registry runs them: Go's `text/template` language
//! with a few sprig functions, over `{Object, Cluster, LocalCluster}`. `Object` is the source
//! object with the unstructured accessors (`.Object.metadata.name`, `.Object.Object.spec`,
//! `.Object.GetName`); the Clusters look like the Go structs (`.Cluster.Name`,
//! `.Cluster.Spec.ClusterID`).
//!
//! The interpreter is our own (lex, parse, exec): templates come from users' objects, so every
//! input gives a result or an error, within bounds of nesting, output size and work (see
//! [`error`]); `define`, `block` and `template` are refused, as there are no named templates.

mod error;
mod exec;
mod format;
mod funcs;
#[cfg(test)]
mod go_tests;
mod lex;
mod parse;

use std::{collections::BTreeMap, sync::Arc};

use kube::ResourceExt;
use serde_json::Value;

pub use error::TemplateError;
use error::{MAX_DEPTH, MAX_OUTPUT, MAX_STEPS, MAX_VARIABLES, MAX_WIDTH, Pos};
pub use exec::Data;

use super::api::{Cluster, ClusterSpec, ClusterStatus};

/// A parsed override value, parsed once per rule.
#[derive(Debug, Clone)]
pub struct ValueTemplate(Arc<parse::Tree>);

/// Whether `value` needs the template engine: text without an action renders to itself.
pub fn is_template(value: &str) -> bool {
    value.contains("{{")
}

impl ValueTemplate {
    pub fn parse(text: &str) -> Result<ValueTemplate, TemplateError> {
        parse::parse(text).map(|tree| ValueTemplate(Arc::new(tree)))
    }

    pub fn render(&self, data: &Data) -> Result<String, TemplateError> {
        exec::render(&self.0, data)
    }
}

/// The data of one rendering: `.Object`, `.Cluster` (where the object originates) and
/// `.LocalCluster`.
pub fn context(object: &Value, cluster: &Cluster, local: &Cluster) -> Data {
    Data::Map(BTreeMap::from([
        ("Object".to_string(), object_value(object)),
        ("Cluster".to_string(), cluster_value(cluster)),
        ("LocalCluster".to_string(), cluster_value(local)),
    ]))
}

fn string(value: &Value) -> Data {
    Data::Str(value.as_str().unwrap_or_default().to_string())
}

/// JSON as Go's `map[string]interface{}` (a missing key is `<no value>`, not an error); empty
/// when `value` is not an object.
fn map_or_empty(value: &Value) -> Data {
    match value {
        Value::Object(_) => Data::from(value),
        _ => Data::Map(BTreeMap::new()),
    }
}

/// The source object: its top-level keys (raw map access), `Object` (unstructured.Unstructured's
/// field) and the values of the accessor methods Go users call.
fn object_value(object: &Value) -> Data {
    let Data::Map(mut map) = map_or_empty(object) else {
        unreachable!("map_or_empty makes a map");
    };
    let metadata = &object["metadata"];
    let methods = [
        ("GetName", string(&metadata["name"])),
        ("GetNamespace", string(&metadata["namespace"])),
        ("GetLabels", map_or_empty(&metadata["labels"])),
        ("GetAnnotations", map_or_empty(&metadata["annotations"])),
        ("GetUID", string(&metadata["uid"])),
        ("GetResourceVersion", string(&metadata["resourceVersion"])),
        (
            "GetGeneration",
            Data::Int(metadata["generation"].as_i64().unwrap_or_default()),
        ),
        ("GetKind", string(&object["kind"])),
        ("GetAPIVersion", string(&object["apiVersion"])),
        ("Object", map_or_empty(object)),
    ];
    map.extend(methods.into_iter().map(|(k, v)| (k.to_string(), v)));
    Data::Map(map)
}

/// A Go struct: a misspelt field is an error, as in Go.
fn strukt<const N: usize>(fields: [(&'static str, Data); N]) -> Data {
    Data::Struct(fields.into())
}

fn text(value: Option<&String>) -> Data {
    Data::Str(value.cloned().unwrap_or_default())
}

fn string_map(map: &BTreeMap<String, String>) -> Data {
    Data::Map(
        map.iter()
            .map(|(k, v)| (k.clone(), Data::Str(v.clone())))
            .collect(),
    )
}

fn cluster_value(cluster: &Cluster) -> Data {
    let name = Data::Str(cluster.name_any());
    let namespace = text(cluster.metadata.namespace.as_ref());
    let labels = string_map(cluster.labels());
    let annotations = string_map(cluster.annotations());
    let uid = text(cluster.metadata.uid.as_ref());
    strukt([
        ("Name", name.clone()),
        ("Namespace", namespace.clone()),
        ("Labels", labels.clone()),
        ("Annotations", annotations.clone()),
        ("UID", uid.clone()),
        ("GetName", name),
        ("GetNamespace", namespace),
        ("GetLabels", labels),
        ("GetAnnotations", annotations),
        ("GetUID", uid),
        ("Spec", spec_value(&cluster.spec)),
        (
            "Status",
            status_value(&cluster.status.clone().unwrap_or_default()),
        ),
    ])
}

fn spec_value(spec: &ClusterSpec) -> Data {
    let secret = spec
        .auth_info
        .as_ref()
        .and_then(|a| a.secret_ref.clone())
        .unwrap_or_default();
    let endpoints = spec
        .kubernetes_api_endpoints
        .iter()
        .map(|e| {
            strukt([
                ("ClientNetwork", text(e.client_network.as_ref())),
                ("ServerAddress", text(e.server_address.as_ref())),
                ("CABundle", text(e.ca_bundle.as_ref())),
            ])
        })
        .collect();
    strukt([
        ("ClusterID", Data::Str(spec.cluster_id.clone())),
        (
            "AuthInfo",
            strukt([(
                "SecretRef",
                strukt([
                    ("Name", Data::Str(secret.name)),
                    ("Namespace", text(secret.namespace.as_ref())),
                ]),
            )]),
        ),
        ("KubernetesAPIEndpoints", Data::List(endpoints)),
    ])
}

fn status_value(status: &ClusterStatus) -> Data {
    let locality = status.locality.as_ref().map_or(Data::Nil, |l| {
        strukt([
            ("Region", text(l.region.as_ref())),
            (
                "Zones",
                Data::List(l.zones.iter().cloned().map(Data::Str).collect()),
            ),
        ])
    });
    let conditions = status
        .conditions
        .iter()
        .map(|c| {
            strukt([
                ("Type", Data::Str(c.type_.clone())),
                ("Status", Data::Str(c.status.clone())),
                ("Reason", Data::Str(c.reason.clone())),
                ("Message", Data::Str(c.message.clone())),
            ])
        })
        .collect();
    strukt([
        ("State", text(status.state.as_ref())),
        ("Type", text(status.type_.as_ref())),
        ("Message", text(status.message.as_ref())),
        ("Provider", text(status.provider.as_ref())),
        ("Distribution", text(status.distribution.as_ref())),
        ("Version", text(status.version.as_ref())),
        ("Locality", locality),
        ("Conditions", Data::List(conditions)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(text: &str) -> Result<String, String> {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "apps", "labels": {"tier": "front"}},
            "data": {"mode": "blue"}});
        let cluster = Cluster::new("east", Default::default());
        ValueTemplate::parse(text)
            .and_then(|t| t.render(&context(&object, &cluster, &cluster)))
            .map_err(|e| e.to_string())
    }

    /// Every template example of the README, the docs and the end-to-end tests, with what Go
    /// renders for it.
    #[test]
    fn documented_examples_render_as_go_would() {
        let cases = [
            // README: ResourceSyncRule overrides.
            (
                r#"{{ printf "%s-%s" .Object.GetNamespace .Cluster.GetName | lower }}"#,
                "apps-east",
            ),
            (
                r#"{{ printf "%s-%s" .Object.GetName .Cluster.GetName }}"#,
                "web-east",
            ),
            ("{{ .Object.metadata.name }}-copy", "web-copy"),
            (
                "{{ .Cluster.GetName }} to {{ .LocalCluster.Name }}",
                "east to east",
            ),
            ("{{ len .Object.data }}", "1"),
            ("{{ .Object.metadata.namespace }}", "apps"),
            ("{{ .Cluster.Spec.ClusterID }}", ""),
            ("at-{{ .LocalCluster.GetName }}", "at-east"),
            ("{{ .Object.data.mode | upper }}", "BLUE"),
            ("{{ b64dec (b64enc .Object.data.mode) }}", "blue"),
            ("{{ .Object.GetName | trimPrefix \"app-\" }}", "web"),
            // Missing keys and nil, as Go prints them for map[string]interface{}.
            ("{{ .Object.data.missing }}", "<no value>"),
            ("{{ .Cluster.Status.Locality }}", "<no value>"),
            ("{{ .Object.GetLabels }}", "map[tier:front]"),
            (
                "{{ range $k, $v := .Object.metadata.labels }}{{ $k }}={{ $v }}{{ end }}",
                "tier=front",
            ),
            (
                "{{ with .Cluster.Status.Locality }}{{ .Region }}{{ else }}nowhere{{ end }}",
                "nowhere",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(render(text).as_deref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn sprig_functions() {
        let cases = [
            (
                r#"{{ upper "ab" }}{{ lower "CD" }}{{ trim "  e  " }}"#,
                "ABcde",
            ),
            (
                r#"{{ .Object.GetName | trimPrefix "w" | trimSuffix "b" }}"#,
                "e",
            ),
            (r#"{{ replace "-" "." "a-b-c" }}"#, "a.b.c"),
            (r#"{{ .Object.data.missing | default "none" }}"#, "none"),
            (r#"{{ default "none" .Object.data.mode }}"#, "blue"),
            (r#"{{ quote "a\"b" .Object.GetName }}"#, r#""a\"b" "web""#),
            (r#"{{ if contains "eb" .Object.GetName }}y{{ end }}"#, "y"),
            (
                r#"{{ if and (hasPrefix "w" "web") (hasSuffix "b" "web") }}y{{ end }}"#,
                "y",
            ),
            (r#"{{ b64enc "hi" }} {{ b64dec "aGk=" }}"#, "aGk= hi"),
            // The README's example.
            (
                r#"{{ printf "%s-%s" .Object.GetNamespace .Cluster.GetName | lower }}"#,
                "apps-east",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(render(text).as_deref(), Ok(want), "{text}");
        }
        let bad = render(r#"{{ b64dec "!!" }}"#).unwrap_err();
        assert!(bad.contains("not base64"), "{bad}");
    }

    #[test]
    fn object_accessors_of_unstructured() {
        let text = "{{ .Object.metadata.name }} {{ .Object.Object.data.mode }} \
                    {{ .Object.GetNamespace }} {{ .Object.GetLabels.tier }} {{ .Object.GetKind }}";
        assert_eq!(render(text).as_deref(), Ok("web blue apps front ConfigMap"));
    }

    #[test]
    fn errors_do_not_carry_values() {
        let secret = render(r#"{{ printf "%d" .Object.data.mode }}"#).unwrap_err();
        assert!(!secret.contains("blue"), "{secret}");
        let field = render("{{ .Cluster.Nope }}").unwrap_err();
        assert_eq!(field, "can't evaluate field Nope");
    }

    #[test]
    fn text_that_broke_the_previous_engine_works_or_is_refused_clearly() {
        // Each of these hung, panicked or overflowed the stack in the Go template crate used
        // before; now each parses and renders as in Go, or gives a clear error.
        let refused = [
            ("{{ .Object.GetName ", "1:1: unclosed action: expected }}"),
            ("{{-", "unclosed action"),
            ("{{ \"a }}", "unterminated quoted string"),
            (
                r#"{{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}"#,
                "{{ define }} is not supported",
            ),
            (
                &format!("{{{{ {}1{} }}}}", "(".repeat(33), ")".repeat(33)),
                "parentheses are nested more than 32 deep",
            ),
            (
                &"{{ if 1 }}".repeat(33),
                "blocks are nested more than 32 deep",
            ),
            (
                &format!("{{{{ if 1 }}}}{}", "{{ else if 1 }}".repeat(32)),
                "has no {{ end }}",
            ),
        ];
        for (text, want) in refused {
            let error = ValueTemplate::parse(text).unwrap_err().to_string();
            assert!(error.contains(want), "{text}: {error}");
        }
        // Non-ASCII is fine in text, quotes and names; a long else-if chain is not nesting.
        assert_eq!(
            render(r#"é{{ "é-" }}{{ "🙂" | upper }}{{ .Object.é }}"#).as_deref(),
            Ok("éé-🙂<no value>")
        );
        let chain = format!(
            "{{{{ if 0 }}}}{}{{{{ end }}}}",
            "{{ else if 1 }}y".repeat(40)
        );
        assert_eq!(render(&chain).as_deref(), Ok("y"));
        // The deepest nesting allowed runs on a small stack.
        let deep = format!(
            "{}{{{{ {}1{} }}}}{}",
            "{{ if 1 }}".repeat(32),
            "(print ".repeat(32),
            ")".repeat(32),
            "{{ end }}".repeat(32)
        );
        let small_stack = std::thread::Builder::new().stack_size(2 << 20);
        let rendered = small_stack
            .spawn(move || render(&deep))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(rendered.as_deref(), Ok("1"));
        let wide = render(r#"{{ printf "%99999999d" 1 }}"#).unwrap_err();
        assert!(
            wide.contains("width or precision 99999999 is over the limit"),
            "{wide}"
        );
    }

    #[test]
    fn parsing_and_rendering_end_on_any_text() {
        const ATOMS: &[&str] = &[
            "{{",
            "}}",
            " ",
            "\t",
            "\n",
            "\"",
            "`",
            "'",
            "\\",
            "- ",
            "-",
            "(",
            ")",
            "|",
            ":=",
            "/*",
            "*/",
            ".Object",
            ".a",
            "$x",
            "x",
            "1",
            "é",
            "🙂",
            "if ",
            "else ",
            "end",
            "range ",
            "with ",
            "printf ",
            "template ",
            "define ",
            "\"%99999999d\"",
        ];
        let (done, finished) = std::sync::mpsc::channel();
        let current = Arc::new(std::sync::Mutex::new(String::new()));
        let shown = current.clone();
        let fuzz = move || {
            let mut seed = 0x2545_f491_4f6c_dd1d_u64;
            let mut next = move |n: usize| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % n as u64) as usize
            };
            for _ in 0..2000 {
                let text: String = (0..1 + next(10))
                    .map(|_| ATOMS[next(ATOMS.len())])
                    .collect();
                *current.lock().unwrap() = text.clone();
                if ValueTemplate::parse(&text).is_ok() {
                    let _ = render(&text);
                }
            }
            let _ = done.send(());
        };
        let small_stack = std::thread::Builder::new().stack_size(2 << 20);
        small_stack.spawn(fuzz).unwrap();
        let ended = finished.recv_timeout(std::time::Duration::from_secs(120));
        assert!(ended.is_ok(), "stuck on {:?}", shown.lock().unwrap());
    }
}
