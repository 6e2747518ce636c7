//! Shell completion. One engine answers three askers, in the protocol of kubectl's completion
//! (cobra's: one candidate a line, `value<TAB>description`, then `:DIRECTIVE`):
//!
//! - kubectl itself (1.26 and later): `kubectl __complete xcc WORDS...` runs
//!   `kubectl_complete-xcc WORDS...` from PATH; this binary answers when run under that name;
//! - the bash script `kubectl xcc completion bash` prints, through `kubectl-xcc __complete WORDS...`;
//! - tests.
//!
//! WORDS are the words after the plugin's name; the last is the one being completed (empty when
//! the cursor follows a space). The other shells' scripts are clap_complete's.

use std::path::Path;

use clap::{Arg, Command, builder::ValueHint};

/// The name kubectl runs to complete the plugin's arguments.
pub const KUBECTL_COMPLETE: &str = "kubectl_complete-xcc";

/// The hidden first argument under which the bash script asks for candidates.
pub const COMPLETE_ARG: &str = "__complete";

/// cobra's shell completion directives (bit flags), as kubectl passes them to the shell.
pub mod directive {
    /// No candidate: the shell may complete file names.
    pub const DEFAULT: u32 = 0;
    /// No space after the candidate.
    pub const NO_SPACE: u32 = 2;
    /// No file names, even without a candidate.
    pub const NO_FILE_COMP: u32 = 4;
}

/// Candidates for the word being completed, and what the shell does besides.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// (value, description).
    pub candidates: Vec<(String, String)>,
    /// What the shell does besides offering the candidates ([`directive`] bits).
    pub directive: u32,
    /// The namespaces of a cluster are candidates too: [`namespaces`] asks it for them.
    pub namespaces: Option<NamespaceQuery>,
}

/// Which cluster's namespaces complete `-n` (the kubeconfig and context on the line).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NamespaceQuery {
    /// `--kubeconfig` on the line, if given.
    pub kubeconfig: Option<String>,
    /// `--context` on the line, if given.
    pub context: Option<String>,
    /// What is typed of the namespace.
    pub typed: String,
    /// What goes before each candidate (the part of the word before the namespace).
    pub prefix: String,
}

/// How long completion waits for a cluster's namespaces (a TAB must not hang).
pub const NAMESPACES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Adds the namespaces `completion` asks for, as kubectl completes `-n`; none when the cluster
/// does not answer in [`NAMESPACES_TIMEOUT`] or refuses.
pub async fn namespaces(completion: &mut Completion) {
    let Some(query) = completion.namespaces.take() else {
        return;
    };
    let list = async {
        let kubeconfig = crate::contexts::load(query.kubeconfig.as_deref().map(Path::new)).ok()?;
        let context = crate::contexts::pick(&kubeconfig, query.context.as_deref()).ok()?;
        let target = crate::contexts::client(&kubeconfig, &context, NAMESPACES_TIMEOUT)
            .await
            .ok()?;
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(target.client);
        let list = api.list_metadata(&Default::default()).await.ok()?;
        Some(
            list.items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect::<Vec<_>>(),
        )
    };
    let names = tokio::time::timeout(NAMESPACES_TIMEOUT, list)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    completion.candidates.extend(
        names
            .into_iter()
            .filter(|n| n.starts_with(&query.typed))
            .map(|n| (format!("{}{n}", query.prefix), String::new())),
    );
}

/// What the words before the one completed say that values depend on.
#[derive(Default)]
struct Line<'a> {
    kubeconfig: Option<&'a str>,
    context: Option<&'a str>,
}

impl Completion {
    /// In cobra's protocol: `value<TAB>description` lines, then `:DIRECTIVE`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (value, description) in &self.candidates {
            out.push_str(value);
            if !description.is_empty() {
                out.push('\t');
                out.push_str(description);
            }
            out.push('\n');
        }
        out.push_str(&format!(":{}\n", self.directive));
        out
    }

    fn none(directive: u32) -> Self {
        Completion {
            directive,
            ..Completion::default()
        }
    }
}

