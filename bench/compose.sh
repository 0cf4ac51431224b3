#!/usr/bin/env bash
# compose/ end to end on this machine (not in the default test run: ~5 minutes).
# Docker as /work/shared/compose-here/ sets it up: no Docker Hub, no bridge network, images from a
# debootstrap base, host networking, loopback only. Redis on its own port (never the host's 6379)
# under its own project name. Checks: every service healthy; a note searchable; --scale
# embedder=3 with all three taking jobs; kill -9 of the indexer's process -> a new note
# searchable again; Redis restarted -> nothing lost; the stack stopped within docker's 10 s, none killed.
# Prints one JSON object.
#   bash bench/compose.sh     KEEP=1 leaves the stack and image; COMPOSE_HERE_HOME picks setup.sh's folder
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
HERE=${COMPOSE_HERE:-$ROOT/../shared/compose-here}
eval "$(bash "$HERE/setup.sh")"
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-memoryd-bench}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export MEMORYD_REDIS_PORT=${MEMORYD_REDIS_PORT:-$(free_port)} MEMORYD_PORT=${MEMORYD_PORT:-$(free_port)}
[ "$MEMORYD_REDIS_PORT" != 6379 ] || { echo "refusing port 6379: the machine's own Redis" >&2; exit 2; }
export MEMORYD_REDIS_PASSWORD=$(/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(16))')
export BASE_IMAGE=local/debian-python:bookworm REDIS_IMAGE=local/debian-python:bookworm WHEELS=compose/wheels
export MEMORYD_UID=${MEMORYD_UID:-1000} MEMORYD_GID=${MEMORYD_GID:-1000} MEMORYD_TAG=bench
WORK=$(mktemp -d /tmp/memoryd-compose.XXXXXX)
export MEMORYD_WORKSPACES=$WORK/workspaces
mkdir -p "$MEMORYD_WORKSPACES/main"  # empty, as a fresh bind mount: the watcher fills it
chown -R "$MEMORYD_UID:$MEMORYD_GID" "$MEMORYD_WORKSPACES"
DC=("$COMPOSE" -f compose/docker-compose.yml)
LOG=$WORK/bench.log
say() { echo "[compose.sh] $*" >&2; }
ms() { date +%s%3N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1000}'; }
# until SECONDS DESCRIPTION CMD...: run CMD every 0.5 s until it succeeds; fail after SECONDS.
until_ok() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then say "FAILED: $what within ${limit}s"; "${DC[@]}" ps >&2; exit 1; fi
    sleep 0.5
  done
}
cleanup() {
  [ -n "${KEEP:-}" ] && { say "kept: project $COMPOSE_PROJECT_NAME, work dir $WORK"; return; }
  "${DC[@]}" down -v >>"$LOG" 2>&1 || true
  docker rmi "memoryd:$MEMORYD_TAG" >>"$LOG" 2>&1 || true
  docker image prune -f --filter label=memoryd.stage=build >>"$LOG" 2>&1 || true  # the wheelhouse stage
  rm -rf "$WORK" "$ROOT/compose/wheels"
}
trap cleanup EXIT

say "wheels (Debian's /usr/bin/python3, the base image's 3.11.2)"
/usr/bin/python3 -m pip wheel -q . -w compose/wheels --find-links compose/wheels >>"$LOG" 2>&1
t=$(ms)
say "build and start (project $COMPOSE_PROJECT_NAME, Redis on 127.0.0.1:$MEMORYD_REDIS_PORT, query on :$MEMORYD_PORT)"
"${DC[@]}" build >>"$LOG" 2>&1
build_s=$(secs "$t" "$(ms)")
t=$(ms)
"${DC[@]}" up -d >>"$LOG" 2>&1

