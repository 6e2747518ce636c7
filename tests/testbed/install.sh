#!/usr/bin/env bash
# Installs what the tests need, idempotently, one line per step:
#  - Debian packages: dnsutils (dig), dnsperf, zsh and fish (kubectl-xcc's completion tests),
#    prometheus (for promtool only);
#  - the test bed's real binaries, built from their Go modules with this machine's Go toolchain and
#    cached outside the repository, keyed by version:
#      kube-apiserver, kubectl, kube-controller-manager  (k8s.io/kubernetes $K8S_VERSION)
#      etcd                                              (the version Kubernetes pins)
#      coredns, static (CGO_ENABLED=0)                  (github.com/coredns/coredns $COREDNS_VERSION)
#    and, for the test bed's real nodes (docs/testing.md, "Nodes"):
#      kubelet, kube-proxy, kube-scheduler               (k8s.io/kubernetes $K8S_VERSION, version-stamped)
#    plus the Debian packages the nodes use: containerd, runc, CNI plugins, iptables, conntrack,
#    busybox-static, and for the MCS conformance suite's images socat, netcat-openbsd and
#    bind9-dnsutils (nslookup);
#  - the MCS conformance suite (../shared/third-party/mcs-api-conformance, copied: shared/ is
#    read-only), compiled with `go test -c` and cached, keyed by its files and `go version`;
# and writes $XCC_TESTBED_DIR/env, which exports XCC_KUBE_APISERVER, XCC_KUBECTL,
# XCC_KUBE_CONTROLLER_MANAGER, XCC_ETCD, XCC_COREDNS and, for the nodes, XCC_KUBELET,
# XCC_KUBE_PROXY, XCC_KUBE_SCHEDULER, XCC_COREDNS_STATIC, XCC_CNI_DIR, XCC_K8S_VERSION,
# XCC_COREDNS_VERSION, and XCC_MCS_CONFORMANCE (the suite's test binary) and XCC_MCS_CRDS
# (upstream's ServiceExport and ServiceImport CRDs, of the module the suite is built against).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.35.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
dir=${XCC_TESTBED_DIR:-$HOME/.cache/xcc-testbed}
mkdir -p "$dir"

step() { printf '==> testbed: %s\n' "$*"; }

