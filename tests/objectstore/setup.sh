#!/usr/bin/env bash
# Build (or reuse) the S3-compatible test server: SeaweedFS's `weed` (Apache-2.0), at the
# version tests/objectstore/weedbuild/go.mod pins, compiled from the Go module proxy like the
# test cluster's binaries (no release tarball is downloaded). Idempotent: a cached build is
# reused in well under a second.
#
#   bash tests/objectstore/setup.sh        prints the binary's path on its last line
#
# Output: ${SANDFLEET_OBJECTSTORE_CACHE:-$HOME/.cache/sandfleet/seaweedfs}/<version>/weed,
# outside the repository so fresh clones on one machine share it. Needs Go >= 1.26; no root.
# tests/support/seaweedfs.py starts it (`weed server -s3`: one process serving S3 on
# 127.0.0.1); without it the S3 store tests skip, or fail under SANDFLEET_REQUIRE_OBJECTSTORE=1.
# Cold: ~4 min of module downloads (first time on a machine) and ~16 min of compiling on two
# shared cores; tests/objectstore/README.md has the numbers.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODULE_DIR="$HERE/weedbuild"
MODULE=github.com/seaweedfs/seaweedfs
CACHE="${SANDFLEET_OBJECTSTORE_CACHE:-$HOME/.cache/sandfleet/seaweedfs}"
# shellcheck source=../support/go_modules.sh
source "$HERE/../support/go_modules.sh"

VERSION="$(go_pinned_version "$MODULE_DIR/go.mod" "$MODULE")"
TARGET_DIR="$CACHE/$VERSION"
TARGET="$TARGET_DIR/weed"

say() { printf '[objectstore] %s\n' "$*" >&2; }

if [ -x "$TARGET" ]; then
  say "reused SeaweedFS $VERSION"
  echo "$TARGET"
  exit 0
fi

need_go
mkdir -p "$TARGET_DIR"
LOG="$TARGET_DIR/build.log"

started=$(date +%s)
say "building SeaweedFS $VERSION (log $LOG)"
# Two shared cores: low priority, two jobs; CGO off gives a static binary. -s -w drops the
# symbol tables (a third of the size); tests never debug the server.
(
  cd "$MODULE_DIR"
  CGO_ENABLED=0 nice -n 10 go build -p 2 -trimpath -ldflags "-s -w" \
    -o "$TARGET.partial" "$MODULE/weed"
) > "$LOG" 2>&1 || { tail -30 "$LOG" >&2; exit 1; }
mv "$TARGET.partial" "$TARGET"
say "built SeaweedFS $VERSION in $(( $(date +%s) - started ))s ($(du -h "$TARGET" | cut -f1))"
echo "$TARGET"