containers() { docker ps -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" "$@"; }
all_healthy() {  # every container of the project is running and healthy
  local ids; ids=$(containers -a); [ -n "$ids" ] || return 1
  for id in $ids; do [ "$(docker inspect -f '{{.State.Health.Status}}' "$id")" = healthy ] || return 1; done
}
until_ok 300 "every service healthy" all_healthy
healthy_s=$(secs "$t" "$(ms)")
services=$(containers -a | wc -l)  # Redis and the six memoryd services

service() { containers --filter "label=com.docker.compose.service=$1" | head -1; }
search_has() { docker exec "$(service query)" memoryd search "$1" --agent main --json 2>>"$LOG" | grep -q "$1"; }
note() { printf -- '- %s\n' "$2" >>"$MEMORYD_WORKSPACES/main/memory/$1.md"; }
until_ok 60 "the standard files in the empty workspace" test -f "$MEMORYD_WORKSPACES/main/AGENTS.md"
owner=$(stat -c %u "$MEMORYD_WORKSPACES/main/AGENTS.md")
t=$(ms); note 2026-12-01 "the first note says zebrafinch4471"
until_ok 120 "the first note searchable" search_has zebrafinch4471
first_note_s=$(secs "$t" "$(ms)")

say "scale the embedders to 3"
"${DC[@]}" up -d --no-recreate --scale embedder=3 >>"$LOG" 2>&1
until_ok 300 "three healthy embedders and every other service" all_healthy
rcli() { docker exec "$(service redis)" redis-cli -p "$MEMORYD_REDIS_PORT" "$@"; }  # REDISCLI_AUTH is set there
embedders_working() {  # live embed workers (heartbeat key present) that finished a job since the scale
  local n=0
  for key in $(rcli --raw keys 'rq:worker:memoryd-embed.*'); do
    local name=${key#rq:worker:} ident=${key#rq:worker:memoryd-embed.}
    [ "$(rcli --raw exists "memoryd:alive:$ident")" = 1 ] || continue
    [ "$(rcli --raw hget "$key" successful_job_count)" -gt 0 ] 2>/dev/null && n=$((n + 1))
  done
  echo "$n"
}
i=0; t=$(ms); deadline=$(( $(date +%s) + 180 ))
while [ "$(embedders_working)" -lt 3 ]; do  # a new file a second until each replica has embedded some
  [ "$(date +%s)" -lt "$deadline" ] || { say "FAILED: three embedders taking jobs"; exit 1; }
  i=$((i + 1)); printf '# note %s\n\nscaled embedding %s of the harbour ledger\n' "$i" "$i" \
    >"$MEMORYD_WORKSPACES/main/memory/scale-$i.md"
  sleep 1
done
embedders=$(embedders_working); scale_files=$i; scale_s=$(secs "$t" "$(ms)")

say "kill -9 of the indexer's process"
indexer=$(service indexer)
kill -9 "$(docker inspect -f '{{.State.Pid}}' "$indexer")"
t=$(ms); note 2026-12-02 "written after the kill: quokka5530"
until_ok 60 "a note written after kill -9 of the indexer searchable" search_has quokka5530
kill_s=$(secs "$t" "$(ms)")
restarts=$(docker inspect -f '{{.RestartCount}}' "$indexer")
until_ok 60 "the indexer healthy again" all_healthy
indexer_healthy_s=$(secs "$t" "$(ms)")

say "restart Redis with notes in flight"
note 2026-12-03 "written as Redis restarts: narwhal6642"
t=$(ms); "${DC[@]}" restart -t 10 redis >>"$LOG" 2>&1
note 2026-12-03 "written while Redis restarts: ibis7753"
both_notes() { search_has narwhal6642 && search_has ibis7753; }
until_ok 120 "both notes searchable after the Redis restart" both_notes
redis_s=$(secs "$t" "$(ms)")
lost=0  # a note not found within 30 s (one search may meet the query service reconnecting)
for word in zebrafinch4471 quokka5530 narwhal6642 ibis7753; do
  ( until_ok 30 "$word searchable" search_has "$word" ) || lost=$((lost + 1))
done
until_ok 120 "every service healthy after the Redis restart" all_healthy

say "stop the stack (SIGTERM, SIGKILL after 10 s)"
t=$(ms); "${DC[@]}" stop -t 10 >>"$LOG" 2>&1
stop_s=$(secs "$t" "$(ms)")
killed=()  # the services whose containers did not stop within the 10 s and were killed (exit code 137)
for id in $(containers -a); do
  [ "$(docker inspect -f '{{.State.ExitCode}}' "$id")" != 137 ] \
    || killed+=("\"$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}' "$id")\"")
done

cat <<EOF
{"buildSeconds": $build_s, "services": $services, "allHealthySeconds": $healthy_s, "workspaceOwnerUid": $owner,
 "firstNoteSearchableSeconds": $first_note_s,
 "embeddersTakingJobs": $embedders, "scaleFilesWritten": $scale_files, "scaleSeconds": $scale_s,
 "kill9IndexerNoteSearchableSeconds": $kill_s, "kill9IndexerHealthySeconds": $indexer_healthy_s,
 "indexerRestarts": $restarts,
 "redisRestartNotesSearchableSeconds": $redis_s, "notesLost": $lost,
 "stopSeconds": $stop_s, "killedAtStop": [$(IFS=,; echo "${killed[*]}")]}
EOF