/// The first sentence of a help text, on one line, cut to 80 characters.
fn summary(text: Option<&clap::builder::StyledStr>) -> String {
    let text = text.map(|t| t.to_string()).unwrap_or_default();
    let text = crate::one_line(text.split("\n\n").next().unwrap_or_default());
    let mut end = text.len();
    for (i, _) in text.match_indices(". ") {
        if !(text[..i].ends_with("e.g") || text[..i].ends_with("i.e")) {
            end = i;
            break;
        }
    }
    let sentence = text[..end].trim_end_matches('.');
    if sentence.chars().count() <= 80 {
        return sentence.to_string();
    }
    let cut: String = sentence.chars().take(77).collect();
    format!("{}...", cut.trim_end())
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

fn long<'a>(command: &'a Command, name: &str) -> Option<&'a Arg> {
    command.get_arguments().find(|a| {
        a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|l| l.contains(&name))
    })
}

fn short(command: &Command, c: char) -> Option<&Arg> {
    command.get_arguments().find(|a| {
        a.get_short() == Some(c) || a.get_all_short_aliases().is_some_and(|l| l.contains(&c))
    })
}

/// Whether `arg` names a context of the kubeconfig (`--context`, `--service-context`, `-c`...).
fn is_context(arg: &Arg) -> bool {
    arg.get_long()
        .is_some_and(|l| l == "context" || l.ends_with("-context"))
}

/// Whether `arg` is kubectl's `-n` of a command reading one context (`status`): completed with
/// that cluster's namespaces.
fn is_namespace_of_context(command: &Command, arg: &Arg) -> bool {
    arg.get_long() == Some("namespace")
        && arg.get_short() == Some('n')
        && long(command, "context").is_some()
}

/// Candidates for a value of `arg` of `command` starting with `typed`, each written after
/// `prefix`.
fn values(command: &Command, arg: &Arg, typed: &str, prefix: &str, line: &Line) -> Completion {
    let kubeconfig = line.kubeconfig;
    // A list (`--context a,b,c`): complete its last item.
    let (typed, prefix) = match arg.get_value_delimiter() {
        Some(d) if typed.contains(d) => {
            let cut = typed.rfind(d).map_or(0, |i| i + d.len_utf8());
            (&typed[cut..], format!("{prefix}{}", &typed[..cut]))
        }
        _ => (typed, prefix.to_string()),
    };
    let possible = arg.get_possible_values();
    let mut candidates: Vec<(String, String)> = if !possible.is_empty() {
        possible
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| (v.get_name().to_string(), summary(v.get_help())))
            .collect()
    } else if is_context(arg) {
        crate::contexts::load(kubeconfig.map(Path::new))
            .map(|k| crate::contexts::context_names(&k))
            .unwrap_or_default()
            .into_iter()
            .map(|name| (name, String::new()))
            .collect()
    } else if matches!(
        arg.get_value_hint(),
        ValueHint::FilePath | ValueHint::AnyPath | ValueHint::DirPath
    ) {
        return Completion::none(directive::DEFAULT);
    } else if is_namespace_of_context(command, arg) {
        return Completion {
            directive: directive::NO_FILE_COMP,
            namespaces: Some(NamespaceQuery {
                kubeconfig: line.kubeconfig.map(String::from),
                context: line.context.map(String::from),
                typed: typed.to_string(),
                prefix,
            }),
            ..Completion::default()
        };
    } else {
        Vec::new()
    };
    candidates.retain(|(v, _)| v.starts_with(typed));
    for (value, _) in &mut candidates {
        value.insert_str(0, &prefix);
    }
    Completion {
        candidates,
        directive: directive::NO_FILE_COMP,
        namespaces: None,
    }
}

/// Where the words before the one completed leave the command line.
struct Walk<'c, 'w> {
    /// The (sub)command they name.
    current: &'c Command,
    /// A flag whose value is the next word.
    pending: Option<&'c Arg>,
    /// How many positionals of `current` they hold.
    positionals: usize,
    /// After `--`: only positionals follow.
    only_positionals: bool,
    line: Line<'w>,
}