# --- Debian packages -------------------------------------------------------------------------
pkgs=()
command -v dig >/dev/null || pkgs+=(dnsutils)
command -v dnsperf >/dev/null || pkgs+=(dnsperf)
command -v knotd >/dev/null || pkgs+=(knot)
command -v zsh >/dev/null || pkgs+=(zsh)
command -v fish >/dev/null || pkgs+=(fish)
# promtool (`promtool check metrics` on every binary's /metrics); the package's server is not run.
command -v promtool >/dev/null || pkgs+=(prometheus)
# The nodes: container runtime, CNI plugins, kube-proxy's tools, test images.
command -v containerd >/dev/null || pkgs+=(containerd)
command -v runc >/dev/null || pkgs+=(runc)
[ -x /usr/lib/cni/bridge ] || pkgs+=(containernetworking-plugins)
command -v iptables >/dev/null || pkgs+=(iptables)
command -v conntrack >/dev/null || pkgs+=(conntrack)
case "$(ldd /bin/busybox 2>&1 || true)" in *"not a dynamic executable"*) ;; *) pkgs+=(busybox-static) ;; esac
command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
# The MCS conformance suite's images (tests/src/images.rs): socat for alpine/socat, nc and
# nslookup for nicolaka/netshoot.
command -v socat >/dev/null || pkgs+=(socat)
command -v nc.openbsd >/dev/null || pkgs+=(netcat-openbsd)
command -v nslookup >/dev/null || pkgs+=(bind9-dnsutils)
if [ ${#pkgs[@]} -gt 0 ]; then
  step "apt-get install ${pkgs[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  # The prometheus package enables its server where systemd runs: only promtool is wanted.
  case " ${pkgs[*]} " in *" prometheus "*)
    if [ -d /run/systemd/system ]; then $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true; fi ;;
  esac
fi

command -v go >/dev/null || { echo "testbed: the Go toolchain is needed to build the test bed" >&2; exit 1; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
ldflags='-s -w'

# --- Kubernetes ------------------------------------------------------------------------------
# A throw-away module in the current folder that requires k8s.io/kubernetes $K8S_VERSION. That
# module replaces each staging module with ./staging/...: point them at their published versions
# instead (tag kubernetes-1.X.Y ⇒ v0.X.Y). Sets $gomod (k8s.io/kubernetes's own go.mod).
k8s_module() {
  printf 'module xcc.invalid/testbed\n\ngo 1.25\n' > go.mod
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" > dl.json
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
  local minor staging m
  minor=$(echo "$K8S_VERSION" | sed 's/^v1\.\([0-9]*\)\.\([0-9]*\)$/v0.\1.\2/')
  staging=$(awk '/=> .\/staging/ {print $1}' "$gomod")
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    for m in $staging; do echo "replace $m => $m $minor"; done
  } >> go.mod
}

k8s=$dir/kubernetes-$K8S_VERSION
if [ ! -x "$k8s/bin/kube-apiserver" ] || [ ! -x "$k8s/bin/kubectl" ] || [ ! -x "$k8s/bin/kube-controller-manager" ] || [ ! -x "$k8s/bin/etcd" ]; then
  start=$(date +%s)
  step "building Kubernetes $K8S_VERSION (kube-apiserver, kubectl, kube-controller-manager, etcd); cold this takes a while"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  k8s_module
  etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$gomod")
  go get "k8s.io/kubernetes@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >/dev/null 2>&1 || go get "k8s.io/kubernetes@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version"
  mkdir -p "$k8s/bin.tmp"
  for cmd in kube-apiserver kubectl kube-controller-manager; do
    step "go build $cmd"
    go build -trimpath -ldflags="$ldflags" -o "$k8s/bin.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
  step "go build etcd $etcd_version"
  go build -trimpath -ldflags="$ldflags" -o "$k8s/bin.tmp/etcd" go.etcd.io/etcd/server/v3
  rm -rf "$k8s/bin" && mv "$k8s/bin.tmp" "$k8s/bin"
  echo "$etcd_version" > "$k8s/etcd-version"
  cd - >/dev/null
  step "Kubernetes built in $(( $(date +%s) - start )) s"
fi

coredns=$dir/coredns-$COREDNS_VERSION

# --- Node binaries: kubelet, kube-proxy, kube-scheduler ---------------------------------------
# Same throw-away module as above, a separate folder of the same version so that the block above
# is not rebuilt; version-stamped, or the nodes report v0.0.0-master.
node=$k8s/node
if [ ! -x "$node/bin/kubelet" ] || [ ! -x "$node/bin/kube-proxy" ] || [ ! -x "$node/bin/kube-scheduler" ]; then
  start=$(date +%s)
  step "building Kubernetes $K8S_VERSION node binaries (kubelet, kube-proxy, kube-scheduler); cold this takes a few minutes"
  node_work=$(mktemp -d)
  trap 'rm -rf "${work:-}" "$node_work"' EXIT
  cd "$node_work"
  k8s_module
  go get "k8s.io/kubernetes@$K8S_VERSION" >/dev/null 2>&1 || go get "k8s.io/kubernetes@$K8S_VERSION"
  major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
  minor_n=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
  stamp="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor_n -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor_n"
  mkdir -p "$node/bin.tmp"
  for cmd in kubelet kube-proxy kube-scheduler; do
    step "go build $cmd"
    nice go build -trimpath -ldflags="$ldflags $stamp" -o "$node/bin.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
  rm -rf "$node/bin" && mv "$node/bin.tmp" "$node/bin"
  cd - >/dev/null
  step "node binaries built in $(( $(date +%s) - start )) s"
fi

# --- CoreDNS: one static build (CGO_ENABLED=0), for the host processes and the CoreDNS image ----
coredns_static=$coredns/static
if [ ! -x "$coredns_static/coredns" ]; then
  start=$(date +%s)
  step "building CoreDNS $COREDNS_VERSION (static, CGO_ENABLED=0)"
  mkdir -p "$coredns_static"
  GOBIN="$coredns_static" GOFLAGS= CGO_ENABLED=0 nice go install -trimpath -ldflags="$ldflags" "github.com/coredns/coredns@$COREDNS_VERSION"
  step "CoreDNS built in $(( $(date +%s) - start )) s"
fi

# --- The MCS conformance suite ------------------------------------------------------------------
# Upstream's conformance/ folder as kept in shared/ (read-only there: built from a copy), compiled
# once into a test binary; the cache folder is keyed by the suite's files and the Go version, so a
# second run is instant and any change of either builds anew.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
suite_src=${XCC_MCS_CONFORMANCE_SRC:-$repo/../shared/third-party/mcs-api-conformance}
mcs_test=""
if [ -f "$suite_src/go.mod" ]; then
  suite_build=(go test -c -trimpath)
  suite_key=$( { (cd "$suite_src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); go version; echo "${suite_build[*]}"; } | sha256sum | cut -c1-16)
  suite_dir=$dir/mcs-conformance-$suite_key
  mcs_test=$suite_dir/mcs-conformance.test
  if [ ! -x "$mcs_test" ]; then
    start=$(date +%s)
    step "building the MCS conformance suite (go test -c, dependencies from the module proxy)"
    rm -rf "$suite_dir.tmp" && mkdir -p "$suite_dir.tmp"
    cp -R "$suite_src" "$suite_dir.tmp/src"
    chmod -R u+w "$suite_dir.tmp/src"
    (cd "$suite_dir.tmp/src" && nice "${suite_build[@]}" -o "$suite_dir.tmp/mcs-conformance.test" .)
    rm -rf "$suite_dir" && mv "$suite_dir.tmp" "$suite_dir"
    step "MCS conformance suite built in $(( $(date +%s) - start )) s"
  fi
  # Upstream's ServiceExport and ServiceImport CRDs, of the module the suite was built against:
  # for the tests of the test bed itself (xcc's own CRDs are in manifests/crds).
  if [ ! -d "$suite_dir/crds" ]; then
    mcs_api=$(cd "$suite_dir/src" && go list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api)
    mkdir -p "$suite_dir/crds.tmp"
    cp "$mcs_api"/config/crd/*.yaml "$suite_dir/crds.tmp/"
    chmod u+w "$suite_dir"/crds.tmp/*.yaml
    mv "$suite_dir/crds.tmp" "$suite_dir/crds"
  fi
else
  step "no MCS conformance suite at $suite_src: skipped (the MCS conformance test needs it)"
fi

cat > "$dir/env.tmp" <<ENV
export XCC_KUBE_APISERVER=$k8s/bin/kube-apiserver
export XCC_KUBECTL=$k8s/bin/kubectl
export XCC_KUBE_CONTROLLER_MANAGER=$k8s/bin/kube-controller-manager
export XCC_ETCD=$k8s/bin/etcd
export XCC_COREDNS=$coredns_static/coredns
export XCC_KUBELET=$node/bin/kubelet
export XCC_KUBE_PROXY=$node/bin/kube-proxy
export XCC_KUBE_SCHEDULER=$node/bin/kube-scheduler
export XCC_COREDNS_STATIC=$coredns_static/coredns
export XCC_CNI_DIR=/usr/lib/cni
export XCC_K8S_VERSION=$K8S_VERSION
export XCC_COREDNS_VERSION=$COREDNS_VERSION
ENV
[ -z "$mcs_test" ] || printf 'export XCC_MCS_CONFORMANCE=%s\nexport XCC_MCS_CRDS=%s\n' "$mcs_test" "$suite_dir/crds" >> "$dir/env.tmp"
mv "$dir/env.tmp" "$dir/env"
step "ready: $dir/env"
