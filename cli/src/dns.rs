//! `dns NAME`: asks an agent's `/explain` (through the API server's service proxy, or at
//! `--agent-url`) for the answer to NAME and where it came from.

use kube::{Client, Config};
use serde::{Deserialize, Serialize};

use crate::{
    Error,
    args::{DnsArgs, Output},
    contexts,
    output::{Table, structured},
};

/// What the agent's `/explain` returns.
#[derive(Debug, Deserialize, Serialize)]
pub struct Explanation {
    pub name: String,
    #[serde(rename = "type")]
    pub qtype: String,
    pub rcode: String,
    #[serde(default)]
    pub answers: Vec<Answer>,
    #[serde(default)]
    pub sources: Vec<serde_json::Value>,
    /// The probed gateway addresses of the name (`spec.healthCheck`), in or out of this
    /// cluster's answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probed: Vec<serde_json::Value>,
    #[serde(default)]
    pub truncated: bool,
}

#[derive(Debug, Deserialize, Serialize)]
pub struct Answer {
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub ttl: u32,
    pub data: String,
}

/// The path of `/explain` for `name`, through the service proxy when `proxy` names a
/// `(namespace, service, port)`.
pub fn path(name: &str, qtype: &str, proxy: Option<(&str, &str, &str)>) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", name)
        .append_pair("type", qtype)
        .finish();
    match proxy {
        Some((namespace, service, port)) => {
            format!(
                "/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/explain?{query}"
            )
        }
        None => format!("/explain?{query}"),
    }
}