/// Reads `done` (the words before the one completed) on `command`: the subcommands they name,
/// the flags that take a value, and the positionals.
fn walk<'c, 'w>(command: &'c Command, done: &'w [String]) -> Walk<'c, 'w> {
    let mut walk = Walk {
        current: command,
        pending: None,
        positionals: 0,
        only_positionals: false,
        line: Line::default(),
    };
    for word in done {
        if let Some(arg) = walk.pending.take() {
            walk.line.remember(arg.get_long(), word.as_str());
            continue;
        }
        if walk.only_positionals {
            walk.positionals += 1;
        } else if word == "--" {
            walk.only_positionals = true;
        } else if let Some(flag) = word.strip_prefix("--") {
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (flag, None),
            };
            if let Some(arg) = long(walk.current, name).filter(|a| takes_value(a)) {
                match value {
                    None => walk.pending = Some(arg),
                    Some(value) => walk.line.remember(Some(name), value),
                }
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-abc`: flags, up to one that takes a value (the rest of the word, or the next).
            for (i, c) in shorts.char_indices() {
                if let Some(arg) = short(walk.current, c).filter(|a| takes_value(a)) {
                    if i + c.len_utf8() == shorts.len() {
                        walk.pending = Some(arg);
                    }
                    break;
                }
            }
        } else if let Some(sub) = walk
            .current
            .get_subcommands()
            .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
        {
            walk.current = sub;
            walk.positionals = 0;
        } else {
            walk.positionals += 1;
        }
    }
    walk
}

impl<'a> Line<'a> {
    /// Keeps the value of a flag that values of later flags depend on.
    fn remember(&mut self, name: Option<&str>, value: &'a str) {
        match name {
            Some("kubeconfig") => self.kubeconfig = Some(value),
            Some("context") => self.context = Some(value),
            _ => {}
        }
    }
}

/// What the last of `words` (the words after the plugin's name) can be, on `command` (the
/// CLI's, unbuilt).
pub fn complete(mut command: Command, words: &[String]) -> Completion {
    command.build();
    let (typed, done) = match words.split_last() {
        Some((typed, done)) => (typed.as_str(), done),
        None => ("", &[][..]),
    };
    let walk = walk(&command, done);
    let (current, line) = (walk.current, &walk.line);
    if let Some(arg) = walk.pending {
        return values(current, arg, typed, "", line);
    }
    if !walk.only_positionals && typed.starts_with('-') {
        return flags(current, typed, line);
    }
    let mut candidates: Vec<(String, String)> = if walk.only_positionals {
        Vec::new()
    } else {
        current
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name().starts_with(typed))
            .map(|s| (s.get_name().to_string(), summary(s.get_about())))
            .collect()
    };
    if let Some(arg) = current.get_positionals().nth(walk.positionals) {
        let more = values(current, arg, typed, "", line);
        if candidates.is_empty() && more.directive == directive::DEFAULT {
            return more;
        }
        candidates.extend(more.candidates);
    }
    Completion {
        candidates,
        directive: directive::NO_FILE_COMP,
        namespaces: None,
    }
}

/// Candidates for `typed`, a flag of `current` being written: its long names, or the values
/// of `--name=`.
fn flags(current: &Command, typed: &str, line: &Line) -> Completion {
    if let Some((name, value)) = typed.strip_prefix("--").and_then(|f| f.split_once('=')) {
        return match long(current, name).filter(|a| takes_value(a)) {
            Some(arg) => values(current, arg, value, &format!("--{name}="), line),
            None => Completion::none(directive::NO_FILE_COMP),
        };
    }
    let candidates = current
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .filter_map(|a| {
            let long = format!("--{}", a.get_long()?);
            long.starts_with(typed)
                .then(|| (long, summary(a.get_help())))
        })
        .collect();
    Completion {
        candidates,
        directive: directive::NO_FILE_COMP,
        namespaces: None,
    }
}

/// The command `words` (the words after the plugin's name) name, as far as they are valid:
/// `kubectl xcc cluster join` for `cluster join --context a`.
pub fn command_path(mut command: Command, words: &[String]) -> String {
    command.build();
    let mut current = &command;
    let mut path = vec!["kubectl xcc".to_string()];
    let mut value_next = false;
    for word in words {
        if std::mem::take(&mut value_next) {
            continue;
        }
        if word == "--" {
            break;
        }
        if let Some(flag) = word.strip_prefix("--") {
            value_next = !flag.contains('=') && long(current, flag).is_some_and(takes_value);
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = shorts.chars();
            value_next = match (chars.next(), chars.next()) {
                (Some(c), None) => short(current, c).is_some_and(takes_value),
                _ => false,
            };
        } else {
            match current.find_subcommand(word) {
                Some(sub) => {
                    current = sub;
                    path.push(sub.get_name().to_string());
                }
                None => break,
            }
        }
    }
    path.join(" ")
}

/// The bash script: completes `kubectl-xcc ...`, and `kubectl xcc ...` by wrapping kubectl's
/// completion (whichever is registered when it is sourced, or the one bash-completion loads on
/// first use), through `kubectl-xcc __complete`.
pub const BASH: &str = r#"# bash completion for kubectl-xcc: `kubectl-xcc ...` and `kubectl xcc ...`.
#
#   source <(kubectl xcc completion bash)
#
# Candidates come from `kubectl-xcc __complete WORDS...` (kubectl-xcc must be on PATH, as
# kubectl needs it anyway). For `kubectl xcc`, this script wraps kubectl's own completion: the
# words after `kubectl xcc` are completed here, every other kubectl command by kubectl's
# completion (registered before this script, or loaded later by bash-completion). Sourcing
# kubectl's completion after this script replaces the wrapper: kubectl then asks
# kubectl_complete-xcc (see `kubectl xcc completion --help`).

# Completes COMP_WORDS[COMP_CWORD]; $1 is the index of the first word after the plugin's name.
__kubectl_xcc_complete() {
    local first=$1 cur=${COMP_WORDS[COMP_CWORD]} i word out last directive=0
    local -a args=()
    for ((i = first; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        # bash splits `--flag=value` at `=` (COMP_WORDBREAKS): give the value as its own word.
        if [[ $word == "=" && $i -gt $first && ${COMP_WORDS[i - 1]} == --* ]]; then
            continue
        fi
        args+=("$word")
    done
    if [[ $cur == "=" && $COMP_CWORD -gt $first && ${COMP_WORDS[COMP_CWORD - 1]} == --* ]]; then
        cur=""
    fi
    COMPREPLY=()
    out=$(kubectl-xcc __complete "${args[@]}" "$cur" 2>/dev/null) || return 0
    if [[ $out == *$'\n'* ]]; then
        last=${out##*$'\n'}
        out=${out%$'\n'*}
    else
        last=$out
        out=
    fi
    if [[ $last == :* && ${last#:} =~ ^[0-9]+$ ]]; then
        directive=${last#:}
    fi
    if [[ -n $out ]]; then
        while IFS= read -r word; do
            COMPREPLY+=("${word%%$'\t'*}")
        done <<<"$out"
    fi
    if ((directive & 1)); then
        COMPREPLY=()
        return 0
    fi
    if ((directive & 2)); then
        compopt -o nospace 2>/dev/null
    fi
    if ((${#COMPREPLY[@]} == 0 && !(directive & 4))); then
        compopt -o default 2>/dev/null
    else
        compopt +o default 2>/dev/null
    fi
    return 0
}

__kubectl_xcc_start() {
    __kubectl_xcc_complete 1
}
complete -F __kubectl_xcc_start kubectl-xcc

# `kubectl xcc ...` here; anything else to kubectl's completion.
__kubectl_xcc_kubectl() {
    if [[ $COMP_CWORD -ge 2 && ${COMP_WORDS[1]} == xcc ]]; then
        __kubectl_xcc_complete 2
        return 0
    fi
    if [[ -z ${__kubectl_xcc_next-} ]] && declare -F _completion_loader >/dev/null; then
        # bash-completion loads kubectl's completion on first use: load it now, and wrap it.
        complete -r kubectl
        _completion_loader kubectl
        __kubectl_xcc_wrap
    fi
    if [[ -n ${__kubectl_xcc_next-} ]]; then
        "$__kubectl_xcc_next" "$@"
    fi
}

# Keeps the completion function registered for kubectl (if any) and registers the wrapper in
# its place, with its options.
__kubectl_xcc_wrap() {
    local spec
    spec=$(complete -p kubectl 2>/dev/null)
    if [[ $spec == *" -F __kubectl_xcc_kubectl "* ]]; then
        return 0
    fi
    if [[ $spec =~ -F\ ([^ ]+)\ kubectl$ ]]; then
        __kubectl_xcc_next=${BASH_REMATCH[1]}
        eval "${spec/ -F $__kubectl_xcc_next / -F __kubectl_xcc_kubectl }"
    else
        __kubectl_xcc_next=
        complete -o default -F __kubectl_xcc_kubectl kubectl
    fi
}
__kubectl_xcc_wrap
"#;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::Cli;

    fn values_of(words: &[&str]) -> (Vec<String>, u32) {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let c = complete(Cli::command(), &words);
        (
            c.candidates.into_iter().map(|(v, _)| v).collect(),
            c.directive,
        )
    }

    #[test]
    fn subcommands_flags_and_values_complete() {
        let (all, directive) = values_of(&[""]);
        for name in ["plumber", "cluster", "link", "status", "dns", "completion"] {
            assert!(all.contains(&name.to_string()), "{name} not in {all:?}");
        }
        assert!(
            !all.contains(&"completions".to_string()),
            "hidden alias listed: {all:?}"
        );
        assert_eq!(directive, directive::NO_FILE_COMP);
        assert_eq!(values_of(&["st"]).0, ["status"]);
        assert_eq!(values_of(&["cluster", "j"]).0, ["join"]);
        assert_eq!(values_of(&["status", "--o"]).0, ["--output"]);
        assert_eq!(
            values_of(&["status", "-o", ""]).0,
            ["table", "json", "yaml"]
        );
        assert_eq!(values_of(&["status", "--output=j"]).0, ["--output=json"]);
        assert_eq!(
            values_of(&["status", "-o", "json", "--a"]).0,
            ["--all-namespaces"]
        );
        // Global flags and hidden ones: the logging flags everywhere, the former --timeout
        // nowhere.
        let flags = values_of(&["plumber", "view", "--"]).0;
        for global in ["--log-level", "--log-format"] {
            assert!(flags.contains(&global.to_string()), "{flags:?}");
        }
        assert!(
            flags.contains(&"--request-timeout".to_string()),
            "{flags:?}"
        );
        assert!(!flags.contains(&"--timeout".to_string()), "{flags:?}");
        assert_eq!(values_of(&["dns", "x.test", "--type", ""]).0, ["A", "AAAA"]);
        assert_eq!(
            values_of(&["completion", "f"]).0,
            ["fish"],
            "positional values"
        );
        // Paths: the shell completes file names.
        assert_eq!(
            values_of(&["status", "--kubeconfig", ""]),
            (Vec::new(), directive::DEFAULT)
        );
        // A DNS name: nothing to offer, and no file names either.
        assert_eq!(
            values_of(&["dns", ""]),
            (Vec::new(), directive::NO_FILE_COMP)
        );
    }

    #[test]
    fn contexts_come_from_the_kubeconfig_named_on_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {}}]
contexts:
- {name: alpha, context: {cluster: c, user: u}}
- {name: beta, context: {cluster: c, user: u}}
current-context: alpha
",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        assert_eq!(
            values_of(&["status", "--kubeconfig", path, "--context", ""]).0,
            ["alpha", "beta"]
        );
        assert_eq!(
            values_of(&[
                "cluster",
                "join",
                "--kubeconfig",
                path,
                "--context",
                "alpha,b"
            ])
            .0,
            ["alpha,beta"]
        );
    }

    #[test]
    fn namespaces_of_the_context_on_the_line_complete_status_n() {
        let words: Vec<String> = ["status", "--context=beta", "--kubeconfig", "/k", "-n", "te"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        let c = complete(Cli::command(), &words);
        assert_eq!(
            c.namespaces,
            Some(NamespaceQuery {
                kubeconfig: Some("/k".into()),
                context: Some("beta".into()),
                typed: "te".into(),
                prefix: String::new(),
            })
        );
        assert_eq!(c.directive, directive::NO_FILE_COMP);
        // link's -n names a namespace on two clusters: no single cluster to ask.
        let words: Vec<String> = ["link", "-n", ""].iter().map(|w| w.to_string()).collect();
        assert_eq!(complete(Cli::command(), &words).namespaces, None);
    }

    #[tokio::test]
    async fn an_unreachable_cluster_gives_no_namespaces_and_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {}}]
contexts: [{name: alpha, context: {cluster: c, user: u}}]
current-context: alpha
",
        )
        .unwrap();
        let mut c = Completion {
            namespaces: Some(NamespaceQuery {
                kubeconfig: Some(path.display().to_string()),
                ..NamespaceQuery::default()
            }),
            ..Completion::default()
        };
        namespaces(&mut c).await;
        assert_eq!(c.candidates, []);
        assert_eq!(c.namespaces, None);
    }

    #[test]
    fn the_protocol_is_kubectls() {
        let c = Completion {
            candidates: vec![
                ("status".into(), "One table".into()),
                ("json".into(), String::new()),
            ],
            directive: directive::NO_FILE_COMP,
            namespaces: None,
        };
        assert_eq!(c.render(), "status\tOne table\njson\n:4\n");
    }
}
