//! The copy of one SecretImport's Secret, in three steps: observe what the service cluster and
//! the local cluster hold, [`plan`] what to do (pure), execute it (the only writes).

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, api::ObjectMeta, runtime::reflector::ObjectRef};

use super::{Context, REMOTE_TIMEOUT, unreachable_message};
use crate::{
    replication::{Reason, Verdict, api::SecretImport},
    sink::{self, LocalWriter, ORIGIN_ANNOTATION, Ownership, Written},
};
use xcc_kube::PeerClient;

/// The names one import's copy is about.
#[derive(Debug, Clone)]
pub struct Names {
    pub namespace: String,
    /// The kubeconfig Secret of the service cluster (`spec.remoteKubeconfig`).
    pub kubeconfig: String,
    /// The Secret, there and here (`spec.secret`).
    pub source: String,
    /// The copy's origin annotation.
    pub origin: String,
}

impl Names {
    pub fn of(import: &SecretImport) -> Names {
        let namespace = import.namespace().unwrap_or_default();
        let kubeconfig = import.spec.remote_kubeconfig.name.clone();
        let source = import.spec.secret.name.clone();
        let origin = sink::origin(&kubeconfig, &namespace, &source);
        Names {
            namespace,
            kubeconfig,
            source,
            origin,
        }
    }
}

/// What the service cluster answered for the remote Secret.
#[derive(Debug)]
pub enum Remote {
    Found(Box<Secret>),
    NotFound,
    Forbidden(String),
    Unreachable(String),
}

pub fn classify(result: Result<Option<Secret>, kube::Error>) -> Remote {
    match result {
        Ok(Some(secret)) => Remote::Found(Box::new(secret)),
        Ok(None) => Remote::NotFound,
        Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
            Remote::Forbidden(xcc_kube::bounded(&status.message))
        }
        Err(error) => Remote::Unreachable(xcc_kube::bounded(&error)),
    }
}

/// What the two clusters hold for one import.
#[derive(Debug)]
pub struct Observed {
    pub remote: Remote,
    /// The local Secret under the copy's name.
    pub local: Option<Secret>,
    /// When the remote Secret is there and the local one is a copy from another origin: the
    /// origins the namespace's other imports write (`None`: not asked).
    pub claims: Option<Vec<String>>,
}

/// What to do about the local copy.
#[derive(Debug)]
pub enum Plan {
    /// Write nothing; the status says this.
    Say(Verdict),
    /// The source is gone: delete this copy of ours.
    Remove(Box<Secret>),
    /// Write the copy.
    Write(Box<Write>),
}

/// A write of the copy.
#[derive(Debug)]
pub struct Write {
    pub desired: Secret,
    /// The local Secret the write goes over (`None`: there is none, or it is replaced).
    pub current: Option<Secret>,
    /// A copy of ours of another type, deleted first: a Secret's type cannot change in place.
    pub replace: Option<Secret>,
    /// The origin of a copy written for this Secret through another kubeconfig Secret that no
    /// other import uses any more (this import's `spec.remoteKubeconfig` was changed): adopted.
    pub adopt: Option<String>,
    /// The remote Secret's resourceVersion.
    pub remote_version: String,
}

/// The local copy of `remote`: same type and data, named `namespace/name`, annotated with its
/// origin. Nothing else of the remote object (labels, annotations, owners) is carried over.
pub fn desired_secret(remote: &Secret, namespace: &str, name: &str, origin: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some([(ORIGIN_ANNOTATION.to_string(), origin.to_string())].into()),
            ..Default::default()
        },
        type_: remote.type_.clone(),
        // Always present, so that a key removed at the source is removed here.
        data: Some(remote.data.clone().unwrap_or_default()),
        immutable: None,
        string_data: None,
    }
}

/// Whether a local copy of `namespace/source` with origin `previous` (not ours) was left by a
/// SecretImport that no longer writes it: the origin names the same Secret, and no other import
/// (`claims`: the origins the other imports of the namespace write) would write it.
pub fn orphaned_copy(previous: &str, namespace: &str, source: &str, claims: &[String]) -> bool {
    previous.ends_with(&format!("/{namespace}/{source}"))
        && !claims.iter().any(|claim| claim == previous)
}

