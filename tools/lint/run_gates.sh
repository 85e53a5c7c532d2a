#!/usr/bin/env bash
# Lint gates (issue 11): buildifier 8.2.1 check + lint, ruff (pyflakes + import order), compileall,
# git diff --check. Installs its pinned tools on a fresh machine, then runs every gate and prints
# one line per gate; exits non-zero if any gate has findings.
#
#   bash tools/lint/run_gates.sh            run the gates over the committed files
#   bash tools/lint/run_gates.sh --fix      first lets buildifier reformat and ruff --fix (import order,
#                                           unused imports) rewrite the files, then runs the gates
#
# Tools (installed once under $LANES_LINT_HOME, default ~/.cache/lanes-lint, checked every run):
#   buildifier 8.2.1  the npm package @bazel/buildifier@8.2.1, which ships the release binaries
#                     (no install script, nothing else downloaded): `npm pack` fetches the tarball,
#                     its sha512 and the binary's sha256 are checked against the pins below.
#   ruff 0.17.6       third_party/python/lint_requirements_lock.txt, pip --require-hashes.
set -euo pipefail
cd "$(dirname "$0")/../.."

FIX=0
if [ "${1:-}" = "--fix" ]; then FIX=1; fi

LINT_HOME=${LANES_LINT_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lanes-lint}
BUILDIFIER_VERSION=8.2.1
# npm's integrity of @bazel/buildifier-8.2.1.tgz, and the sha256 of the binaries in it.
BUILDIFIER_NPM_SHA512=eZ/Aq+2r4PcJa6LbPCT6ffgIJfTU/gYilqIzoX2OLM4nNkbQC6tTMPZNn7aHHjhGPxbNLv41zm4Xqt1olCLgXw==
declare -A BUILDIFIER_SHA256=(
  [linux_amd64]=6ceb7b0ab7cf66fceccc56a027d21d9cc557a7f34af37d2101edb56b92fcfa1a
  [linux_arm64]=3baa1cf7eb41d51f462fdd1fff3a6a4d81d757275d05b2dd5f48671284e9a1a5
)
RUFF_LOCK=third_party/python/lint_requirements_lock.txt
RUFF_CONFIG=tools/lint/ruff.toml

log() { echo "lint: $*" >&2; }

sha256_of() { python3 -c 'import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

install_buildifier() {
  local arch
  case "$(uname -m)" in
    x86_64) arch=linux_amd64 ;;
    aarch64 | arm64) arch=linux_arm64 ;;
    *) log "no pinned buildifier for $(uname -m)"; return 1 ;;
  esac
  BUILDIFIER=$LINT_HOME/buildifier-$BUILDIFIER_VERSION-$arch
  if [ -x "$BUILDIFIER" ] && [ "$(sha256_of "$BUILDIFIER")" = "${BUILDIFIER_SHA256[$arch]}" ]; then return 0; fi
  if ! command -v npm >/dev/null; then
    log "installing npm (Debian package) to fetch @bazel/buildifier"
    local sudo=""; if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@bazel/buildifier@$BUILDIFIER_VERSION" >/dev/null)
  local tgz=$tmp/bazel-buildifier-$BUILDIFIER_VERSION.tgz
  local got
  got=$(python3 -c 'import base64,hashlib,sys;print(base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$tgz")
  if [ "$got" != "$BUILDIFIER_NPM_SHA512" ]; then
    log "@bazel/buildifier@$BUILDIFIER_VERSION has sha512 $got, the pin says $BUILDIFIER_NPM_SHA512"; rm -rf "$tmp"; return 1
  fi
  tar -xzf "$tgz" -C "$tmp" "package/buildifier-$arch"
  got=$(sha256_of "$tmp/package/buildifier-$arch")
  if [ "$got" != "${BUILDIFIER_SHA256[$arch]}" ]; then
    log "buildifier-$arch has sha256 $got, the pin says ${BUILDIFIER_SHA256[$arch]}"; rm -rf "$tmp"; return 1
  fi
  mkdir -p "$LINT_HOME"
  install -m 0755 "$tmp/package/buildifier-$arch" "$BUILDIFIER"
  rm -rf "$tmp"
}

install_ruff() {
  RUFF_DIR=$LINT_HOME/ruff-$(sha256_of "$RUFF_LOCK" | cut -c1-16)
  if [ ! -x "$RUFF_DIR/bin/ruff" ]; then
    rm -rf "$RUFF_DIR.tmp"
    python3 -m pip install --isolated --quiet --disable-pip-version-check --root-user-action=ignore \
      --require-hashes --only-binary=:all: --no-deps --target "$RUFF_DIR.tmp" -r "$RUFF_LOCK"
    rm -rf "$RUFF_DIR"; mv "$RUFF_DIR.tmp" "$RUFF_DIR"
  fi
  RUFF=$RUFF_DIR/bin/ruff
}

