//! Go templates in override values, as cluster-registry runs them: Go text/template syntax with a
//! few sprig functions, over `{Object, Cluster, LocalCluster}`. `Object` is the source object with
//! the unstructured accessors (`.Object.metadata.name`, `.Object.Object.spec`, `.Object.GetName`);
//! the Clusters look like the Go structs (`.Cluster.Name`, `.Cluster.Spec.ClusterID`).

use std::{
    collections::HashMap,
    fmt,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use base64::Engine as _;
use gtmpl::{Context, Func, FuncError, Template, Value as TValue, error::ExecError};
use kube::ResourceExt;
use serde_json::Value;

use super::api::{Cluster, ClusterSpec, ClusterStatus};

/// A parsed override value.
#[derive(Clone)]
pub struct ValueTemplate(Arc<Template>);

impl fmt::Debug for ValueTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ValueTemplate")
    }
}

/// Whether `value` needs the template engine: text without an action renders to itself.
pub fn is_template(value: &str) -> bool {
    value.contains("{{")
}

impl ValueTemplate {
    pub fn parse(text: &str) -> Result<ValueTemplate, String> {
        guard(text)?;
        let mut template = Template::default();
        // Functions must be known before parsing: an unknown name is a parse error, as in Go.
        template.add_funcs(FUNCS);
        catch_unwind(AssertUnwindSafe(|| {
            template.parse(text).map_err(|e| e.to_string())
        }))
        .map_err(|_| "the template parser failed on this text".to_string())??;
        Ok(ValueTemplate(Arc::new(template)))
    }

    pub fn render(&self, data: &Context) -> Result<String, String> {
        // gtmpl panics on some inputs (printf "%99999999d"), which may come from the object.
        catch_unwind(AssertUnwindSafe(|| self.0.render(data).map_err(describe)))
            .map_err(|_| "the template engine failed on this value".to_string())?
    }
}

/// Deepest nesting of parentheses, and of if/range/with blocks, a template may have: gtmpl
/// recurses on both, and a stack overflow would abort the agent.
const MAX_NESTING: usize = 32;

/// Refuses what gtmpl cannot handle safely, before it sees the text: an action left open at the
/// end (its lexer then loops forever), a non-ASCII character in an action outside quotes (its
/// lexer panics), `define` and `block` (a template calling itself overflows the stack), and deep
/// nesting. Go rejects the first; the others are rare in an override value.
fn guard(text: &str) -> Result<(), String> {
    // Per open block, the levels it holds: each `else if` nests one more until its `end`.
    let mut blocks: Vec<usize> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let action = &rest[open + 2..];
        let inner = action.strip_prefix("- ").unwrap_or(action);
        if let Some(comment) = inner.strip_prefix("/*") {
            let end = comment.find("*/").ok_or("unclosed comment")?;
            rest = &comment[end + 2..];
            continue;
        }
        let end = action_end(action)?;
        let body = &action[..end - 2];
        let (first, after) = word(body.strip_prefix("- ").unwrap_or(body));
        match first {
            "if" | "range" | "with" => blocks.push(1),
            "else" if matches!(word(after).0, "if" | "with") => {
                if let Some(top) = blocks.last_mut() {
                    *top += 1;
                }
            }
            "end" => drop(blocks.pop()),
            word @ ("define" | "block") => {
                return Err(format!(
                    "{{{{ {word} }}}} is not supported in override values"
                ));
            }
            _ => {}
        }
        if blocks.iter().sum::<usize>() > MAX_NESTING {
            return Err(format!("blocks are nested more than {MAX_NESTING} deep"));
        }
        rest = &action[end..];
    }
    Ok(())
}