/// What to do, given what the two clusters hold. A service cluster that cannot be reached or
/// refuses never costs the copy; only its answer that the Secret is gone does.
pub fn plan(names: &Names, observed: Observed) -> Plan {
    let Names {
        namespace,
        kubeconfig,
        source,
        origin,
    } = names;
    match observed.remote {
        Remote::Unreachable(error) => Plan::Say(Verdict::not(
            Reason::RemoteUnreachable,
            unreachable_message(namespace, kubeconfig, &error),
        )),
        Remote::Forbidden(message) => Plan::Say(Verdict::not(
            Reason::Forbidden,
            format!(
                "the service cluster refuses to let the kubeconfig of Secret \
                 {namespace}/{kubeconfig} read Secret {namespace}/{source} ({message}); \
                 is there a SecretExport for it? The local copy is kept"
            ),
        )),
        Remote::NotFound => match observed.local {
            Some(copy) if sink::ownership(Some(&copy), origin) == Ownership::Ours => {
                Plan::Remove(Box::new(copy))
            }
            _ => Plan::Say(source_gone(names)),
        },
        Remote::Found(remote) => {
            let desired = desired_secret(&remote, namespace, source, origin);
            let mut write = Write {
                current: observed.local,
                replace: None,
                adopt: None,
                remote_version: remote.resource_version().unwrap_or_default(),
                desired,
            };
            match sink::ownership(write.current.as_ref(), origin) {
                Ownership::Ours
                    if write
                        .current
                        .as_ref()
                        .is_some_and(|c| c.type_ != write.desired.type_) =>
                {
                    write.replace = write.current.take();
                }
                Ownership::Foreign {
                    origin: Some(previous),
                } if observed
                    .claims
                    .is_some_and(|claims| orphaned_copy(&previous, namespace, source, &claims)) =>
                {
                    write.adopt = Some(previous);
                }
                _ => {}
            }
            Plan::Write(Box::new(write))
        }
    }
}

fn replicated(names: &Names) -> Verdict {
    let Names {
        namespace, source, ..
    } = names;
    Verdict::ok(
        Reason::Replicated,
        format!("Secret {namespace}/{source} is a copy of the service cluster's"),
    )
}

fn source_gone(names: &Names) -> Verdict {
    let Names {
        namespace, source, ..
    } = names;
    Verdict::not(
        Reason::SecretNotFound,
        format!("Secret {namespace}/{source} does not exist on the service cluster"),
    )
}

/// Brings the local copy of the import's Secret in line with the service cluster's, read
/// through `peer`.
pub async fn copy_from(
    import: &SecretImport,
    ctx: &Context,
    peer: &PeerClient,
    local: Api<Secret>,
) -> Verdict {
    let names = Names::of(import);
    let remote = observe_remote(import, ctx, peer, &names).await;
    if let Remote::Found(remote) = &remote
        && ctx.current(
            &names.origin,
            &names.namespace,
            &names.source,
            &remote.resource_version().unwrap_or_default(),
        )
    {
        return replicated(&names);
    }
    let observed = match observe_local(import, ctx, &local, &names, remote).await {
        Ok(observed) => observed,
        Err(verdict) => return verdict,
    };
    let writer = LocalWriter::new(local, ctx.counted.clone());
    match plan(&names, observed) {
        Plan::Say(verdict) => verdict,
        Plan::Remove(copy) => remove(&writer, &names, &copy).await,
        Plan::Write(write) => write_copy(ctx, &writer, &names, *write).await,
    }
}

/// The remote Secret as the import's watch holds it, or else as a read (bounded by
/// [`REMOTE_TIMEOUT`]) answers.
async fn observe_remote(
    import: &SecretImport,
    ctx: &Context,
    peer: &PeerClient,
    names: &Names,
) -> Remote {
    let watched = ctx.known_remote(
        &ObjectRef::from_obj(import),
        &ctx.remote_identity(peer, &names.namespace, &names.source),
    );
    if let Some(remote) = watched {
        return remote;
    }
    let read = Api::<Secret>::namespaced(peer.client.clone(), &names.namespace);
    match tokio::time::timeout(REMOTE_TIMEOUT, read.get_opt(&names.source)).await {
        Ok(result) => classify(result),
        Err(_) => Remote::Unreachable(format!("no answer within {REMOTE_TIMEOUT:?}")),
    }
}

