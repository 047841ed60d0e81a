# Shared by the scripts that build test servers from the Go module proxy
# (tests/cluster/setup.sh, tests/cluster/build_helm.sh, tests/objectstore/setup.sh): where
# each pins its version, and the Go toolchain. Source it; it defines functions only, and
# puts this machine image's Go (/usr/local/go/bin) on PATH when it is there.

[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"

# go_required_version GO_MOD MODULE: the version GO_MOD requires of MODULE (in a `require`
# line or a require block); empty when it requires none.
go_required_version() {
  local pattern=${2//./\\.}
  sed -n "s|^[[:space:]]*\(require \)\{0,1\}$pattern \(v[^ ]*\).*|\2|p" "$1" | head -1
}

# go_pinned_version GO_MOD MODULE: as go_required_version, but exits the script with a
# message when GO_MOD pins no version of MODULE.
go_pinned_version() {
  local version; version="$(go_required_version "$1" "$2")"
  [ -n "$version" ] || { echo "no $2 version in $1" >&2; exit 1; }
  echo "$version"
}

# need_go: exit the script with a message when no Go toolchain is found.
need_go() {
  command -v go >/dev/null || { echo "Go toolchain (go >= 1.26) not found" >&2; exit 1; }
}