/// The first word of `text` (a keyword or function name) and what follows it.
fn word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Where the action starting at `action` (just after `{{`) ends: past its `}}`. Quotes are read as
/// gtmpl's lexer reads them, so that both agree on where the action ends.
fn action_end(action: &str) -> Result<usize, String> {
    let mut chars = action.char_indices();
    let mut parens = 0usize;
    while let Some((i, c)) = chars.next() {
        match c {
            '}' if action[i..].starts_with("}}") => return Ok(i + 2),
            '"' | '\'' => {
                let mut escaped = false;
                loop {
                    match chars.next() {
                        None | Some((_, '\n')) => return Err("unterminated quoted string".into()),
                        Some((_, '\\')) => escaped = true,
                        Some((_, q)) if q == c && !escaped => break,
                        Some(_) => escaped = false,
                    }
                }
            }
            '`' => {
                chars
                    .find(|&(_, c)| c == '`')
                    .ok_or("unterminated raw quoted string")?;
            }
            '(' => {
                parens += 1;
                if parens > MAX_NESTING {
                    return Err(format!(
                        "parentheses are nested more than {MAX_NESTING} deep"
                    ));
                }
            }
            ')' => parens = parens.saturating_sub(1),
            c if !c.is_ascii() => {
                return Err(format!(
                    "{c:?} in an action: only ASCII is supported there outside quoted strings"
                ));
            }
            _ => {}
        }
    }
    Err("unclosed action".into())
}

/// Error text without the values involved: an object may be a Secret, and errors go to logs and
/// Events.
fn describe(error: ExecError) -> String {
    use gtmpl::error::PrintError;
    match error {
        ExecError::NoFiledFor(field, _) => format!("can't evaluate field {field}"),
        ExecError::InvalidRange(_) => "range can't iterate over this value".into(),
        ExecError::FuncError(FuncError::Generic(m)) if m.starts_with("unable to call len") => {
            "len: the value has no length".into()
        }
        ExecError::FuncError(FuncError::Generic(m)) if m.starts_with("unable to get") => {
            "index: no such key or position".into()
        }
        ExecError::FuncError(FuncError::Generic(m)) if m.starts_with("unable to compare") => {
            "the values cannot be compared".into()
        }
        ExecError::FuncError(FuncError::Other(e)) => match e.downcast_ref() {
            Some(PrintError::UnableToFormat(_, verb)) => {
                format!("printf: %{verb} does not fit the value given")
            }
            Some(PrintError::NotAValidChar(_)) => "printf: the value is not a character".into(),
            Some(other) => format!("printf: {other}"),
            None => "a function failed".into(),
        },
        other => other.to_string(),
    }
}

/// The data of one rendering: `.Object`, `.Cluster` (where the object originates) and
/// `.LocalCluster`.
pub fn context(object: &Value, cluster: &Cluster, local: &Cluster) -> Context {
    let data = HashMap::from([
        ("Object".to_string(), object_value(object)),
        ("Cluster".to_string(), cluster_value(cluster)),
        ("LocalCluster".to_string(), cluster_value(local)),
    ]);
    Context::from(TValue::Map(data))
}

/// JSON as Go's `map[string]interface{}`: a missing key is `<no value>`, not an error.
fn json(value: &Value) -> TValue {
    match value {
        Value::Null => TValue::Nil,
        Value::Bool(b) => TValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => TValue::from(i),
            (_, Some(u)) => TValue::from(u),
            _ => TValue::from(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => TValue::String(s.clone()),
        Value::Array(items) => TValue::Array(items.iter().map(json).collect()),
        Value::Object(map) => TValue::Map(map.iter().map(|(k, v)| (k.clone(), json(v))).collect()),
    }
}

fn string(value: &Value) -> TValue {
    TValue::String(value.as_str().unwrap_or_default().to_string())
}

fn map_or_empty(value: &Value) -> TValue {
    match value {
        Value::Object(_) => json(value),
        _ => TValue::Map(HashMap::new()),
    }
}

/// The source object: its top-level keys (raw map access), `Object` (unstructured.Unstructured's
/// field) and the values of the accessor methods Go users call.
fn object_value(object: &Value) -> TValue {
    let TValue::Map(mut map) = map_or_empty(object) else {
        return TValue::Map(HashMap::new());
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
            TValue::from(metadata["generation"].as_i64().unwrap_or_default()),
        ),
        ("GetKind", string(&object["kind"])),
        ("GetAPIVersion", string(&object["apiVersion"])),
        ("Object", map_or_empty(object)),
    ];
    map.extend(methods.into_iter().map(|(k, v)| (k.to_string(), v)));
    TValue::Map(map)
}

