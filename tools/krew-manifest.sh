#!/usr/bin/env bash
# Packages kubectl-xcc for krew: one tar.gz per platform (the binary, stripped when it is a
# Linux one and `strip` is there, and LICENSE when the repository has one), and the krew
# plugin manifest naming each archive's download URL and sha256.
#
#   tools/krew-manifest.sh                      # builds the release binary for this machine
#   tools/krew-manifest.sh linux/amd64=PATH ... # packages the binaries given, one per platform
#
# Writes into KREW_MANIFEST_OUT (default dist/krew): kubectl-xcc_VERSION_OS_ARCH.tar.gz and
# xcc.yaml.
# Upload the archives as the assets of release VERSION; xcc.yaml then installs with
# `kubectl krew install --manifest=dist/krew/xcc.yaml` (or goes to krew-index).
#
# Environment:
#   RELEASE_REPOSITORY  the project's URL, the manifest's homepage (default: `repository` of
#                       Cargo.toml's [workspace.package]; with neither, the script refuses
#                       rather than publish a placeholder); archives are expected at
#                       RELEASE_REPOSITORY/releases/download/VERSION/ARCHIVE
#   RELEASE_VERSION     the release tag (default: v + the workspace version of Cargo.toml)
#   KREW_MANIFEST_OUT   output directory (default: dist/krew)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The value of KEY in the [workspace.package] table of Cargo.toml (empty when absent).
workspace_field() {
    awk -v key="$1" '
        /^\[/ { in_table = ($0 == "[workspace.package]") ; next }
        in_table && $1 == key && $2 == "=" { gsub(/"/, "", $3); print $3; exit }
    ' Cargo.toml
}

version=${RELEASE_VERSION:-v$(workspace_field version)}
repository=${RELEASE_REPOSITORY:-$(workspace_field repository)}
if [[ -z $repository ]]; then
    echo "error: no project URL for the manifest's homepage and download links: set \`repository\` in Cargo.toml's [workspace.package] or RELEASE_REPOSITORY" >&2
    exit 2
fi
repository=${repository%/}
out=${KREW_MANIFEST_OUT:-dist/krew}
if [[ ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]]; then
    echo "error: version ${version@Q} is not vMAJOR.MINOR.PATCH (set RELEASE_VERSION)" >&2
    exit 2
fi

platforms=("$@")
if ((${#platforms[@]} == 0)); then
    case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) here=linux/amd64 ;;
    Linux/aarch64) here=linux/arm64 ;;
    Darwin/x86_64) here=darwin/amd64 ;;
    Darwin/arm64) here=darwin/arm64 ;;
    *)
        echo "error: no krew platform for $(uname -s)/$(uname -m); give OS/ARCH=BINARY" >&2
        exit 2
        ;;
    esac
    cargo build --release --locked -p kubectl-xcc >&2
    platforms=("$here=target/release/kubectl-xcc")
fi

mkdir -p "$out"
manifest_platforms=""
for platform in "${platforms[@]}"; do
    if [[ ! $platform =~ ^(linux|darwin|windows)/(amd64|arm64|arm|386)=(.+)$ ]]; then
        echo "error: ${platform@Q} is not OS/ARCH=BINARY (e.g. linux/amd64=target/release/kubectl-xcc)" >&2
        exit 2
    fi
    os=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]} binary=${BASH_REMATCH[3]}
    if [[ ! -x $binary ]]; then
        echo "error: $binary is not an executable file" >&2
        exit 2
    fi
    archive="kubectl-xcc_${version}_${os}_${arch}.tar.gz"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    # Debug symbols are no use to a plugin's users (and are most of an unstripped binary).
    if [[ $os == linux ]] && command -v strip >/dev/null &&
        strip -o "$stage/kubectl-xcc" "$binary" 2>/dev/null; then
        :
    else
        cp "$binary" "$stage/kubectl-xcc"
    fi
    chmod 0755 "$stage/kubectl-xcc"
    files=(kubectl-xcc)
    if [[ -f LICENSE ]]; then
        cp LICENSE "$stage/LICENSE"
        files+=(LICENSE)
    fi
    # The same inputs give the same archive (and sha256): fixed order, owner and times.
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - "${files[@]}" |
        gzip -n >"$out/$archive"
    rm -rf "$stage"
    trap - EXIT
    sha256=$(sha256sum "$out/$archive" | cut -d' ' -f1)
    manifest_platforms+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $repository/releases/download/$version/$archive
    sha256: $sha256
    bin: kubectl-xcc
    files:
"
    for file in "${files[@]}"; do
        manifest_platforms+="    - from: $file
      to: .
"
    done
    echo "$out/$archive $sha256" >&2
done

cat >"$out/xcc.yaml" <<MANIFEST
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: xcc
spec:
  version: $version
  homepage: $repository
  shortDescription: Join clusters and explain xcc's DNS and sync
  description: |
    kubectl xcc is the command line of xcc, multi-cluster DNS, Secret and resource
    sync and API projection for Kubernetes. It joins clusters into a group
    (cluster-registry's Cluster and Secret exchange) with one command, registers
    plumber's target clusters as plumberctl does, links a service cluster with a
    workload cluster for API projection, lists every xcc object with its Ready
    state (kubectl xcc status), and explains why the DNS agent answers what it
    answers for a name (kubectl xcc dns NAME).
  platforms:
$manifest_platforms
MANIFEST
# (the heredoc's last line is empty: drop it)
sed -i -e '${/^$/d}' "$out/xcc.yaml"
echo "$out/xcc.yaml" >&2
