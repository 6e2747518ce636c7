//! The one list of the agent's reconcilers. Each is a module folder whose `reconciler.rs` holds
//! its flags (a `clap::Args` struct) and implements [`xcc_sync::kit::Reconciler`] on them: its
//! name (the switch), its CRDs, its start on the core. Its flags, `xcc-agent crds`, the check
//! whether any sync runs, the start-up log and the spawns all read the list below, so adding a
//! reconciler is its module plus one line in `reconcilers!`.

use std::path::PathBuf;

use xcc_sync::kit::Reconciler;

use crate::{clusterregistry, mcs, plumber, projection, replication};

/// What the process hands every reconciler beside the core.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// The agent's namespace (`--namespace`).
    pub namespace: String,
    /// `--kubeconfig`, if given.
    pub kubeconfig: Option<PathBuf>,
    /// The URL of the API server the agent's own client talks to.
    pub own_url: String,
}

/// The reconciler's flags per field, in the order of `--help`, `xcc-agent crds`, the start-up log
/// and the spawns.
macro_rules! reconcilers {
    ($($field:ident: $flags:ty,)*) => {
        // No doc comment: clap would show it in `--help`.
        #[derive(Clone, Debug, clap::Args)]
        pub struct ReconcilerFlags {
            $(
                #[command(flatten)]
                pub $field: $flags,
            )*
        }

        impl ReconcilerFlags {
            /// Every reconciler, in list order.
            pub fn all(&self) -> Vec<&dyn Reconciler<Env = Env>> {
                vec![$(&self.$field),*]
            }
        }
    };
}

reconcilers! {
    replication: replication::reconciler::SecretReplication,
    resource_sync: clusterregistry::reconciler::ResourceSync,
    plumber: plumber::reconciler::Plumber,
    projection: projection::reconciler::ApiProjection,
    mcs: mcs::reconciler::Mcs,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use crate::process::args::Args;

    /// Each reconciler's name is its switch, with the environment variable every flag has.
    #[test]
    fn each_name_is_a_switch_with_its_env() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        let command = Args::command();
        let names: Vec<_> = args
            .sync
            .reconcilers
            .all()
            .iter()
            .map(|r| r.name())
            .collect();
        assert_eq!(
            names,
            [
                "secret-replication",
                "resource-sync",
                "plumber",
                "api-projection",
                "mcs"
            ]
        );
        for name in names {
            let flag = command
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .unwrap_or_else(|| panic!("no flag --{name}"));
            let env = format!("XCC_{}", name.to_uppercase().replace('-', "_"));
            assert_eq!(
                flag.get_env().and_then(|e| e.to_str()),
                Some(env.as_str()),
                "--{name}"
            );
        }
    }

    /// A switch turns its reconciler off and leaves the others on.
    #[test]
    fn a_switch_turns_off_only_its_reconciler() {
        for off in [
            "secret-replication",
            "resource-sync",
            "plumber",
            "api-projection",
            "mcs",
        ] {
            let args = Args::try_parse_from(["xcc-agent", &format!("--{off}=false")]).unwrap();
            let on = xcc_sync::kit::enabled_names(&args.sync.reconcilers.all());
            assert!(!on.split(',').any(|n| n == off), "{off}: {on}");
            assert_eq!(on.split(',').count(), 4, "{off}: {on}");
        }
        let none = Args::try_parse_from([
            "xcc-agent",
            "--secret-replication=false",
            "--resource-sync=false",
            "--plumber=false",
            "--api-projection=false",
            "--mcs=false",
        ])
        .unwrap();
        assert!(!xcc_sync::kit::any_enabled(&none.sync.reconcilers.all()));
    }
}
