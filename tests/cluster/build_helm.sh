#!/usr/bin/env bash
# Build (or reuse) the helm binary the chart tests use: helm.sh/helm/v3 at the version
# tests/cluster/helmbuild/go.mod pins, built from the Go module proxy like the Kubernetes
# binaries (no release tarball is downloaded). Idempotent: an existing build is reused.
#
#   bash tests/cluster/build_helm.sh        prints the binary's path on its last line
#
# Output: ${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}/bin/helm-<version>/helm
# Needs Go >= 1.26; no root.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SANDFLEET_CLUSTER_CACHE:-$HOME/.cache/sandfleet/cluster}"
MODULE_DIR="$HERE/helmbuild"
LOGS="$CACHE/logs"
# shellcheck source=../support/go_modules.sh
source "$HERE/../support/go_modules.sh"

VERSION="$(go_pinned_version "$MODULE_DIR/go.mod" helm.sh/helm/v3)"
TARGET_DIR="$CACHE/bin/helm-$VERSION"
TARGET="$TARGET_DIR/helm"

say() { printf '[build_helm] %s\n' "$*" >&2; }

if [ -x "$TARGET" ]; then
  say "reused helm $VERSION"
  echo "$TARGET"
  exit 0
fi

need_go
mkdir -p "$TARGET_DIR" "$LOGS"

# helm reports the Kubernetes version of the client-go it was built with as the default
# .Capabilities.KubeVersion (helm template) and for its deprecation lint; helm's own Makefile
# derives it from client-go v0.X.Y as 1.X, and so does this.
CLIENT_GO="$(go_required_version "$MODULE_DIR/go.mod" k8s.io/client-go)"
KUBE_MINOR="$(echo "$CLIENT_GO" | cut -d. -f2)"
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION"
LDFLAGS+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for package in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDFLAGS+=" -X $package.k8sVersionMajor=1 -X $package.k8sVersionMinor=$KUBE_MINOR"
done

started=$(date +%s)
say "building helm $VERSION (log $LOGS/helm-build.log)"
# Two shared cores: low priority, two jobs; CGO off gives a static binary like helm's releases.
(
  cd "$MODULE_DIR"
  CGO_ENABLED=0 nice -n 10 go build -p 2 -trimpath -ldflags "$LDFLAGS" \
    -o "$TARGET.partial" helm.sh/helm/v3/cmd/helm
) > "$LOGS/helm-build.log" 2>&1 || { tail -30 "$LOGS/helm-build.log" >&2; exit 1; }
mv "$TARGET.partial" "$TARGET"
say "built helm $VERSION in $(( $(date +%s) - started ))s ($(du -h "$TARGET" | cut -f1))"
echo "$TARGET"
