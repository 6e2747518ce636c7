//! The Multi-Cluster Services API conformance suite (upstream's `conformance/`, kept in
//! `../shared/third-party/mcs-api-conformance`), run against clusters of a test bed.
//!
//! ```rust,ignore
//! let run = mcs::run(&bed, &[a, b], &mcs::SuiteOptions::default()).await?;
//! println!("{}", run.summary);            // Ran 27 of 27 Specs in 312.4 seconds; SUCCESS! -- 27 Passed | ...
//! assert_eq!(run.passed, 27, "{}", run.failures());
//! ```
//!
//! `tests/testbed/install.sh` compiles the suite (`go test -c`) into a test binary, cached and
//! named by the env file (`XCC_MCS_CONFORMANCE`). [`run`] writes a kubeconfig with a context per
//! cluster (the admin's credentials, each cluster at the address its pods reach it at, a name of
//! its certificate), runs the binary with `-kubeconfig <file> -contexts <a>,<b>
//! -dns-domain clusterset.local -ginkgo.v -ginkgo.no-color -ginkgo.json-report report.json`
//! in the folder `mcs-conformance/` of the test bed (where the suite writes `report.html` and
//! `report.yaml`), streams its output to `suite.log` there, and reads the result back: Ginkgo's
//! summary line and each spec's state from the JSON report. The folder is kept with the rest of
//! the test bed when the test fails (or with `XCC_KEEP_TESTBED=1`).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};

use crate::{Cluster, Testbed};

/// How to run the suite.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// `-ginkgo.label-filter` (e.g. `Required`), if any.
    pub label_filter: Option<String>,
    /// `-ginkgo.focus` (a regular expression on the specs' texts), if any.
    pub focus: Option<String>,
    /// `-dns-domain`.
    pub dns_domain: String,
    /// The run is killed after this long (the suite's own waits are at most a minute per step).
    pub timeout: Duration,
}

impl Default for SuiteOptions {
    fn default() -> SuiteOptions {
        SuiteOptions {
            label_filter: None,
            focus: None,
            dns_domain: "clusterset.local".into(),
            timeout: Duration::from_secs(3600),
        }
    }
}

/// One spec of a run, from the JSON report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Its full text (the containers' texts and its own, as the suite's report shows it).
    pub text: String,
    /// Its labels (`Required`, `Optional`, `DNS`, `Connectivity`, ...).
    pub labels: Vec<String>,
    /// Ginkgo's state: `passed`, `failed`, `skipped`, `pending`, `panicked`, `timedout`, ...
    pub state: String,
    /// The failure's message and location, for a spec that did not pass or skip.
    pub failure: Option<String>,
}

impl Spec {
    /// Whether the spec ran and passed.
    pub fn passed(&self) -> bool {
        self.state == "passed"
    }

    /// Whether the spec was skipped (by a filter or by the spec itself).
    pub fn skipped(&self) -> bool {
        self.state == "skipped"
    }
}

/// What one run of the suite gave.
#[derive(Clone, Debug)]
pub struct SuiteRun {
    /// Ginkgo's summary, its two lines joined: `Ran N of M Specs in S seconds; SUCCESS! -- N
    /// Passed | 0 Failed | 0 Pending | K Skipped` (or `FAIL! -- ...`).
    pub summary: String,
    /// Specs run (the `N` of `Ran N of M`).
    pub ran: usize,
    /// Specs in the suite (the `M`).
    pub total: usize,
    /// Passed, failed, pending and skipped specs, as the summary counts them.
    pub passed: usize,
    /// See [`SuiteRun::passed`].
    pub failed: usize,
    /// See [`SuiteRun::passed`].
    pub pending: usize,
    /// See [`SuiteRun::passed`].
    pub skipped: usize,
    /// Every spec of the suite (run or skipped), from the JSON report.
    pub specs: Vec<Spec>,
    /// Whether the test binary exited 0.
    pub success: bool,
    /// The folder of the run: `report.html`, `report.yaml`, `report.json`, `suite.log`.
    pub dir: PathBuf,
}