/// A Go struct: a misspelt field is an error, as in Go.
fn strukt<const N: usize>(fields: [(&str, TValue); N]) -> TValue {
    TValue::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn text(value: Option<&String>) -> TValue {
    TValue::String(value.cloned().unwrap_or_default())
}

fn string_map(map: &std::collections::BTreeMap<String, String>) -> TValue {
    TValue::Map(
        map.iter()
            .map(|(k, v)| (k.clone(), TValue::String(v.clone())))
            .collect(),
    )
}

fn cluster_value(cluster: &Cluster) -> TValue {
    let name = TValue::String(cluster.name_any());
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

fn spec_value(spec: &ClusterSpec) -> TValue {
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
        ("ClusterID", TValue::String(spec.cluster_id.clone())),
        (
            "AuthInfo",
            strukt([(
                "SecretRef",
                strukt([
                    ("Name", TValue::String(secret.name)),
                    ("Namespace", text(secret.namespace.as_ref())),
                ]),
            )]),
        ),
        ("KubernetesAPIEndpoints", TValue::Array(endpoints)),
    ])
}

fn status_value(status: &ClusterStatus) -> TValue {
    let locality = status.locality.as_ref().map_or(TValue::Nil, |l| {
        strukt([
            ("Region", text(l.region.as_ref())),
            (
                "Zones",
                TValue::Array(l.zones.iter().cloned().map(TValue::String).collect()),
            ),
        ])
    });
    let conditions = status
        .conditions
        .iter()
        .map(|c| {
            strukt([
                ("Type", TValue::String(c.type_.clone())),
                ("Status", TValue::String(c.status.clone())),
                ("Reason", TValue::String(c.reason.clone())),
                ("Message", TValue::String(c.message.clone())),
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
        ("Conditions", TValue::Array(conditions)),
    ])
}

/// The sprig functions rules use most (and Go's `len`), with sprig's argument order (the string last, so that
/// `{{ .Object.GetName | trimPrefix "app-" }}` works).
const FUNCS: &[(&str, Func)] = &[
    ("lower", lower),
    ("upper", upper),
    ("trim", trim),
    ("trimPrefix", trim_prefix),
    ("trimSuffix", trim_suffix),
    ("replace", replace),
    ("default", default),
    ("quote", quote),
    ("contains", contains),
    ("hasPrefix", has_prefix),
    ("hasSuffix", has_suffix),
    ("b64enc", b64enc),
    ("b64dec", b64dec),
    ("len", len),
];

/// A value as text, as sprig's `strval` does (missing and nil are empty).
fn as_text(value: &TValue) -> String {
    match value {
        TValue::String(s) => s.clone(),
        TValue::NoValue | TValue::Nil => String::new(),
        other => other.to_string(),
    }
}

fn strings<const N: usize>(name: &str, args: &[TValue]) -> Result<[String; N], FuncError> {
    let args: &[TValue; N] = args
        .try_into()
        .map_err(|_| FuncError::ExactlyXArgs(name.into(), N))?;
    Ok(args.each_ref().map(as_text))
}

fn lower(args: &[TValue]) -> Result<TValue, FuncError> {
    let [s] = strings("lower", args)?;
    Ok(TValue::String(s.to_lowercase()))
}

fn upper(args: &[TValue]) -> Result<TValue, FuncError> {
    let [s] = strings("upper", args)?;
    Ok(TValue::String(s.to_uppercase()))
}

fn trim(args: &[TValue]) -> Result<TValue, FuncError> {
    let [s] = strings("trim", args)?;
    Ok(TValue::String(s.trim().to_string()))
}

fn trim_prefix(args: &[TValue]) -> Result<TValue, FuncError> {
    let [prefix, s] = strings("trimPrefix", args)?;
    Ok(TValue::String(
        s.strip_prefix(prefix.as_str()).unwrap_or(&s).to_string(),
    ))
}

fn trim_suffix(args: &[TValue]) -> Result<TValue, FuncError> {
    let [suffix, s] = strings("trimSuffix", args)?;
    Ok(TValue::String(
        s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string(),
    ))
}

fn replace(args: &[TValue]) -> Result<TValue, FuncError> {
    let [old, new, s] = strings("replace", args)?;
    Ok(TValue::String(s.replace(&old, &new)))
}

fn contains(args: &[TValue]) -> Result<TValue, FuncError> {
    let [part, s] = strings("contains", args)?;
    Ok(TValue::Bool(s.contains(&part)))
}

fn has_prefix(args: &[TValue]) -> Result<TValue, FuncError> {
    let [prefix, s] = strings("hasPrefix", args)?;
    Ok(TValue::Bool(s.starts_with(&prefix)))
}

fn has_suffix(args: &[TValue]) -> Result<TValue, FuncError> {
    let [suffix, s] = strings("hasSuffix", args)?;
    Ok(TValue::Bool(s.ends_with(&suffix)))
}

/// Go's `len`, which gtmpl's lacks for maps (every JSON object here is one).
fn len(args: &[TValue]) -> Result<TValue, FuncError> {
    let n = match args {
        [TValue::String(s)] => s.len(),
        [TValue::Array(a)] => a.len(),
        [TValue::Map(m) | TValue::Object(m)] => m.len(),
        [_] => return Err(FuncError::Generic("len: the value has no length".into())),
        _ => return Err(FuncError::ExactlyXArgs("len".into(), 1)),
    };
    Ok(TValue::from(n as u64))
}

/// Sprig's notion of empty: the zero value of its type.
fn empty(value: &TValue) -> bool {
    match value {
        TValue::NoValue | TValue::Nil => true,
        TValue::Bool(b) => !b,
        TValue::String(s) => s.is_empty(),
        TValue::Number(n) => n.as_f64() == Some(0.0),
        TValue::Array(a) => a.is_empty(),
        TValue::Map(m) | TValue::Object(m) => m.is_empty(),
        TValue::Function(_) => false,
    }
}

/// `default D GIVEN`: GIVEN unless it is empty (or missing), else D.
fn default(args: &[TValue]) -> Result<TValue, FuncError> {
    match args {
        [fallback] => Ok(fallback.clone()),
        [fallback, given] => Ok(if empty(given) { fallback } else { given }.clone()),
        _ => Err(FuncError::AtLeastXArgs("default".into(), 1)),
    }
}

/// Each argument in double quotes with Go's escapes, separated by spaces; nil ones are skipped.
fn quote(args: &[TValue]) -> Result<TValue, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|a| !matches!(a, TValue::Nil | TValue::NoValue))
        .map(|a| {
            let mut out = String::from('"');
            for c in as_text(a).chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        })
        .collect();
    Ok(TValue::String(quoted.join(" ")))
}

