#!/usr/bin/env bash
# Installs what the loopback farm (tools/farm/farm.sh) needs on a fresh machine of this kind:
# PostgreSQL 15 (Debian) for BuildGrid's SQL scheduler, and a venv with BuildGrid 0.9.1 from the
# hash-locked requirements_lock.txt. BuildGrid 0.9.x needs Python >= 3.13 (Debian 12 ships 3.11): the
# venv is made from a python3.13 found on PATH or under pyenv. Idempotent; prints what it did.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${LANES_FARM_VENV:-/opt/buildgrid-venv}
LOCK=tools/farm/requirements_lock.txt
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

die() { echo "setup_farm: $*" >&2; exit 1; }

# PostgreSQL: initdb/pg_ctl live under /usr/lib/postgresql/<v>/bin, not on PATH.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "setup_farm: installing postgresql-15"
  $SUDO apt-get update -qq || die "apt-get update failed: no Debian package index, cannot install PostgreSQL"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
    || die "apt-get install postgresql-15 failed"
fi

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ -f "$VENV/.lanes-lock-sha256" ] && [ "$(cat "$VENV/.lanes-lock-sha256")" = "$want" ] && [ -x "$VENV/bin/bgd" ]; then
  echo "setup_farm: $VENV is current ($(basename "$(readlink -f "$VENV/bin/python3")"), $("$VENV/bin/pip" show buildgrid 2>/dev/null | sed -n 's/^Version: /buildgrid /p'))"
  exit 0
fi

py=""
for cand in python3.13 $(ls -d /root/.pyenv/versions/3.13*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 2>/dev/null | sort -u); do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then
    py=$(command -v "$cand"); break
  fi
done
[ -n "$py" ] || die "no Python >= 3.13 found (python3.13 on PATH or pyenv versions/3.13*); BuildGrid 0.9.1 requires it"

echo "setup_farm: creating $VENV with $py"
rm -rf "$VENV"
"$py" -m venv "$VENV"
"$VENV/bin/pip" install -q --isolated --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$LOCK" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
"$VENV/bin/bgd" --help >/dev/null || die "BuildGrid did not install into $VENV (see pip output above)"
echo "$want" > "$VENV/.lanes-lock-sha256"
echo "setup_farm: BuildGrid $("$VENV/bin/pip" show buildgrid | sed -n 's/^Version: //p') in $VENV"
