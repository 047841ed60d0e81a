#!/usr/bin/env bash
# Build Sandfleet's container images, the one documented way (README, "Install"; CI's test
# cluster builds through this script too: tests/cluster/setup.sh).
#
#   images/build.sh [OPTIONS] IMAGE...      IMAGE: operator | sandbox | sandbox-slim | all
#
#   operator       REGISTRY/sandfleet-operator:TAG        operator/Dockerfile (operator + gateway)
#   sandbox        REGISTRY/sandfleet-sandbox:TAG         runtime/Dockerfile, target full: the
#                  paper's environment (Python with numpy, scipy, pandas, sympy, matplotlib,
#                  scikit-learn, ...; compilers, git); the chart's default sandbox image
#   sandbox-slim   REGISTRY/sandfleet-sandbox:TAG-slim    target slim: the runtime agent and
#                  python3 only (dense fleets, CI)
#   all            the three
#
# Options:
#   --registry R      image name prefix, e.g. registry.example.com/ml (default: none)
#   --tag T           default: the project version from pyproject.toml
#   --builder CMD     docker, podman or buildah, with global options if needed
#                     (default: the first of them on PATH); the same arguments for each
#   --base-image B    the Dockerfiles' BASE_IMAGE (default: theirs)
#   --pip-ca FILE     CA bundle for pip behind a TLS-intercepting proxy (a build secret)
#   --push            push each image after building it
#   --dry-run         print the commands, run nothing
#   --print-names     print the reference each IMAGE gets (one a line), build nothing
#   -- FLAGS...       more flags for the build command (e.g. --network host)
#
# Every command is printed before it runs (`+ docker build ...`). Run from anywhere: the build
# context is the repository root.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }
fail() { printf 'images/build.sh: %s\n' "$*" >&2; exit 2; }

registry="" tag="" builder="" base_image="" pip_ca="" push=0 dry_run=0 print_names=0
images=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) [ $# -ge 2 ] || fail "--registry needs a value"; registry="${2%/}"; shift 2 ;;
    --tag) [ $# -ge 2 ] || fail "--tag needs a value"; tag="$2"; shift 2 ;;
    --builder) [ $# -ge 2 ] || fail "--builder needs a value"; builder="$2"; shift 2 ;;
    --base-image) [ $# -ge 2 ] || fail "--base-image needs a value"; base_image="$2"; shift 2 ;;
    --pip-ca) [ $# -ge 2 ] || fail "--pip-ca needs a value"; pip_ca="$2"; shift 2 ;;
    --push) push=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --print-names) print_names=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; extra=("$@"); break ;;
    operator|sandbox|sandbox-slim) images+=("$1"); shift ;;
    all) images+=(operator sandbox sandbox-slim); shift ;;
    *) fail "unknown argument '$1' (images: operator, sandbox, sandbox-slim, all; --help)" ;;
  esac
done
[ ${#images[@]} -gt 0 ] || fail "name an image: operator, sandbox, sandbox-slim or all (--help)"

if [ -z "$tag" ]; then
  tag="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)"
fi
[ -n "$pip_ca" ] && [ ! -s "$pip_ca" ] && fail "--pip-ca $pip_ca: no such file"
revision="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)"

# image_name IMAGE: the full reference an image is tagged with.
image_name() {
  local prefix="${registry:+$registry/}"
  case "$1" in
    operator) echo "${prefix}sandfleet-operator:$tag" ;;
    sandbox) echo "${prefix}sandfleet-sandbox:$tag" ;;
    sandbox-slim) echo "${prefix}sandfleet-sandbox:$tag-slim" ;;
  esac
}

if [ "$print_names" = 1 ]; then
  for image in "${images[@]}"; do image_name "$image"; done
  exit 0
fi

if [ -z "$builder" ]; then
  for candidate in docker podman buildah; do
    if command -v "$candidate" >/dev/null; then builder=$candidate; break; fi
  done
  [ -n "$builder" ] || fail "no docker, podman or buildah on PATH (or pass --builder)"
fi
read -r -a builder_cmd <<< "$builder"
case "$(basename "${builder_cmd[0]}")" in
  docker|podman) build_verb=(build) ;;
  buildah) build_verb=(bud) ;;
  *) fail "--builder must be docker, podman or buildah, not '${builder_cmd[0]}'" ;;
esac
run() {
  printf '+ %s\n' "$*"
  [ "$dry_run" = 1 ] || "$@"
}

for image in "${images[@]}"; do
  case "$image" in
    operator) dockerfile=operator/Dockerfile target="" ;;
    sandbox) dockerfile=runtime/Dockerfile target=full ;;
    sandbox-slim) dockerfile=runtime/Dockerfile target=slim ;;
  esac
  name="$(image_name "$image")"
  args=(--file "$REPO/$dockerfile" --tag "$name"
        --build-arg "VERSION=$version" --build-arg "REVISION=$revision")
  [ -n "$target" ] && args+=(--target "$target")
  [ -n "$base_image" ] && args+=(--build-arg "BASE_IMAGE=$base_image")
  [ -n "$pip_ca" ] && args+=(--secret "id=pip_ca,src=$pip_ca")
  run "${builder_cmd[@]}" "${build_verb[@]}" "${args[@]}" "${extra[@]}" "$REPO"
  [ "$push" = 1 ] && run "${builder_cmd[@]}" push "$name"
done
exit 0