fn b64enc(args: &[TValue]) -> Result<TValue, FuncError> {
    let [s] = strings("b64enc", args)?;
    Ok(TValue::String(
        base64::engine::general_purpose::STANDARD.encode(s),
    ))
}

/// Unlike sprig, which returns the error text as the value, a bad input fails the rendering:
/// an error message written into a copy would go unnoticed.
fn b64dec(args: &[TValue]) -> Result<TValue, FuncError> {
    let [s] = strings("b64dec", args)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|_| FuncError::Generic("b64dec: the value is not base64".into()))?;
    String::from_utf8(bytes)
        .map(TValue::String)
        .map_err(|_| FuncError::Generic("b64dec: the decoded value is not UTF-8 text".into()))
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
        ValueTemplate::parse(text)?.render(&context(&object, &cluster, &cluster))
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
    fn text_gtmpl_cannot_handle_is_refused_before_it_gets_there() {
        // Each of these hangs, panics or overflows the stack inside gtmpl.
        let cases = [
            ("{{ .Object.GetName ", "unclosed action"),
            ("{{-", "unclosed action"),
            ("{{ \"a }}", "unterminated quoted string"),
            ("{{ .Object.é }}", "only ASCII"),
            (
                r#"{{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}"#,
                "define",
            ),
            (
                &format!("{{{{ {}1{} }}}}", "(".repeat(33), ")".repeat(33)),
                "nested",
            ),
            (&"{{ if 1 }}".repeat(33), "nested"),
            (
                &format!("{{{{ if 1 }}}}{}", "{{ else if 1 }}".repeat(32)),
                "nested",
            ),
        ];
        for (text, want) in cases {
            let error = ValueTemplate::parse(text).unwrap_err();
            assert!(error.contains(want), "{text}: {error}");
        }
        // Quoted, non-ASCII text is fine; so is the deepest nesting allowed, on a small stack.
        assert_eq!(
            render(r#"{{ "é-" }}{{ "🙂" | upper }}"#).as_deref(),
            Ok("é-🙂")
        );
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
        assert!(wide.contains("failed"), "{wide}");
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