mkdir -p "$LINT_HOME"
install_buildifier
install_ruff
log "buildifier $("$BUILDIFIER" --version | head -1 | awk '{print $3}') ($BUILDIFIER), $("$RUFF" --version) ($RUFF)"

failed=0
report() {  # gate name, finding count
  if [ "$2" = 0 ]; then echo "gate $1: clean"; else echo "gate $1: $2 finding(s)"; failed=1; fi
}

# Committed files only: bazel-* output links, .lanes/ and other git-ignored paths never count.
mapfile -t starlark < <(git ls-files -- ':(glob)**/BUILD' ':(glob)**/BUILD.bazel' ':(glob)**/*.bzl' \
  WORKSPACE MODULE.bazel ':(glob)**/*.BUILD')
mapfile -t python < <(git ls-files -- ':(glob)**/*.py')

# 1. buildifier: formatting and lint warnings (a warning is fixed, or disabled in place with a
#    `# buildifier: disable=<warning>` comment saying why).
out=$(mktemp)
if [ "$FIX" = 1 ]; then "$BUILDIFIER" "${starlark[@]}" || true; fi  # formatting only: lint warnings need a person
set +e
"$BUILDIFIER" -mode=check -lint=warn "${starlark[@]}" >"$out" 2>&1
set -e
cat "$out"
# One line per file to reformat, one "file:line: warning: ..." line per warning (its help text follows).
report buildifier "$(grep -cE '^[^ ]+( # reformat$|:[0-9]+: [a-z-]+: )' "$out" || true)"

# 2. ruff: pyflakes (F) and import order (I), configured in tools/lint/ruff.toml.
if [ "$FIX" = 1 ]; then "$RUFF" check --config "$RUFF_CONFIG" --fix --quiet "${python[@]}" || true; fi
set +e
"$RUFF" check --config "$RUFF_CONFIG" --output-format concise --quiet "${python[@]}" >"$out" 2>&1
set -e
cat "$out"
report ruff "$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: ' "$out" || true)"

# 3. Every committed Python file compiles (bytecode goes to a scratch dir, not into the tree).
cache=$(mktemp -d)
set +e
PYTHONPYCACHEPREFIX=$cache python3 -m compileall -q -f "${python[@]}" >"$out" 2>&1
status=$?
set -e
rm -rf "$cache"
cat "$out"
if [ "$status" = 0 ]; then report compileall 0; else report compileall "$(grep -c '^\*\*\*' "$out" || echo 1)"; fi

# 4. Whitespace errors in every committed file (against the empty tree, so a fresh clone checks
#    everything) and in uncommitted changes. Left out, as they must keep other programs' bytes:
#    the llama.cpp patches (context lines reproduce upstream), the committed evidence logs and raw
#    files of runs, compatibility measurements and benchmarks (bound by digest to what they prove), the
#    raw outputs of device probes beside a benchmark (bench/*/probes/: verbatim build and llama-bench
#    output), the kept outputs of KL probes (diagnosis/*/kl_probe/*/kl_logs: verbatim
#    llama-perplexity output, bound by digest to kl_probe.txt), binary protobuf files (*.pb; git
#    takes them for text) and the parsers' test data (verbatim llama.cpp tool output).
exclude=(
  ':(exclude,glob)**/*.pb'
  ':(exclude)third_party/llama_cpp/patches/*.patch'
  ':(exclude,glob)evidence/runs/**/logs/**'
  ':(exclude,glob)evidence/compat/**/logs/**'
  ':(exclude,glob)evidence/bench/**/logs/**'
  ':(exclude,glob)evidence/bench/*/probes/**'
  ':(exclude,glob)evidence/diagnosis/*/kl_probe/*/kl_logs/**'
  ':(exclude,glob)evidence/amx/**/logs/**'
  ':(exclude,glob)evidence/ctest/**/ctest.log'
  ':(exclude,glob)tools/runner/testdata/**'
)
empty=$(git hash-object -t tree /dev/null)
set +e
{ git diff --check "$empty" HEAD -- . "${exclude[@]}"; git diff --check HEAD -- . "${exclude[@]}"; } >"$out" 2>&1
set -e
cat "$out"
report git-diff-check "$(grep -cE '^[^+-].*:[0-9]+: ' "$out" || true)"

rm -f "$out"
exit "$failed"