/// Adds to `remote` the local Secret under the copy's name and, when the remote Secret is there
/// and the local one is a copy from another origin, the origins the other imports of the
/// namespace write; or the verdict that the local Secret cannot be read.
async fn observe_local(
    import: &SecretImport,
    ctx: &Context,
    local: &Api<Secret>,
    names: &Names,
    remote: Remote,
) -> Result<Observed, Verdict> {
    let Names {
        namespace, source, ..
    } = names;
    // The metadata watch has every local Secret: when it has none of that name, there is none
    // (the write that follows is not forced, so one made meanwhile is never overwritten).
    let known_absent = ctx.local_ready() && ctx.local_meta(namespace, source).is_none();
    let current = if known_absent {
        None
    } else {
        local.get_opt(source).await.map_err(|error| {
            Verdict::not(
                Reason::WriteFailed,
                format!("cannot read the local Secret {namespace}/{source}: {error}"),
            )
        })?
    };
    let mut claims = None;
    if let Remote::Found(_) = &remote
        && let Ownership::Foreign {
            origin: Some(previous),
        } = sink::ownership(current.as_ref(), &names.origin)
    {
        let imports: Api<SecretImport> = Api::namespaced(ctx.client.clone(), namespace);
        claims = Some(match imports.list(&Default::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|other| other.name_any() != import.name_any())
                .map(|other| {
                    sink::origin(
                        &other.spec.remote_kubeconfig.name,
                        namespace,
                        &other.spec.secret.name,
                    )
                })
                .collect(),
            // Not known: the copy counts as claimed.
            Err(_) => vec![previous],
        });
    }
    Ok(Observed {
        remote,
        local: current,
        claims,
    })
}

/// Deletes `copy`, whose source is gone.
async fn remove(writer: &LocalWriter<Secret>, names: &Names, copy: &Secret) -> Verdict {
    let Names {
        namespace, source, ..
    } = names;
    match writer.delete(copy, &names.origin).await {
        Ok(removed) => {
            if removed {
                tracing::info!(%namespace, secret = %source, "source Secret gone; local copy deleted");
            }
            source_gone(names)
        }
        Err(error) => Verdict::not(
            Reason::WriteFailed,
            format!("cannot delete the local copy {namespace}/{source}: {error}"),
        ),
    }
}

