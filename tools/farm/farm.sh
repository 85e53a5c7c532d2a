#!/usr/bin/env bash
# The loopback remote-execution farm: PostgreSQL 15 + BuildGrid 0.9.1 (SQL scheduler, disk CAS, LRU
# action cache) + fixture workers speaking the Remote Workers API (tools/farm/fixture_worker.py, a test
# fixture: real farms bring their own workers). Everything listens on 127.0.0.1 only.
#
#   tools/farm/farm.sh start          # postgres, bgd server, cpu-worker (Pool=cpu-build,cpu-x86_64-v3),
#                                     # gpu-worker (Pool=gpu-h200; advertises the pool, has no GPU)
#   tools/farm/farm.sh stop [--purge] # stops everything it started; --purge also removes the state dir
#   tools/farm/farm.sh stop-worker NAME
#   tools/farm/farm.sh status
#
# Bazel then uses it with --config=farm (.bazelrc). Prerequisites come from tools/farm/setup_farm.sh.
# Settings (environment): LANES_FARM_DIR (/tmp/lanes-farm), LANES_FARM_PORT (8980),
# LANES_FARM_PG_PORT (55432), LANES_FARM_QUEUE_TIMEOUT_S (20), LANES_FARM_VENV (/opt/buildgrid-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."

STATE=${LANES_FARM_DIR:-/tmp/lanes-farm}
PORT=${LANES_FARM_PORT:-8980}
PG_PORT=${LANES_FARM_PG_PORT:-55432}
QUEUE_TIMEOUT_S=${LANES_FARM_QUEUE_TIMEOUT_S:-20}
VENV=${LANES_FARM_VENV:-/opt/buildgrid-venv}
START_BOUND_S=90

die() { echo "farm: $*" >&2; exit 1; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
# PostgreSQL refuses to run as root: as root, its commands run as the postgres user.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: bounded, fails with the description
  local bound=$1 what=$2; shift 2
  local deadline=$((SECONDS + bound))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${bound}s (logs in $STATE)"
    sleep 0.5
  done
}

check_prereqs() {
  local missing=()
  [ -x "$VENV/bin/bgd" ] || missing+=("BuildGrid venv $VENV (bgd)")
  [ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ] || missing+=("PostgreSQL server (initdb, pg_ctl)")
  if [ "$(id -u)" = 0 ]; then
    command -v runuser >/dev/null || missing+=("runuser")
    id postgres >/dev/null 2>&1 || missing+=("the postgres user")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    die "missing prerequisite: $(IFS=';'; echo "${missing[*]}"). Run: bash tools/farm/setup_farm.sh"
  fi
}

start_bg() {  # start_bg NAME COMMAND...: own session, so stop can end its whole process group
  local name=$1; shift
  setsid "$@" >"$STATE/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name.pid"
}

start_worker() {  # start_worker NAME POOLS CAPACITY
  local name=$1
  setsid "$VENV/bin/python3" tools/farm/fixture_worker.py --server="127.0.0.1:$PORT" --name="$name" \
    --pools="$2" --capacity="$3" --work_dir="$STATE/work/$name" --poll_s=10 \
    >"$STATE/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name.pid"
  wait_for 30 "worker $name" grep -qs "bot session" "$STATE/$name.log"
}

stop_one() {  # stop_one NAME: SIGTERM its process group, SIGKILL after 15 s
  alive "$1" || { rm -f "$STATE/$1.pid"; return 0; }
  local pid; pid=$(cat "$STATE/$1.pid")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$STATE/$1.pid"
  echo "farm: stopped $1"
}

cmd_start() {
  check_prereqs
  if alive server || alive cpu-worker || alive gpu-worker; then die "already running (tools/farm/farm.sh stop first)"; fi
  port_open "$PORT" && die "port $PORT is taken by another process"
  port_open "$PG_PORT" && die "port $PG_PORT is taken by another process"
  local t0=$SECONDS
  mkdir -p "$STATE/pg-socket" "$STATE/work"
  if [ ! -f "$STATE/pg/PG_VERSION" ]; then
    mkdir -p "$STATE/pg"
    [ "$(id -u)" = 0 ] && chown postgres "$STATE/pg" "$STATE/pg-socket"
    as_pg "$(pg_bin)/initdb" -D "$STATE/pg" --auth=trust -U postgres >"$STATE/initdb.log" 2>&1 \
      || die "initdb failed (see $STATE/initdb.log)"
  fi
  touch "$STATE/postgres.log"; [ "$(id -u)" = 0 ] && chown postgres "$STATE/postgres.log"
  as_pg "$(pg_bin)/pg_ctl" -D "$STATE/pg" -l "$STATE/postgres.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $STATE/pg-socket -c fsync=off" >/dev/null \
    || die "PostgreSQL did not start (see $STATE/postgres.log)"
  echo "farm: PostgreSQL on 127.0.0.1:$PG_PORT"
  as_pg "$(pg_bin)/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='bgd'" \
    | grep -q 1 || as_pg "$(pg_bin)/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres bgd
  "$VENV/bin/bgd" migrate apply "postgresql://postgres@127.0.0.1:$PG_PORT/bgd" >"$STATE/migrate.log" 2>&1 \
    || die "bgd migrate apply failed (see $STATE/migrate.log)"
  sed -e "s|@PORT@|$PORT|g" -e "s|@PG_PORT@|$PG_PORT|g" -e "s|@STATE@|$STATE|g" \
    -e "s|@QUEUE_TIMEOUT_S@|$QUEUE_TIMEOUT_S|g" tools/farm/buildgrid.yml.in > "$STATE/buildgrid.yml"
  mkdir -p "$STATE/cas"
  start_bg server "$VENV/bin/bgd" server start "$STATE/buildgrid.yml"
  wait_for "$START_BOUND_S" "BuildGrid server on 127.0.0.1:$PORT" port_open "$PORT"
  echo "farm: BuildGrid $("$VENV/bin/pip" show buildgrid 2>/dev/null | sed -n 's/^Version: //p') on 127.0.0.1:$PORT (queue timeout ${QUEUE_TIMEOUT_S}s)"
  start_worker cpu-worker cpu-build,cpu-x86_64-v3 2
  start_worker gpu-worker gpu-h200 1
  echo "farm: workers cpu-worker (Pool=cpu-build,cpu-x86_64-v3) and gpu-worker (Pool=gpu-h200) are up"
  echo "farm: started in $((SECONDS - t0)) s; state and logs in $STATE"
}

cmd_stop() {
  for name in gpu-worker cpu-worker server; do stop_one "$name"; done
  if [ -f "$STATE/pg/postmaster.pid" ]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$STATE/pg" -m fast -w -t 30 stop >/dev/null 2>&1 || true
    echo "farm: stopped PostgreSQL"
  fi
  if [ "${1:-}" = "--purge" ]; then rm -rf "$STATE"; echo "farm: removed $STATE"; fi
}

cmd_status() {
  for name in server cpu-worker gpu-worker; do
    if alive "$name"; then echo "$name: running (pid $(cat "$STATE/$name.pid"))"; else echo "$name: stopped"; fi
  done
  if [ -f "$STATE/pg/postmaster.pid" ]; then echo "postgres: running"; else echo "postgres: stopped"; fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) shift; cmd_stop "$@" ;;
  stop-worker) [ -n "${2:-}" ] || die "stop-worker NAME"; stop_one "$2" ;;
  status) cmd_status ;;
  *) die "usage: tools/farm/farm.sh start|stop [--purge]|stop-worker NAME|status" ;;
esac
