#!/usr/bin/env bash
# Build (or reuse) everything the single-node test cluster needs; idempotent, prints what it reused.
#
#   bash tests/cluster/setup.sh [STEP]     Debian packages, Kubernetes + etcd binaries, images
#                                          (STEP: all (default) | packages | binaries | images)
#
# The runtime image is rebuilt whenever its sources changed (runtime, proto, control plane,
# pyproject, Dockerfile) and, when a cluster is running, imported into it without a restart.
#   SANDFLEET_CLUSTER_KWOK=0 bash ...      without kwok (fake nodes for the scale test)
#
# Cache: ${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}, outside the repository so
# fresh clones on one machine share it. Binaries are keyed by the Kubernetes release, images by
# a hash of what goes into them. Needs root (apt-get, debootstrap, buildah) and Debian.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}"
RELEASE="$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}k8s\.io\/kubernetes \(v[^ ]*\).*/\2/p' "$HERE/kubebuild/go.mod" | head -1)"
[ -n "$RELEASE" ] || { echo "no k8s.io/kubernetes version in $HERE/kubebuild/go.mod" >&2; exit 1; }
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
APT_PACKAGES=(containerd runc containernetworking-plugins iproute2 iptables openssl
              debootstrap buildah ca-certificates)

# The Go toolchain of this machine image lives here; a PATH without it still finds it.
[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"

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

build_binaries() {
  local wanted=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause)
  local absent=()
  for binary in "${wanted[@]}"; do [ -x "$BIN/$binary" ] || absent+=("$binary"); done
  if [ ${#absent[@]} -eq 0 ]; then say "reused Kubernetes $RELEASE binaries in $BIN"; return; fi
  command -v go >/dev/null || { echo "Go toolchain (go >= 1.26) not found" >&2; exit 1; }
  local started; started=$(date +%s)
  local version=k8s.io/component-base/version staging="$BIN.partial"
  local ldflags="-s -w -X $version.gitVersion=$RELEASE -X $version.gitMajor=1"
  ldflags+=" -X $version.gitMinor=$(echo "$RELEASE" | cut -d. -f2) -X $version.gitTreeState=clean"
  mkdir -p "$staging"
  say "building Kubernetes $RELEASE + etcd (several minutes; log $LOGS/go-build.log)"
  (
    cd "$HERE/kubebuild"
    # providerless: no in-tree cloud providers, which Kubernetes itself builds this way too.
    "${NICE[@]}" "${GO_BUILD[@]}" -tags providerless -ldflags "$ldflags" -o "$staging/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kubectl ./cmd/etcd
    CGO_ENABLED=0 "${NICE[@]}" "${GO_BUILD[@]}" -ldflags "-s -w" -o "$staging/pause" ./cmd/pause
  ) > "$LOGS/go-build.log" 2>&1 || { tail -30 "$LOGS/go-build.log" >&2; exit 1; }
  mv "$staging"/* "$BIN"/ && rmdir "$staging"
  say "built binaries in $(elapsed "$started")"
}

build_kwok() {
  [ "${SANDFLEET_CLUSTER_KWOK:-1}" = 1 ] || return 0
  local version
  version="$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}sigs\.k8s\.io\/kwok \(v[^ ]*\).*/\2/p' "$HERE/kwokbuild/go.mod" | head -1)"
  if [ -x "$CACHE/bin/kwok-$version/kwok" ]; then say "reused kwok $version"; return; fi
  local started; started=$(date +%s)
  (cd "$HERE/kwokbuild" && "${NICE[@]}" "${GO_BUILD[@]}" -ldflags "-s -w" \
     -o "$CACHE/bin/kwok-$version/kwok" sigs.k8s.io/kwok/cmd/kwok) > "$LOGS/kwok-build.log" 2>&1 \
    || { tail -30 "$LOGS/kwok-build.log" >&2; exit 1; }
  say "built kwok in $(elapsed "$started")"
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

build_runtime_image() {
  local key
  key=$(hash_of runtime/Dockerfile pyproject.toml runtime/sandfleet_runtime proto/sandfleet_proto \
        operator/sandfleet)
  RUNTIME_REF="sandfleet.local/sandbox-runtime:$key"
  RUNTIME_ARCHIVE="sandbox-runtime-$key.tar"
  if [ -f "$IMAGES/$RUNTIME_ARCHIVE" ]; then say "reused runtime image $RUNTIME_REF"; return; fi
  local started; started=$(date +%s)
  # pip inside the build trusts what the host trusts (this matters behind an egress proxy).
  local host_ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
  PIP_CA_SECRET=()
  [ -s "$host_ca" ] && PIP_CA_SECRET=(--secret "id=pip_ca,src=$host_ca")
  say "building $RUNTIME_REF from runtime/Dockerfile (log $LOGS/runtime-image.log)"
  # chroot isolation: RUN steps need neither runc-in-runc nor user namespaces.
  "${NICE[@]}" "${BUILDAH[@]}" bud --isolation chroot --network host --pull=never \
    --build-arg "BASE_IMAGE=$BASE_REF" "${PIP_CA_SECRET[@]}" -f "$REPO/runtime/Dockerfile" -t "$RUNTIME_REF" "$REPO" \
    > "$LOGS/runtime-image.log" 2>&1 || { tail -30 "$LOGS/runtime-image.log" >&2; exit 1; }
  export_image "$RUNTIME_REF" "$RUNTIME_ARCHIVE"
  # Older builds only fill the disk: keep the one just made.
  find "$IMAGES" -maxdepth 1 -name 'sandbox-runtime-*.tar' ! -name "$RUNTIME_ARCHIVE" -delete
  "${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^sandfleet.local/sandbox-runtime:' \
    | grep -vx "$RUNTIME_REF" | xargs -r "${BUILDAH[@]}" rmi >/dev/null 2>&1 || true
  say "built runtime image in $(elapsed "$started") (archive $(du -h "$IMAGES/$RUNTIME_ARCHIVE" | cut -f1))"
}

write_index() {
  cat > "$IMAGES/index.json.partial" <<EOF
{
  "pause": {"ref": "$PAUSE_REF", "archive": "$PAUSE_ARCHIVE"},
  "runtime": {"ref": "$RUNTIME_REF", "archive": "$RUNTIME_ARCHIVE"}
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
  (cd "$REPO" && SANDFLEET_CLUSTER_CACHE="$CACHE" "$python" -m tests.cluster.cluster images) \
    | sed 's/^/[setup] /'
}

TOTAL_STARTED=$(date +%s)
STEPS="${1:-all}"  # all | packages | binaries | images
case "$STEPS" in all|packages) install_packages ;; esac
case "$STEPS" in all|binaries) build_binaries; build_kwok ;; esac
case "$STEPS" in all|images)
  [ -x "$BIN/pause" ] || { echo "no $BIN/pause: run the binaries step first" >&2; exit 1; }
  build_base_image; build_pause_image; build_runtime_image; write_index
  import_into_running_cluster ;; esac
say "ready in $(elapsed "$TOTAL_STARTED"): binaries $BIN, images $IMAGES/index.json"