/// Writes the copy, and remembers which remote and local versions the write joined.
async fn write_copy(
    ctx: &Context,
    writer: &LocalWriter<Secret>,
    names: &Names,
    write: Write,
) -> Verdict {
    let Names {
        namespace, source, ..
    } = names;
    if let Some(copy) = &write.replace
        && let Err(error) = writer.delete(copy, &names.origin).await
    {
        return Verdict::not(
            Reason::WriteFailed,
            format!("cannot replace the local copy {namespace}/{source}: {error}"),
        );
    }
    let written = match &write.adopt {
        Some(previous) => {
            tracing::info!(%namespace, secret = %source, %previous, "adopting a copy no other SecretImport claims");
            writer.adopt(&write.desired).await
        }
        None => writer.apply(&write.desired, write.current.as_ref()).await,
    };
    if let Ok(Written::Applied(version) | Written::Unchanged(version)) = &written {
        ctx.written.insert(
            names.origin.clone(),
            (
                write.remote_version.clone(),
                version.clone().unwrap_or_default(),
            ),
        );
    }
    match written {
        Ok(Written::Applied(_) | Written::Unchanged(_)) => replicated(names),
        Ok(Written::Conflict { origin: other }) => Verdict::not(
            Reason::Conflict,
            match other {
                None => format!(
                    "Secret {namespace}/{source} exists here and was not created by a \
                     SecretImport; it is left as is. Delete or rename it to replicate"
                ),
                Some(other) => format!(
                    "Secret {namespace}/{source} is already a copy from {other}; it is left as is"
                ),
            },
        ),
        Err(error) => Verdict::not(
            Reason::WriteFailed,
            format!("cannot write Secret {namespace}/{source}: {error}"),
        ),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::core::Status;

    pub fn remote() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("dumbo".into()),
                namespace: Some("project-1".into()),
                uid: Some("remote-uid".into()),
                resource_version: Some("42".into()),
                labels: Some([("team".to_string(), "a".to_string())].into()),
                owner_references: Some(vec![Default::default()]),
                ..Default::default()
            },
            type_: Some("kubernetes.io/basic-auth".into()),
            data: Some([("password".to_string(), ByteString(b"s3cret".to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_copy_has_the_data_and_type_and_our_origin_only() {
        let copy = desired_secret(
            &remote(),
            "project-1",
            "dumbo",
            "energy-source/project-1/dumbo",
        );
        assert_eq!(copy.metadata.name.as_deref(), Some("dumbo"));
        assert_eq!(copy.metadata.namespace.as_deref(), Some("project-1"));
        assert_eq!(
            copy.annotations()
                .get(ORIGIN_ANNOTATION)
                .map(String::as_str),
            Some("energy-source/project-1/dumbo")
        );
        assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        assert_eq!(copy.data, remote().data);
        // Nothing server-managed or owner-related crosses clusters.
        assert_eq!(copy.metadata.uid, None);
        assert_eq!(copy.metadata.resource_version, None);
        assert_eq!(copy.metadata.owner_references, None);
        assert_eq!(copy.metadata.labels, None);
    }

    #[test]
    fn a_source_without_data_gives_an_empty_data_map() {
        let mut empty = remote();
        empty.data = None;
        let copy = desired_secret(&empty, "project-1", "dumbo", "o");
        assert_eq!(copy.data, Some(Default::default()));
        let json = serde_json::to_value(&copy).unwrap();
        assert_eq!(json["data"], serde_json::json!({}));
    }

    #[test]
    fn a_copy_is_adopted_only_when_no_other_import_writes_it() {
        let previous = "old-kubeconfig/project-1/dumbo";
        assert!(orphaned_copy(previous, "project-1", "dumbo", &[]));
        assert!(!orphaned_copy(
            previous,
            "project-1",
            "dumbo",
            &[previous.to_string()]
        ));
        // A copy of another Secret, or from another namespace, is never adopted.
        assert!(!orphaned_copy(previous, "project-1", "other", &[]));
        assert!(!orphaned_copy(previous, "project-2", "dumbo", &[]));
    }

    pub fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            ..Status::failure(&format!("code {code}"), "Forbidden")
        }))
    }

    #[test]
    fn only_a_404_means_the_source_is_gone() {
        assert!(matches!(classify(Ok(None)), Remote::NotFound));
        assert!(matches!(classify(Ok(Some(remote()))), Remote::Found(_)));
        assert!(matches!(
            classify(Err(api_error(403))),
            Remote::Forbidden(_)
        ));
        assert!(matches!(
            classify(Err(api_error(401))),
            Remote::Forbidden(_)
        ));
        assert!(matches!(
            classify(Err(api_error(503))),
            Remote::Unreachable(_)
        ));
        assert!(matches!(
            classify(Err(kube::Error::LinesCodecMaxLineLengthExceeded)),
            Remote::Unreachable(_)
        ));
    }

    fn names() -> Names {
        Names {
            namespace: "project-1".into(),
            kubeconfig: "energy-source".into(),
            source: "dumbo".into(),
            origin: "energy-source/project-1/dumbo".into(),
        }
    }

    /// A local Secret `project-1/dumbo` of `type_` with `origin` (none: made here).
    fn local(origin: Option<&str>, type_: &str) -> Secret {
        let mut secret = remote();
        secret.type_ = Some(type_.into());
        secret.metadata.annotations =
            origin.map(|o| [(ORIGIN_ANNOTATION.to_string(), o.to_string())].into());
        secret
    }

    /// The plan in a few words.
    fn summary(plan: &Plan) -> String {
        match plan {
            Plan::Say(verdict) => format!("say {}", verdict.reason),
            Plan::Remove(copy) => format!("remove {}", copy.name_any()),
            Plan::Write(write) => {
                let mut words = vec!["write".to_string()];
                if write.replace.is_some() {
                    words.push("replacing".into());
                }
                if let Some(previous) = &write.adopt {
                    words.push(format!("adopting {previous}"));
                }
                if write.current.is_some() {
                    words.push("over the copy".into());
                }
                words.push(format!("at {}", write.remote_version));
                words.join(" ")
            }
        }
    }

    #[test]
    fn what_is_done_about_the_copy() {
        let ours = "energy-source/project-1/dumbo";
        let previous = "old-kubeconfig/project-1/dumbo";
        let basic = "kubernetes.io/basic-auth";
        let found = || Remote::Found(Box::new(remote()));
        // (what, remote, local, claims, the plan)
        type Case<'a> = (
            &'a str,
            Remote,
            Option<Secret>,
            Option<Vec<String>>,
            &'a str,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "unreachable: the copy is kept",
                Remote::Unreachable("connection refused".into()),
                Some(local(Some(ours), basic)),
                None,
                "say RemoteUnreachable",
            ),
            (
                "refused: the copy is kept",
                Remote::Forbidden("no".into()),
                Some(local(Some(ours), basic)),
                None,
                "say Forbidden",
            ),
            (
                "gone there: our copy goes",
                Remote::NotFound,
                Some(local(Some(ours), basic)),
                None,
                "remove dumbo",
            ),
            (
                "gone there, none here: nothing to delete",
                Remote::NotFound,
                None,
                None,
                "say SecretNotFound",
            ),
            (
                "gone there: a Secret made here stays",
                Remote::NotFound,
                Some(local(None, basic)),
                None,
                "say SecretNotFound",
            ),
            (
                "gone there: another import's copy stays",
                Remote::NotFound,
                Some(local(Some(previous), basic)),
                None,
                "say SecretNotFound",
            ),
            ("there, none here: made", found(), None, None, "write at 42"),
            (
                "there, our copy here: written over",
                found(),
                Some(local(Some(ours), basic)),
                None,
                "write over the copy at 42",
            ),
            (
                "there, our copy of another type: replaced",
                found(),
                Some(local(Some(ours), "Opaque")),
                None,
                "write replacing at 42",
            ),
            (
                "there, a copy no other import claims: adopted",
                found(),
                Some(local(Some(previous), basic)),
                Some(vec![]),
                "write adopting old-kubeconfig/project-1/dumbo over the copy at 42",
            ),
            (
                "there, a copy another import writes: left to the writer (a conflict)",
                found(),
                Some(local(Some(previous), basic)),
                Some(vec![previous.to_string()]),
                "write over the copy at 42",
            ),
            (
                "there, a Secret made here: left to the writer (a conflict)",
                found(),
                Some(local(None, basic)),
                None,
                "write over the copy at 42",
            ),
        ];
        for (what, remote, local, claims, want) in cases {
            let observed = Observed {
                remote,
                local,
                claims,
            };
            assert_eq!(summary(&plan(&names(), observed)), want, "{what}");
        }
    }

    #[test]
    fn the_verdicts_say_what_happens_to_the_copy() {
        let say = |remote: Remote| match plan(
            &names(),
            Observed {
                remote,
                local: None,
                claims: None,
            },
        ) {
            Plan::Say(verdict) => verdict,
            other => panic!("{other:?}"),
        };
        let unreachable = say(Remote::Unreachable("connection refused".into()));
        assert!(!unreachable.ready);
        assert_eq!(
            unreachable.message,
            "cannot reach the service cluster through Secret project-1/energy-source: \
             connection refused; the local copy is kept"
        );
        let refused = say(Remote::Forbidden("denied".into()));
        assert_eq!(
            refused.message,
            "the service cluster refuses to let the kubeconfig of Secret \
             project-1/energy-source read Secret project-1/dumbo (denied); is there a \
             SecretExport for it? The local copy is kept"
        );
        let gone = say(Remote::NotFound);
        assert_eq!(
            gone.message,
            "Secret project-1/dumbo does not exist on the service cluster"
        );
    }
}
