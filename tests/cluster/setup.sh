#!/usr/bin/env bash
# Build (or reuse) everything the single-node test cluster needs; idempotent, prints what it reused.
#
#   bash tests/cluster/setup.sh [STEP]     Debian packages, Kubernetes + etcd binaries, images
#                                          (STEP: all (default) | packages | binaries | images)
#   bash tests/cluster/setup.sh runtime-full   the full sandbox image too (PyPI downloads; not in CI)
#
# The images are built with the documented command, images/build.sh (buildah): sandbox-slim
# (runtime/Dockerfile --target slim: runtime, proto, pyproject, Dockerfile) and operator
# (operator/Dockerfile: the control plane too); rebuilt whenever their sources changed and,
# when a cluster is running, imported into it without a restart.
#   SANDFLEET_CLUSTER_KWOK=0 bash ...      without kwok (fake nodes for the scale test)
#   SANDFLEET_CLUSTER_NETPOL=0 bash ...    without kube-router (NetworkPolicies then not enforced)
#
# Cache: ${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}, outside the repository so
# fresh clones on one machine share it. Binaries are keyed by the Kubernetes release, images by
# a hash of what goes into them. Needs root (apt-get, debootstrap, buildah) and Debian.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}"
# go_pinned_version, need_go; puts this machine image's Go toolchain on PATH.
# shellcheck source=../support/go_modules.sh
source "$HERE/../support/go_modules.sh"
RELEASE="$(go_pinned_version "$HERE/kubebuild/go.mod" k8s.io/kubernetes)"
BIN="$CACHE/bin/$RELEASE"
IMAGES="$CACHE/images"
LOGS="$CACHE/logs"
BASE_SUITE=bookworm
BASE_REF="sandfleet.local/debian-base:$BASE_SUITE"
PAUSE_REF="sandfleet.local/pause:1"
# Go builds share two cores with everyone else on the machine: low priority, two jobs.
NICE=(nice -n 10)
GO_BUILD=(go build -p 2 -trimpath)
BUILDAH=(buildah --root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/runroot" --storage-driver overlay)
# iptables for kube-proxy and kube-router, ipset for kube-router's NetworkPolicy sets.
APT_PACKAGES=(containerd runc containernetworking-plugins iproute2 iptables ipset openssl
              debootstrap buildah ca-certificates)

say() { printf '[setup] %s\n' "$*"; }
elapsed() { printf '%ss' "$(( $(date +%s) - $1 ))"; }

[ "$(id -u)" = 0 ] || { echo "setup.sh needs root (apt-get, debootstrap, buildah)" >&2; exit 1; }
mkdir -p "$BIN" "$IMAGES" "$LOGS"

install_packages() {
  local missing=()
  for package in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "reused Debian packages"; return; fi
  local started; started=$(date +%s)
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    > "$LOGS/apt.log"
  say "installed Debian packages in $(elapsed "$started")"
}

# Binary name -> package in the kubebuild module.
declare -A KUBE_PACKAGES=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=./cmd/etcd
)

