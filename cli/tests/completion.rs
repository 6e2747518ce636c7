//! `kubectl xcc completion bash`, sourced in a real bash as a user does, completes
//! `kubectl xcc ...` and `kubectl-xcc ...`: with kubectl's own completion registered before it,
//! loaded on first use by bash-completion, or absent. bash calls the function `complete -p`
//! names with COMP_WORDS/COMP_CWORD set, as here. No cluster is needed: kubectl runs the plugin
//! as this binary with the same arguments, and completion reads only the kubeconfig.
//!
//! zsh and fish: the scripts of `completion zsh|fish` complete `kubectl-xcc ...` (zsh: loaded by
//! compinit from fpath, driven on a pseudo-terminal; fish: `complete -C`), and kubectl's own
//! zsh and fish completion complete `kubectl xcc ...` through `kubectl_complete-xcc`. A
//! missing zsh, fish or kubectl skips its part with one loud line, and fails in CI.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

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
        self.run(Path::new("bash"), &["--norc", "-c", script])
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

fn source(path: &Path) -> String {
    format!("source {}\n", path.display())
}

#[test]
fn sourced_bash_completion_completes_kubectl_xcc_and_kubectl_dash_xcc() {
    let bed = Bed::new();
    let script = bed.script_for("bash", "kubectl-xcc.bash");
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
    let script = bed.script_for("bash", "kubectl-xcc.bash");
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

/// `shell` when installed; otherwise `None` after one loud line, or a failure in CI (where
/// test.sh installs it).
fn shell(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        missing(
            &format!("{name} is not installed (test.sh installs it)"),
            "its completion is not tested",
        );
    }
    found
}

/// A tool the test needs is `missing`: a failure in CI, else one loud line saying what is `untested`.
fn missing(missing: &str, untested: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{missing}");
    eprintln!("SKIPPED: {missing}; {untested}");
}

/// kubectl, to complete `kubectl xcc ...` through kubectl's own completion: $XCC_KUBECTL, the
/// test bed's (tests/testbed/install.sh), or on PATH. Missing: one loud line, a failure in CI.
fn kubectl() -> Option<PathBuf> {
    let from_testbed = || {
        let dir = std::env::var_os("XCC_TESTBED_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/xcc-testbed"))
            })?;
        let env = std::fs::read_to_string(dir.join("env")).ok()?;
        env.lines()
            .find_map(|l| l.strip_prefix("export XCC_KUBECTL="))
            .map(PathBuf::from)
    };
    let found = std::env::var_os("XCC_KUBECTL")
        .map(PathBuf::from)
        .or_else(from_testbed)
        .filter(|p| p.is_file())
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|dir| dir.join("kubectl"))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        missing(
            "kubectl not found (tests/testbed/install.sh installs it)",
            "completion through `kubectl xcc` is not tested",
        );
    }
    found
}