pub fn render(out: &Explanation) -> String {
    let mut text = format!("{} {} {}\n", out.name, out.qtype, out.rcode);
    if out.answers.is_empty() {
        text.push_str("no answer\n");
    } else {
        let mut answers = Table::new(&["ANSWER", "TYPE", "TTL", "DATA"]);
        for a in &out.answers {
            answers.push(vec![
                a.name.clone(),
                a.rtype.clone(),
                a.ttl.to_string(),
                a.data.clone(),
            ]);
        }
        text.push('\n');
        text.push_str(&answers.render());
    }
    if !out.sources.is_empty() {
        let mut sources = Table::new(&[
            "ENDPOINTSLICE",
            "GATEWAYDNS",
            "CLUSTER",
            "OWNER",
            "ADDRESSES",
        ]);
        for s in &out.sources {
            let str_at = |p: &str| {
                s.pointer(p)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            let slice = match (
                str_at("/endpointSlice/namespace"),
                str_at("/endpointSlice/name"),
            ) {
                (ns, name) if !name.is_empty() => format!("{ns}/{name}"),
                _ => str_at("/source"),
            };
            let cluster = match (str_at("/cluster/namespace"), str_at("/cluster/name")) {
                (ns, name) if !name.is_empty() => format!("{ns}/{name}"),
                _ => String::new(),
            };
            let mut addresses: Vec<String> = s["addresses"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(cname) = s["cname"].as_str() {
                addresses.push(format!("CNAME {cname}"));
            }
            sources.push(vec![
                slice,
                str_at("/gatewayDns"),
                cluster,
                str_at("/owner"),
                addresses.join(","),
            ]);
        }
        text.push('\n');
        text.push_str(&sources.render());
    }
    if !out.probed.is_empty() {
        text.push('\n');
        text.push_str(&render_probed(&out.probed));
    }
    if out.truncated {
        text.push_str("(cut at the agent's bound)\n");
    }
    text
}

/// Why each probed gateway address is in or out of this cluster's answer.
fn render_probed(probed: &[serde_json::Value]) -> String {
    let mut table = Table::new(&["PROBED", "STATE", "IN ANSWER", "PROBES", "LAST ERROR"]);
    let mut fail_open = false;
    for p in probed {
        let text = |key: &str| p[key].as_str().unwrap_or("").to_string();
        fail_open |= p["failOpen"].as_bool() == Some(true);
        let in_answer = match (p["inAnswer"].as_bool(), p["failOpen"].as_bool()) {
            (Some(true), Some(true)) => "yes (fail-open)",
            (Some(true), _) => "yes",
            _ => "no",
        };
        table.push(vec![
            text("target"),
            text("state"),
            in_answer.to_string(),
            p["probes"].as_u64().unwrap_or(0).to_string(),
            text("lastError"),
        ]);
    }
    let mut out = table.render();
    if fail_open {
        out.push_str(
            "every probed gateway of this name fails from this cluster: it answers with the last healthy set\n",
        );
    }
    out
}

pub async fn run(args: DnsArgs) -> Result<(), Error> {
    let name = args.name.trim().trim_end_matches('.');
    if name.is_empty() || name.len() > 253 {
        return Err(Error::Usage(format!(
            "{:?} is not a DNS name (1 to 253 characters)",
            args.name
        )));
    }
    let qtype = args.qtype.as_str();
    let timeout = args.kube.request_timeout();
    let (client, path, via) = match &args.agent_url {
        Some(url) => {
            let uri = url
                .parse()
                .map_err(|e| Error::Usage(format!("--agent-url {url:?} is not a URL: {e}")))?;
            let mut config = Config::new(uri);
            config.connect_timeout = contexts::limit(timeout);
            config.read_timeout = contexts::limit(timeout);
            let client = Client::try_from(config)
                .map_err(|e| Error::Failed(format!("cannot make a client for {url}: {e}")))?;
            (client, path(name, qtype, None), url.clone())
        }
        None => {
            let kubeconfig = contexts::load_args(&args.kube)?;
            let context = contexts::pick(&kubeconfig, args.context.as_deref())?;
            let target = contexts::client(&kubeconfig, &context, timeout).await?;
            let proxy = (
                args.agent_namespace.as_str(),
                args.agent_service.as_str(),
                args.agent_port.as_str(),
            );
            let via = format!(
                "Service {}/{} port {} through context {context:?}",
                proxy.0, proxy.1, proxy.2
            );
            (target.client, path(name, qtype, Some(proxy)), via)
        }
    };
    let request = http::Request::get(&path)
        .body(Vec::new())
        .map_err(|e| Error::Usage(format!("cannot ask for {name:?}: {e}")))?;
    // The whole request is bounded: a proxy that accepts and never answers must not hang a
    // terminal (the client's timeouts are per read, and a proxy may keep a stream alive).
    let answer = match contexts::limit(timeout) {
        None => client.request_text(request).await,
        Some(limit) => tokio::time::timeout(limit, client.request_text(request))
            .await
            .map_err(|_| {
                Error::Failed(format!(
                    "the agent at {via} did not answer within {}; check that it runs (or pass \
                     --agent-url, or a longer --request-timeout)",
                    humantime::format_duration(limit)
                ))
            })?,
    };
    let text = answer.map_err(|e| match &e {
        kube::Error::Api(status) => {
            // The agent's own refusals come as {"error": ...}.
            let agent = serde_json::from_str::<serde_json::Value>(&status.message)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string));
            match agent {
                Some(why) => Error::Usage(format!("the agent refused {name:?}: {why}")),
                None => Error::api(format!("cannot ask the agent at {via}"))(e),
            }
        }
        _ => Error::api(format!(
            "cannot reach the agent at {via}; check that it runs (or pass --agent-url)"
        ))(e),
    })?;
    let out: Explanation = serde_json::from_str(&text).map_err(|e| {
        Error::Failed(format!(
            "the agent at {via} answered something other than an explanation ({e}); is it an xcc-agent with /explain?"
        ))
    })?;
    let text = match args.output {
        Output::Table => render(&out),
        output => structured(&out, output)?,
    };
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_the_name_and_use_the_service_proxy() {
        assert_eq!(
            path("a b.xcc.test", "A", None),
            "/explain?name=a+b.xcc.test&type=A"
        );
        assert_eq!(
            path(
                "x.xcc.test",
                "AAAA",
                Some(("xcc-dns", "xcc-agent-admin", "admin"))
            ),
            "/api/v1/namespaces/xcc-dns/services/xcc-agent-admin:admin/proxy/explain?name=x.xcc.test&type=AAAA"
        );
    }

    #[test]
    fn an_explanation_renders_its_answer_and_sources() {
        let out: Explanation = serde_json::from_value(serde_json::json!({
            "name": "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.",
            "type": "A", "rcode": "NOERROR",
            "answers": [{"name": "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.", "type": "A", "ttl": 30, "data": "10.0.0.1"}],
            "sources": [{
                "source": "xcc-dns/dev-team-cluster-a-gateway",
                "owner": "*.gateway.cluster-a.dev-team.clusters.xcc.test.",
                "addresses": ["10.0.0.1"],
                "endpointSlice": {"namespace": "xcc-dns", "name": "dev-team-cluster-a-gateway"},
                "gatewayDns": "dev-team/gateway-dns",
                "cluster": {"name": "cluster-a", "namespace": "dev-team"}
            }],
            "truncated": false
        }))
        .unwrap();
        let text = render(&out);
        assert!(
            text.starts_with("kuard.gateway.cluster-a.dev-team.clusters.xcc.test. A NOERROR\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "xcc-dns/dev-team-cluster-a-gateway   dev-team/gateway-dns   dev-team/cluster-a"
            ),
            "{text}"
        );
        assert!(text.contains("30    10.0.0.1"), "{text}");
        assert!(!text.contains("PROBED"), "no check, no probe table: {text}");
    }

    #[test]
    fn probed_gateways_say_why_they_are_in_or_out() {
        let out: Explanation = serde_json::from_value(serde_json::json!({
            "name": "kuard.gateway.dev-team.global.xcc.test.",
            "type": "A", "rcode": "NOERROR",
            "answers": [],
            "probed": [
                {"source": "xcc-dns/a", "owner": "*.gateway.dev-team.global.xcc.test.",
                 "address": "10.0.0.1", "target": "http://10.0.0.1:80/healthz", "inAnswer": false,
                 "state": "down", "failOpen": false, "probes": 12, "lastError": "connection refused"},
                {"source": "xcc-dns/b", "owner": "*.gateway.dev-team.global.xcc.test.",
                 "address": "10.0.0.2", "target": "http://10.0.0.2:80/healthz", "inAnswer": true,
                 "state": "up", "failOpen": false, "probes": 12}
            ]
        }))
        .unwrap();
        let text = render(&out);
        assert!(
            text.contains(
                "http://10.0.0.1:80/healthz   down    no          12       connection refused"
            ),
            "{text}"
        );
        assert!(
            text.contains("http://10.0.0.2:80/healthz   up      yes"),
            "{text}"
        );
        assert!(!text.contains("fail-open"), "{text}");
    }
}
