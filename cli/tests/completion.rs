//! `kubectl xcc completion bash`, sourced in a real bash as a user does, completes
//! `kubectl xcc ...` and `kubectl-xcc ...`: with kubectl's own completion registered before it,
//! loaded on first use by bash-completion, or absent. bash calls the function `complete -p`
//! names with COMP_WORDS/COMP_CWORD set, as here. No cluster is needed: kubectl runs the plugin
//! as this binary with the same arguments, and completion reads only the kubeconfig.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-xcc");

/// A directory for PATH holding `kubectl-xcc` and `kubectl_complete-xcc` (links to the
/// binary), and a kubeconfig with contexts alpha and beta.
struct Bed {
    dir: tempfile::TempDir,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for name in ["kubectl-xcc", "kubectl_complete-xcc"] {
            std::os::unix::fs::symlink(PLUGIN, bin.join(name)).unwrap();
        }
        std::fs::write(
            dir.path().join("config"),
            "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {}}]
contexts:
- {name: alpha, context: {cluster: c, user: u}}
- {name: beta, context: {cluster: c, user: u, namespace: team-b}}
current-context: alpha
",
        )
        .unwrap();
        Bed { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `script` in a non-interactive bash with the plugin on PATH.
    fn bash(&self, script: &str) -> String {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .arg("--norc")
            .arg("-c")
            .arg(script)
            .env("PATH", path)
            .env("KUBECONFIG", self.path("config"))
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "bash failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// Defines `complete_line LINE...`: completes the last word of LINE (the words given; an empty
/// last word for "after a space") by calling the function `complete -p` names for its first
/// word, as bash does, and prints COMPREPLY one per line between `<<` and `>>` lines.
const COMPLETE_LINE: &str = r#"
complete_line() {
    local spec fn
    spec=$(complete -p "$1") || { echo "no completion for $1"; return 1; }
    [[ $spec =~ -F\ ([^ ]+) ]] || { echo "not a function: $spec"; return 1; }
    fn=${BASH_REMATCH[1]}
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    "$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    echo '<<'
    printf '%s\n' "${COMPREPLY[@]}"
    echo '>>'
}
"#;

/// The lines between each `<<` and `>>` line, one Vec per completion.
fn replies(out: &str) -> Vec<Vec<String>> {
    out.split("<<\n")
        .skip(1)
        .map(|block| {
            let block = block.split(">>\n").next().unwrap_or_default();
            block
                .lines()
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

fn script(bed: &Bed) -> PathBuf {
    let out = Command::new(PLUGIN)
        .args(["completion", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = bed.path("kubectl-xcc.bash");
    std::fs::write(&path, out.stdout).unwrap();
    path
}

fn source(path: &Path) -> String {
    format!("source {}\n", path.display())
}

#[test]
fn sourced_bash_completion_completes_kubectl_xcc_and_kubectl_dash_xcc() {
    let bed = Bed::new();
    let script = script(&bed);
    let out = bed.bash(&format!(
        "{COMPLETE_LINE}{}
complete -p kubectl-xcc
complete -p kubectl
complete_line kubectl xcc ''
complete_line kubectl xcc st
complete_line kubectl-xcc st
complete_line kubectl xcc cluster j
complete_line kubectl xcc status --all
complete_line kubectl xcc status -o ''
complete_line kubectl xcc status --output = j
complete_line kubectl xcc status --context ''
complete_line kubectl-xcc cluster join --context alpha,b
complete_line kubectl xcc completion ''
",
        source(&script)
    ));
    assert!(
        out.contains("complete -F __kubectl_xcc_start kubectl-xcc"),
        "{out}"
    );
    assert!(out.contains("-F __kubectl_xcc_kubectl kubectl"), "{out}");
    let r = replies(&out);
    assert_eq!(r.len(), 10, "{out}");
    for name in ["plumber", "cluster", "link", "status", "dns", "completion"] {
        assert!(r[0].contains(&name.to_string()), "{name}: {out}");
    }
    assert!(!r[0].contains(&"completions".to_string()), "{out}");
    assert_eq!(r[1], ["status"], "kubectl xcc st");
    assert_eq!(r[2], ["status"], "kubectl-xcc st");
    assert_eq!(r[3], ["join"]);
    assert_eq!(r[4], ["--all-namespaces"]);
    assert_eq!(r[5], ["table", "json", "yaml"]);
    assert_eq!(r[6], ["json"], "--output=j, split at = by bash");
    assert_eq!(r[7], ["alpha", "beta"], "contexts of $KUBECONFIG");
    assert_eq!(r[8], ["alpha,beta"]);
    assert!(r[9].contains(&"bash".to_string()) && r[9].contains(&"zsh".to_string()));
}

#[test]
fn kubectls_own_completion_keeps_working_around_the_wrapper() {
    let bed = Bed::new();
    let script = script(&bed);
    // kubectl's completion registered before (as `source <(kubectl completion bash)` does):
    // `kubectl xcc` is ours, everything else is kubectl's, with kubectl's options kept.
    let kubectl = "__start_kubectl() { COMPREPLY=(from-kubectl); }
complete -o default -F __start_kubectl kubectl
";
    let out = bed.bash(&format!(
        "{COMPLETE_LINE}{kubectl}{}{}
complete -p kubectl
complete_line kubectl xcc st
complete_line kubectl get po
complete_line kubectl x
",
        source(&script),
        // Sourced twice (a second shell init): still one wrapper, kubectl's completion kept.
        source(&script)
    ));
    assert!(
        out.contains("complete -o default -F __kubectl_xcc_kubectl kubectl"),
        "{out}"
    );
    let r = replies(&out);
    assert_eq!(r[0], ["status"], "{out}");
    assert_eq!(r[1], ["from-kubectl"], "{out}");
    assert_eq!(r[2], ["from-kubectl"], "{out}");

    // No kubectl completion yet, bash-completion loads it on first use.
    let loader = "_completion_loader() {
    __start_kubectl() { COMPREPLY=(loaded-kubectl); }
    complete -o default -F __start_kubectl \"$1\"
    return 124
}
";
    let out = bed.bash(&format!(
        "{COMPLETE_LINE}{loader}{}
complete_line kubectl xcc dn
complete_line kubectl get po
complete -p kubectl
complete_line kubectl xcc li
complete_line kubectl get po
",
        source(&script)
    ));
    let r = replies(&out);
    assert_eq!(r[0], ["dns"], "{out}");
    assert_eq!(r[1], ["loaded-kubectl"], "{out}");
    assert!(
        out.contains("complete -o default -F __kubectl_xcc_kubectl kubectl"),
        "{out}"
    );
    assert_eq!(r[2], ["link"], "{out}");
    assert_eq!(r[3], ["loaded-kubectl"], "{out}");
}

#[test]
fn kubectl_complete_xcc_answers_kubectls_plugin_protocol() {
    let bed = Bed::new();
    // kubectl 1.26+: `kubectl xcc status --o<TAB>` runs `kubectl_complete-xcc status --o`.
    let out = Command::new(bed.path("bin").join("kubectl_complete-xcc"))
        .args(["status", "--o"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("--output"), "{text}");
    assert_eq!(lines[1], ":4", "directive: no file names");
    let out = Command::new(bed.path("bin").join("kubectl_complete-xcc"))
        .arg("")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("status\t")),
        "subcommands with their descriptions: {text}"
    );
}