impl Bed {
    /// The script of `kubectl-xcc completion <shell>`, written as `file` in the bed.
    fn script_for(&self, shell: &str, file: &str) -> PathBuf {
        let out = Command::new(PLUGIN)
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let path = self.path(file);
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    /// kubectl on the bed's PATH, with its `completion <shell>` script written as `file`.
    fn with_kubectl(&self, kubectl: &Path, shell: &str, file: &str) {
        std::os::unix::fs::symlink(kubectl, self.path("bin").join("kubectl")).unwrap();
        let out = Command::new(kubectl)
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::write(self.path(file), out.stdout).unwrap();
    }

    /// What fish completes for each of `lines` (`complete -C`) after sourcing `script`: the
    /// candidates without their descriptions, one Vec per line.
    fn fish_complete(&self, fish: &Path, script: &Path, lines: &[&str]) -> Vec<Vec<String>> {
        let completions: Vec<String> = lines
            .iter()
            .map(|line| format!("complete -C '{line}'"))
            .collect();
        let command = format!(
            "source {}; {}",
            script.display(),
            completions.join("; echo @@; ")
        );
        let out = self.run(fish, &["--no-config", "-c", &command]);
        let parts: Vec<Vec<String>> = out
            .split("@@\n")
            .map(|p| {
                p.lines()
                    .map(|l| l.split('\t').next().unwrap_or_default().to_string())
                    .collect()
            })
            .collect();
        assert_eq!(parts.len(), lines.len(), "{out}");
        parts
    }

    fn path_var(&self) -> String {
        format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn run(&self, program: &Path, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .env("PATH", self.path_var())
            .env("KUBECONFIG", self.path("config"))
            .env("HOME", self.dir.path())
            .env_remove("ZDOTDIR")
            .env_remove("XDG_CONFIG_HOME")
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{program:?} {args:?} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

#[test]
fn fish_completes_kubectl_dash_xcc_and_through_kubectl() {
    let Some(fish) = shell("fish") else { return };
    let bed = Bed::new();
    let script = bed.script_for("fish", "kubectl-xcc.fish");
    let parts = bed.fish_complete(
        &fish,
        &script,
        &["kubectl-xcc st", "kubectl-xcc ", "kubectl-xcc cluster j"],
    );
    assert_eq!(parts[0], ["status"], "{parts:?}");
    for name in ["plumber", "cluster", "link", "status", "dns", "completion"] {
        assert!(parts[1].contains(&name.to_string()), "{name}: {parts:?}");
    }
    assert_eq!(parts[2], ["join"], "{parts:?}");

    // `kubectl xcc`: kubectl's fish completion asks kubectl_complete-xcc.
    let Some(kubectl) = kubectl() else { return };
    bed.with_kubectl(&kubectl, "fish", "kubectl.fish");
    let parts = bed.fish_complete(
        &fish,
        &bed.path("kubectl.fish"),
        &["kubectl xcc st", "kubectl xcc status --context "],
    );
    assert_eq!(parts[0], ["status"], "{parts:?}");
    assert_eq!(
        parts[1],
        ["alpha", "beta"],
        "contexts of $KUBECONFIG: {parts:?}"
    );
}

/// A zsh script that starts an interactive `zsh -f` on a pseudo-terminal (zsh/zpty), loads
/// completion with compinit from the bed (fpath), prints what `_comps` registers for each
/// command of `registered`, then types each line of `lines` followed by TAB and prints the
/// line as completion left it (`LINE: ...`).
fn zsh_session(bed: &Bed, registered: &[&str], lines: &[&str]) -> String {
    let mut script = format!(
        r#"zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z "bindkey -e; fpath=({} \$fpath); autoload -U compinit; compinit -u -D; PS1='> '"
"#,
        bed.dir.path().display()
    );
    for command in registered {
        script.push_str(&format!(
            "zpty -w z \"print -r -- COMP: {command}=\\$_comps[{command}]\"\n"
        ));
    }
    for line in lines {
        // TAB, then the line as completion left it, printed (^A: start of the line). The
        // keys queue on the terminal: zsh reads the next ones once completion is done.
        script.push_str(&format!(
            "zpty -w -n z $'{line}\\t'\nzpty -w -n z $'\\x01print -r -- LINE: \\n'\n"
        ));
    }
    script.push_str(
        r#"zpty -w z 'print -r -- END'
out=
for i in {1..100}; do
  while zpty -r -t z chunk; do out+=$chunk; done
  [[ $out == *$'\nEND'* ]] && break
  sleep 0.1
done
zpty -d z
print -r -- ${out//$'\r'/}
"#,
    );
    let zsh = shell("zsh").expect("checked by the caller");
    let path = bed.path("session.zsh");
    std::fs::write(&path, script).unwrap();
    bed.run(&zsh, &["-f", path.to_str().unwrap()])
}

/// The lines of `out` that start with `prefix`, without it and trimmed.
fn printed<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(str::trim)
        .collect()
}

#[test]
fn zsh_completes_kubectl_dash_xcc_and_through_kubectl() {
    if shell("zsh").is_none() {
        return;
    }
    let bed = Bed::new();
    // As a user installs it: the script as _kubectl-xcc in a directory of fpath.
    bed.script_for("zsh", "_kubectl-xcc");
    let out = zsh_session(
        &bed,
        &["kubectl-xcc"],
        &["kubectl-xcc st", "kubectl-xcc cluster j"],
    );
    assert_eq!(
        printed(&out, "COMP: "),
        ["kubectl-xcc=_kubectl-xcc"],
        "{out}"
    );
    assert_eq!(
        printed(&out, "LINE: "),
        ["kubectl-xcc status", "kubectl-xcc cluster join"],
        "{out}"
    );

    // `kubectl xcc`: kubectl's zsh completion asks kubectl_complete-xcc.
    let Some(kubectl) = kubectl() else { return };
    bed.with_kubectl(&kubectl, "zsh", "_kubectl");
    let out = zsh_session(
        &bed,
        &["kubectl-xcc", "kubectl"],
        &["kubectl xcc st", "kubectl xcc status --context b"],
    );
    assert_eq!(
        printed(&out, "COMP: "),
        ["kubectl-xcc=_kubectl-xcc", "kubectl=_kubectl"],
        "{out}"
    );
    assert_eq!(
        printed(&out, "LINE: "),
        ["kubectl xcc status", "kubectl xcc status --context beta"],
        "{out}"
    );
}