build_binaries() {
  # Only what is missing: a cache from before kube-proxy joined gets just kube-proxy.
  local absent=()
  for binary in "${!KUBE_PACKAGES[@]}"; do [ -x "$BIN/$binary" ] || absent+=("$binary"); done
  if [ ${#absent[@]} -eq 0 ] && [ -x "$BIN/pause" ]; then
    say "reused Kubernetes $RELEASE binaries in $BIN"; return
  fi
  need_go
  local started; started=$(date +%s)
  local version=k8s.io/component-base/version staging="$BIN.partial"
  local ldflags="-s -w -X $version.gitVersion=$RELEASE -X $version.gitMajor=1"
  ldflags+=" -X $version.gitMinor=$(echo "$RELEASE" | cut -d. -f2) -X $version.gitTreeState=clean"
  local packages=()
  for binary in "${absent[@]}"; do packages+=("${KUBE_PACKAGES[$binary]}"); done
  rm -rf "$staging" && mkdir -p "$staging"
  say "building ${absent[*]:-pause} ($RELEASE; several minutes when cold; log $LOGS/go-build.log)"
  (
    cd "$HERE/kubebuild"
    # providerless: no in-tree cloud providers, which Kubernetes itself builds this way too.
    if [ ${#packages[@]} -gt 0 ]; then
      "${NICE[@]}" "${GO_BUILD[@]}" -tags providerless -ldflags "$ldflags" -o "$staging/" "${packages[@]}"
    fi
    if [ ! -x "$BIN/pause" ]; then
      CGO_ENABLED=0 "${NICE[@]}" "${GO_BUILD[@]}" -ldflags "-s -w" -o "$staging/pause" ./cmd/pause
    fi
  ) > "$LOGS/go-build.log" 2>&1 || { tail -30 "$LOGS/go-build.log" >&2; exit 1; }
  mv "$staging"/* "$BIN"/ && rmdir "$staging"
  say "built binaries in $(elapsed "$started")"
}

build_kwok() {
  [ "${SANDFLEET_CLUSTER_KWOK:-1}" = 1 ] || return 0
  local version
  version="$(go_pinned_version "$HERE/kwokbuild/go.mod" sigs.k8s.io/kwok)"
  if [ -x "$CACHE/bin/kwok-$version/kwok" ]; then say "reused kwok $version"; return; fi
  local started; started=$(date +%s)
  (cd "$HERE/kwokbuild" && "${NICE[@]}" "${GO_BUILD[@]}" -ldflags "-s -w" \
     -o "$CACHE/bin/kwok-$version/kwok" sigs.k8s.io/kwok/cmd/kwok) > "$LOGS/kwok-build.log" 2>&1 \
    || { tail -30 "$LOGS/kwok-build.log" >&2; exit 1; }
  say "built kwok in $(elapsed "$started")"
}

# The NetworkPolicy enforcer: kube-router's firewall (iptables + ipset), from its Go module.
build_kube_router() {
  [ "${SANDFLEET_CLUSTER_NETPOL:-1}" = 1 ] || return 0
  local version
  version="$(go_pinned_version "$HERE/netpolbuild/go.mod" github.com/cloudnativelabs/kube-router/v2)"
  if [ -x "$CACHE/bin/kube-router-$version/kube-router" ]; then say "reused kube-router $version"; return; fi
  local started; started=$(date +%s)
  say "building kube-router $version (log $LOGS/kube-router-build.log)"
  (cd "$HERE/netpolbuild" && "${NICE[@]}" "${GO_BUILD[@]}" \
     -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$version" \
     -o "$CACHE/bin/kube-router-$version/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) \
    > "$LOGS/kube-router-build.log" 2>&1 || { tail -30 "$LOGS/kube-router-build.log" >&2; exit 1; }
  say "built kube-router in $(elapsed "$started")"
}

has_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

build_base_image() {
  if has_image "$BASE_REF"; then say "reused base image $BASE_REF"; return; fi
  local started rootfs="$IMAGES/debian-$BASE_SUITE-rootfs"; started=$(date +%s)
  if [ ! -d "$rootfs" ]; then
    say "debootstrap $BASE_SUITE (minbase)"
    debootstrap --variant=minbase "$BASE_SUITE" "$rootfs.partial" http://deb.debian.org/debian \
      > "$LOGS/debootstrap.log" 2>&1 || { tail -20 "$LOGS/debootstrap.log" >&2; exit 1; }
    mv "$rootfs.partial" "$rootfs"
  fi
  local container mountpoint
  container=$("${BUILDAH[@]}" from scratch)
  mountpoint=$("${BUILDAH[@]}" mount "$container")
  # No device nodes, package caches or index files: the image is a root filesystem, not a system.
  tar -C "$rootfs" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      --exclude='./var/cache/apt/*' --exclude='./var/lib/apt/lists/*' -cf - . \
    | tar -C "$mountpoint" -xf -
  "${BUILDAH[@]}" umount "$container" >/dev/null
  "${BUILDAH[@]}" config --cmd '["/bin/bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "$container"
  "${BUILDAH[@]}" commit --quiet --rm "$container" "$BASE_REF" >/dev/null
  say "built base image $BASE_REF in $(elapsed "$started")"
}

# hash_of FILE|DIR...: content hash of the given paths (names and bytes; caches excluded).
hash_of() {
  (cd "$REPO" && find "$@" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
}

export_image() {  # export_image REF ARCHIVE
  [ -f "$IMAGES/$2" ] && return
  "${BUILDAH[@]}" push --quiet "$1" "docker-archive:$IMAGES/$2.partial:$1" >/dev/null
  mv "$IMAGES/$2.partial" "$IMAGES/$2"
}

build_pause_image() {
  PAUSE_ARCHIVE="pause-$(sha256sum "$BIN/pause" | cut -c1-12).tar"
  if [ -f "$IMAGES/$PAUSE_ARCHIVE" ]; then say "reused pause image"; return; fi
  local container
  container=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" copy --quiet "$container" "$BIN/pause" /pause >/dev/null
  "${BUILDAH[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$container"
  "${BUILDAH[@]}" commit --quiet --rm "$container" "$PAUSE_REF" >/dev/null
  export_image "$PAUSE_REF" "$PAUSE_ARCHIVE"
  say "built pause image $PAUSE_REF"
}

# What each image is built from (the cache key): the slim sandbox image never sees the control
# plane, so operator edits rebuild only the operator image.
RUNTIME_SOURCES=(images/build.sh runtime/Dockerfile pyproject.toml runtime/requirements.txt
                 runtime/sandfleet_runtime proto/sandfleet_proto)
OPERATOR_SOURCES=(images/build.sh operator/Dockerfile pyproject.toml operator/sandfleet
                  runtime/sandfleet_runtime proto/sandfleet_proto)

image_size() {  # uncompressed size as buildah reports it
  "${BUILDAH[@]}" images --format '{{.Size}}' "$1" 2>/dev/null | head -1
}

# build_image IMAGE SOURCES...: build (or reuse) IMAGE (operator, sandbox or sandbox-slim)
# with the documented command, images/build.sh (README, "Install"), through buildah on the
# local Debian base, named sandfleet.local/<its name>:<hash of SOURCES>[-slim]; export it as
# sandfleet-IMAGE-<hash>.tar and drop older builds of IMAGE. Sets IMAGE_REF and IMAGE_ARCHIVE.
build_image() {
  local image=$1; shift
  local key; key=$(hash_of "$@")
  local build=(bash "$REPO/images/build.sh" --registry sandfleet.local --tag "$key")
  IMAGE_REF="$("${build[@]}" --print-names "$image")"
  IMAGE_ARCHIVE="sandfleet-$image-$key.tar"
  if [ -f "$IMAGES/$IMAGE_ARCHIVE" ]; then say "reused $image image $IMAGE_REF"; return; fi
  local started; started=$(date +%s)
  # pip inside the build trusts what the host trusts (this matters behind an egress proxy).
  local host_ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
  [ -s "$host_ca" ] && build+=(--pip-ca "$host_ca")
  say "building $IMAGE_REF with images/build.sh (log $LOGS/$image-image.log)"
  # chroot isolation: RUN steps need neither runc-in-runc nor user namespaces.
  "${NICE[@]}" "${build[@]}" --builder "${BUILDAH[*]}" --base-image "$BASE_REF" "$image" \
    -- --isolation chroot --network host --pull=never \
    > "$LOGS/$image-image.log" 2>&1 || { tail -30 "$LOGS/$image-image.log" >&2; exit 1; }
  export_image "$IMAGE_REF" "$IMAGE_ARCHIVE"
  # Older builds only fill the disk: keep the one just made. (By the exact shape of the name:
  # sandfleet-sandbox-slim-* is not sandfleet-sandbox's, nor :<hash>-slim :<hash>.)
  find "$IMAGES" -maxdepth 1 -regextype posix-extended -regex ".*/sandfleet-$image-[0-9a-f]{12}\.tar" \
    ! -name "$IMAGE_ARCHIVE" -delete
  "${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' | grep -E "^${IMAGE_REF/$key/[0-9a-f]\{12\}}\$" \
    | grep -vx "$IMAGE_REF" | xargs -r "${BUILDAH[@]}" rmi >/dev/null 2>&1 || true
  say "built $image image in $(elapsed "$started") ($(image_size "$IMAGE_REF") uncompressed)"
}

build_runtime_image() {
  build_image sandbox-slim "${RUNTIME_SOURCES[@]}"
  RUNTIME_REF=$IMAGE_REF RUNTIME_ARCHIVE=$IMAGE_ARCHIVE
}

build_operator_image() {
  build_image operator "${OPERATOR_SOURCES[@]}"
  OPERATOR_REF=$IMAGE_REF OPERATOR_ARCHIVE=$IMAGE_ARCHIVE
}

# The full sandbox image (runtime/Dockerfile's default target: build tools and the scientific
# Python stack, ~300 MB of PyPI downloads). Not part of `all` and never imported into the
# cluster: `setup.sh runtime-full` builds it (e.g. for the size report) and smoke-tests it.
build_full_runtime_image() {
  build_image sandbox "${RUNTIME_SOURCES[@]}"
  local container probe
  probe='import numpy, scipy, sympy, pandas, matplotlib, sklearn, networkx; print("science", numpy.__version__)'
  container=$("${BUILDAH[@]}" from --pull=never "$IMAGE_REF")
  "${BUILDAH[@]}" run --isolation chroot --user 1000:1000 --workingdir /testbed "$container" -- \
    /bin/bash -c "python -c '$probe' && gcc --version | head -1 && git --version && id -u && pwd" \
    | sed 's/^/[setup] full image: /'
  "${BUILDAH[@]}" rm "$container" >/dev/null
}

write_index() {
  cat > "$IMAGES/index.json.partial" <<EOF
{
  "pause": {"ref": "$PAUSE_REF", "archive": "$PAUSE_ARCHIVE"},
  "runtime": {"ref": "$RUNTIME_REF", "archive": "$RUNTIME_ARCHIVE"},
  "operator": {"ref": "$OPERATOR_REF", "archive": "$OPERATOR_ARCHIVE"}
}
EOF
  mv "$IMAGES/index.json.partial" "$IMAGES/index.json"
}

# A cluster that is already up gets newly built images without a restart: `cluster images`
# imports every image of index.json its containerd lacks (pods on the old image keep running).
import_into_running_cluster() {
  if [ ! -f "$CACHE/run/state.json" ]; then say "no running cluster (up imports the images)"; return; fi
  local python="$REPO/.venv/bin/python"
  [ -x "$python" ] || python=python3
  (cd "$REPO" && SANDFLEET_CLUSTER_CACHE="$CACHE" "$python" -m tests.cluster.harness.cluster images) \
    | sed 's/^/[setup] /'
}

# Helm comes from its Go module too; tests/cluster/build_helm.sh (the chart's owners) builds
# it into the cache. Skipped while that script does not exist.
build_helm() {
  if [ -f "$HERE/build_helm.sh" ]; then bash "$HERE/build_helm.sh"; else say "no build_helm.sh: no helm"; fi
}

TOTAL_STARTED=$(date +%s)
STEPS="${1:-all}"  # all | packages | binaries | images | runtime-full
case "$STEPS" in all|packages) install_packages ;; esac
case "$STEPS" in all|binaries) build_binaries; build_kwok; build_kube_router; build_helm ;; esac
case "$STEPS" in all|images|runtime-full)
  [ -x "$BIN/pause" ] || { echo "no $BIN/pause: run the binaries step first" >&2; exit 1; }
  build_base_image ;; esac
case "$STEPS" in all|images)
  build_pause_image; build_runtime_image; build_operator_image; write_index
  import_into_running_cluster ;; esac
case "$STEPS" in runtime-full) build_full_runtime_image ;; esac
say "ready in $(elapsed "$TOTAL_STARTED"): binaries $BIN, images $IMAGES/index.json"