impl SuiteRun {
    /// The specs that ran and did not pass, one per line with their failure (for assertions).
    pub fn failures(&self) -> String {
        self.specs
            .iter()
            .filter(|s| !s.passed() && !s.skipped() && s.state != "pending")
            .map(|s| {
                format!(
                    "- [{}] {}: {}",
                    s.state,
                    s.text,
                    s.failure.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The spec whose text contains `text`, if exactly one does.
    pub fn spec(&self, text: &str) -> Option<&Spec> {
        let mut found = self.specs.iter().filter(|s| s.text.contains(text));
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// Copies the suite's reports and log (report.html, report.yaml, report.json, suite.log) to
    /// `<test-bed folder>/reports/mcs-conformance-<name>/` (`$XCC_TESTBED_DIR`, default
    /// `~/.cache/xcc-testbed`), where they stay after the bed is gone; the latest run of each
    /// name replaces the one before. Returns that folder.
    pub fn keep(&self, name: &str) -> anyhow::Result<PathBuf> {
        let kept = crate::images::cache_dir()
            .join("reports")
            .join(format!("mcs-conformance-{name}"));
        if kept.exists() {
            std::fs::remove_dir_all(&kept)?;
        }
        std::fs::create_dir_all(&kept)?;
        for file in ["report.html", "report.yaml", "report.json", "suite.log"] {
            let from = self.dir.join(file);
            if from.is_file() {
                std::fs::copy(&from, kept.join(file))
                    .with_context(|| format!("keeping {}", from.display()))?;
            }
        }
        Ok(kept)
    }

    /// The suite's log (its whole output).
    pub fn log(&self) -> PathBuf {
        self.dir.join("suite.log")
    }
}

/// Writes a kubeconfig with one context per cluster, named after it: the admin's token, the
/// cluster's CA, and the address pods reach its API server at (in a test bed with nodes; else its
/// loopback URL). The host reaches both.
pub fn write_kubeconfig(clusters: &[&Cluster], path: &Path) -> anyhow::Result<()> {
    let mut config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": clusters.first().map(|c| c.name.clone()).unwrap_or_default(),
    });
    for c in clusters {
        let server = c.url_from_pods().unwrap_or_else(|| c.url.clone());
        let ca = xcc_kube::wire::encode_base64(&c.serving_ca()?);
        let push = |config: &mut serde_json::Value, key: &str, item: serde_json::Value| {
            config[key].as_array_mut().expect("an array").push(item);
        };
        push(
            &mut config,
            "clusters",
            serde_json::json!({"name": c.name, "cluster": {"server": server, "certificate-authority-data": ca}}),
        );
        push(
            &mut config,
            "users",
            serde_json::json!({"name": format!("{}-admin", c.name), "user": {"token": c.admin_token()}}),
        );
        push(
            &mut config,
            "contexts",
            serde_json::json!({"name": c.name, "context": {"cluster": c.name, "user": format!("{}-admin", c.name)}}),
        );
    }
    std::fs::write(path, serde_json::to_vec_pretty(&config)?)?;
    Ok(())
}

/// Runs the suite against `clusters` (the first is the one the suite exports from), in the folder
/// `mcs-conformance` of `bed` (a second run in the same bed gets `mcs-conformance-2`, ...).
pub async fn run(
    bed: &Testbed,
    clusters: &[&Cluster],
    options: &SuiteOptions,
) -> anyhow::Result<SuiteRun> {
    let binary = bed.binaries.mcs_conformance.clone().context(
        "the MCS conformance suite is not built: run tests/testbed/install.sh (it needs ../shared/third-party/mcs-api-conformance)",
    )?;
    let dir = (1..)
        .map(|i| match i {
            1 => bed.dir().join("mcs-conformance"),
            i => bed.dir().join(format!("mcs-conformance-{i}")),
        })
        .find(|d| !d.exists())
        .expect("a free name");
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(clusters, &kubeconfig)?;
    let contexts: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let mut args = vec![
        "-ginkgo.v".to_string(),
        "-ginkgo.no-color".into(),
        "-ginkgo.json-report=report.json".into(),
        format!("-kubeconfig={}", kubeconfig.display()),
        format!("-contexts={}", contexts.join(",")),
        format!("-dns-domain={}", options.dns_domain),
        "-organization=xcc".into(),
        "-project=xcc".into(),
        format!("-version={}", crate::images::workspace_version()),
    ];
    if let Some(filter) = &options.label_filter {
        args.push(format!("-ginkgo.label-filter={filter}"));
    }
    if let Some(focus) = &options.focus {
        args.push(format!("-ginkgo.focus={focus}"));
    }
    let log = std::fs::File::create(dir.join("suite.log"))?;
    let mut child = tokio::process::Command::new(&binary)
        .args(&args)
        .current_dir(&dir)
        // Only the kubeconfig given: never the user's own.
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", binary.display()))?;
    let status = match tokio::time::timeout(options.timeout, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            child.kill().await?;
            bail!(
                "the MCS conformance suite did not finish within {:?}; its output: {}",
                options.timeout,
                dir.join("suite.log").display()
            );
        }
    };
    let output = std::fs::read_to_string(dir.join("suite.log"))?;
    let mut run = parse_summary(&output).with_context(|| {
        format!(
            "no Ginkgo summary in the suite's output ({status}), {}",
            dir.join("suite.log").display()
        )
    })?;
    run.success = status.success();
    let json = std::fs::read_to_string(dir.join("report.json"))
        .with_context(|| format!("reading the JSON report in {}", dir.display()))?;
    run.specs = parse_json_report(&json)?;
    run.dir = dir;
    Ok(run)
}

/// Ginkgo's summary: the line `Ran N of M Specs in S seconds` and the counts line after it
/// (`SUCCESS! -- 2 Passed | 0 Failed | 0 Pending | 25 Skipped`). `specs`, `success` and `dir`
/// are left empty.
pub fn parse_summary(output: &str) -> Option<SuiteRun> {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    let at = lines.iter().rposition(|l| l.starts_with("Ran "))?;
    let ran_line = lines[at];
    let mut words = ran_line.split_whitespace();
    let (_, ran, _, total) = (words.next(), words.next()?, words.next(), words.next()?);
    let counts_line = lines[at + 1..].iter().find(|l| l.contains(" Passed |"))?;
    let count = |what: &str| -> Option<usize> {
        counts_line
            .split(['|', '-'])
            .map(str::trim)
            .find_map(|part| part.strip_suffix(what)?.trim().parse().ok())
    };
    Some(SuiteRun {
        summary: format!("{ran_line}; {counts_line}"),
        ran: ran.parse().ok()?,
        total: total.parse().ok()?,
        passed: count("Passed")?,
        failed: count("Failed")?,
        pending: count("Pending")?,
        skipped: count("Skipped")?,
        specs: vec![],
        success: false,
        dir: PathBuf::new(),
    })
}

/// The `It` specs of a Ginkgo JSON report (`-ginkgo.json-report`): text, labels, state, failure.
pub fn parse_json_report(json: &str) -> anyhow::Result<Vec<Spec>> {
    let reports: serde_json::Value = serde_json::from_str(json)?;
    let mut specs = Vec::new();
    for report in reports
        .as_array()
        .context("a JSON array of suite reports")?
    {
        let Some(items) = report["SpecReports"].as_array() else {
            continue;
        };
        for s in items {
            if s["LeafNodeType"].as_str() != Some("It") {
                continue;
            }
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            };
            let mut texts = strings(&s["ContainerHierarchyTexts"]);
            texts.push(s["LeafNodeText"].as_str().unwrap_or_default().to_string());
            let text = texts
                .iter()
                .map(|t| t.trim())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let mut labels: Vec<String> = s["ContainerHierarchyLabels"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(strings)
                .chain(strings(&s["LeafNodeLabels"]))
                .collect();
            labels.sort();
            labels.dedup();
            let state = s["State"].as_str().unwrap_or("unknown").to_string();
            let failure = s["Failure"]["Message"].as_str().map(|m| {
                let location = &s["Failure"]["Location"];
                match (
                    location["FileName"].as_str(),
                    location["LineNumber"].as_u64(),
                ) {
                    (Some(file), Some(line)) => {
                        let file = Path::new(file)
                            .file_name()
                            .map_or_else(|| file.to_string(), |f| f.to_string_lossy().into_owned());
                        format!("{} ({file}:{line})", m.trim())
                    }
                    _ => m.trim().to_string(),
                }
            });
            specs.push(Spec {
                text,
                labels,
                state,
                failure: failure.filter(|_| !matches!(s["State"].as_str(), Some("passed"))),
            });
        }
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_of_a_failed_run() {
        let output = "...\n------------------------------\n\nSummarizing 1 Failure:\n  [FAIL] x\n\nRan 3 of 27 Specs in 61.224 seconds\nFAIL! -- 2 Passed | 1 Failed | 0 Pending | 24 Skipped\n--- FAIL: TestConformance (61.23s)\nFAIL\n";
        let run = parse_summary(output).unwrap();
        assert_eq!(
            (
                run.ran,
                run.total,
                run.passed,
                run.failed,
                run.pending,
                run.skipped
            ),
            (3, 27, 2, 1, 0, 24)
        );
        assert_eq!(
            run.summary,
            "Ran 3 of 27 Specs in 61.224 seconds; FAIL! -- 2 Passed | 1 Failed | 0 Pending | 24 Skipped"
        );
    }

    #[test]
    fn no_summary_without_the_counts() {
        assert!(parse_summary("Ran 3 of 27 Specs in 1 seconds\n").is_none());
        assert!(parse_summary("panic: boom\n").is_none());
    }

    #[test]
    fn specs_of_a_json_report() {
        let json = r#"[{"SuitePath":"/s","SpecReports":[
          {"LeafNodeType":"BeforeSuite","State":"passed"},
          {"ContainerHierarchyTexts":["",""],"ContainerHierarchyLabels":[["Optional","DNS"],[]],
           "LeafNodeText":"A DNS lookup","LeafNodeLabels":["ClusterIP"],"LeafNodeType":"It","State":"failed",
           "Failure":{"Message":"Timed out\n","Location":{"FileName":"/x/clusterip_service_dns.go","LineNumber":59}}},
          {"ContainerHierarchyTexts":["","Connectivity to a service that is not exported"],
           "LeafNodeText":"should be inaccessible","LeafNodeLabels":["Required"],"LeafNodeType":"It","State":"passed"}
        ]}]"#;
        let specs = parse_json_report(json).unwrap();
        assert_eq!(
            specs,
            vec![
                Spec {
                    text: "A DNS lookup".into(),
                    labels: vec!["ClusterIP".into(), "DNS".into(), "Optional".into()],
                    state: "failed".into(),
                    failure: Some("Timed out (clusterip_service_dns.go:59)".into()),
                },
                Spec {
                    text: "Connectivity to a service that is not exported should be inaccessible"
                        .into(),
                    labels: vec!["Required".into()],
                    state: "passed".into(),
                    failure: None,
                },
            ]
        );
    }
}
