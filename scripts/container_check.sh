#!/usr/bin/env bash
# Build the container image with podman and run it for real: /health, one chat request
# answered by the managed llama-server, then a clean stop on SIGTERM.
#
# Images cannot be pulled on the project's machines, so the base is a Debian 12 made
# here with debootstrap (localhost/debian-base:bookworm, built once) and passed to the
# Dockerfile as BASE_IMAGE. The first build compiles llama.cpp (15-30 min on 2 cores);
# later runs reuse podman's layer cache. Too slow for CI: docs/container.md keeps the
# output of the last run. Idempotent; needs root (apt-get, podman).
#
# Usage: bash scripts/container_check.sh
# Environment: IMAGE (default localhost/specproxy:check), BASE (default
# localhost/debian-base:bookworm), HEALTH_TIMEOUT (s, default 180), STOP_TIMEOUT
# (s, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/specproxy:check}
BASE=${BASE:-localhost/debian-base:bookworm}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-180}
STOP_TIMEOUT=${STOP_TIMEOUT:-30}

# The sandbox refuses crun's rlimits and cgroup v2 hybrid mode: runc + cgroupfs and
# lowered ulimits. RUN steps use the host network (PyPI is reachable that way).
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

step() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
name=""  # the container, once started
fail() {
  if [ -n "$name" ] && "${PODMAN[@]}" container exists "$name" 2>/dev/null; then
    echo "the container's log, last lines:" >&2
    "${PODMAN[@]}" logs "$name" 2>&1 | tail -30 >&2
  fi
  printf 'container check: FAILED: %s\n' "$*" >&2
  exit 1
}
ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(date +%s)

step "tools: podman, runc, debootstrap, curl"
missing=()
for tool in podman runc debootstrap curl; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (Debian's packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
podman --version
runc --version | head -1

step "base image $BASE"
if "${PODMAN[@]}" image exists "$BASE"; then
  echo "present"
else
  rootfs=$(mktemp -d /var/tmp/debian-base.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "debootstrap --variant=minbase bookworm into $rootfs"
  t0=$(date +%s)
  # debootstrap's default mirror: Debian's own, as apt uses on these machines.
  debootstrap --variant=minbase bookworm "$rootfs" >/var/tmp/debootstrap.log 2>&1 \
    || { tail -20 /var/tmp/debootstrap.log; fail "debootstrap (log: /var/tmp/debootstrap.log)"; }
  # Drop apt's downloaded .debs: the image does not need them.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages
  # The CAs this machine added to its own trust store (here PyPI is reached through an
  # egress proxy with its own CA): ca-certificates, once the Dockerfile installs it,
  # adds them to the image's bundle, which Debian's pip uses.
  shopt -s nullglob
  local_cas=(/usr/local/share/ca-certificates/*.crt)
  shopt -u nullglob
  if [ ${#local_cas[@]} -gt 0 ]; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp "${local_cas[@]}" "$rootfs/usr/local/share/ca-certificates/"
    echo "with this machine's local CAs: ${local_cas[*]##*/}"
  fi
  tar -C "$rootfs" -c . | "${PODMAN[@]}" import \
    --change 'CMD ["/bin/bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$BASE"
  rm -rf "$rootfs"
  trap - EXIT
  echo "built in $(($(date +%s) - t0)) s"
fi
# shellcheck disable=SC2016  # expanded inside the container
"${PODMAN[@]}" run --rm "${ULIMITS[@]}" --network=host "$BASE" \
  sh -c '. /etc/os-release; echo "$PRETTY_NAME"; command -v python3 || echo "no python3 (the Dockerfile installs it)"'

step "build $IMAGE (BASE_IMAGE=$BASE; nice -n 19)"
t0=$(date +%s)
# --format docker keeps the HEALTHCHECK (the OCI format has none).
nice -n 19 "${PODMAN[@]}" build "${ULIMITS[@]}" --network=host --format docker \
  --build-arg BASE_IMAGE="$BASE" -t "$IMAGE" .
build_s=$(($(date +%s) - t0))
echo "build took ${build_s} s"
"${PODMAN[@]}" image inspect "$IMAGE" --format 'image {{.Id}} size {{.Size}} bytes, user {{.Config.User}}, cmd {{.Config.Cmd}}' \
  | cut -c1-200

# A free port on the loopback; the container publishes its 8000 there.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
cleanup() {
  if "${PODMAN[@]}" container exists "$name" 2>/dev/null; then
    "${PODMAN[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

name="specproxy-check-$$"
step "run $IMAGE as $name, published on $url (no CEREBRAS_API_KEY: local answers)"
# The image's own command, with DEBUG so llama-server's own lines (its shutdown
# included) reach the log. No systemd here to time the HEALTHCHECK (podman complains
# that it cannot reach it, which is dropped): it is run by hand below.
"${PODMAN[@]}" run -d --name "$name" "${ULIMITS[@]}" -p "127.0.0.1:$port:8000" \
  --health-interval=disable "$IMAGE" python main.py --config config.yaml --log-level DEBUG \
  2> >(grep -v 'unable to get systemd connection' >&2)
t0=$(ms)

step "wait for $url/health (up to ${HEALTH_TIMEOUT} s)"
until health=$(curl -fsS --max-time 2 "$url/health" 2>/dev/null); do
  state=$("${PODMAN[@]}" inspect "$name" --format '{{.State.Status}}')
  [ "$state" = running ] || fail "container is $state before /health answered"
  [ $(($(ms) - t0)) -lt $((HEALTH_TIMEOUT * 1000)) ] \
    || fail "/health not answering after ${HEALTH_TIMEOUT} s"
  sleep 0.5
done
echo "/health after $(($(ms) - t0)) ms: $health"
echo "processes in the container:"
"${PODMAN[@]}" top "$name" pid ppid args | cut -c1-160
"${PODMAN[@]}" top "$name" args | grep -q '[l]lama-server' || fail "no llama-server process in the container"
# The image's own HEALTHCHECK command, run once inside the container.
"${PODMAN[@]}" healthcheck run "$name" || fail "the image's HEALTHCHECK did not pass"
echo "HEALTHCHECK: healthy"

step "one chat request (X-Routing-Strategy: local_only)"
body='{"messages":[{"role":"user","content":"What is the capital of France? Answer in one short sentence."}],"max_tokens":30,"temperature":0}'
answer=$(curl -sS --max-time 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -H 'X-Routing-Strategy: local_only' -d "$body") || fail "chat request failed"
echo "$answer" | python3 -c '
import json, sys
answer = json.load(sys.stdin)
content = answer["choices"][0]["message"]["content"]
print("content:   ", json.dumps(content))
print("model_used:", answer.get("model_used"))
print("usage:     ", answer.get("usage"))
if not (content or "").strip():
    sys.exit("empty content")
if answer.get("model_used") != "local":
    sys.exit("model_used is not local")
' || { echo "$answer"; fail "unexpected chat answer"; }

step "SIGTERM, then wait up to ${STOP_TIMEOUT} s for the exit"
t0=$(ms)
"${PODMAN[@]}" kill --signal TERM "$name" >/dev/null
until [ "$("${PODMAN[@]}" inspect "$name" --format '{{.State.Status}}')" != running ]; do
  [ $(($(ms) - t0)) -lt $((STOP_TIMEOUT * 1000)) ] \
    || fail "still running ${STOP_TIMEOUT} s after SIGTERM"
  sleep 0.2
done
code=$("${PODMAN[@]}" inspect "$name" --format '{{.State.ExitCode}}')
echo "exited with code $code, $(($(ms) - t0)) ms after SIGTERM"
log=$("${PODMAN[@]}" logs "$name" 2>&1)
echo "the log's INFO and higher lines, and llama-server's last ones:"
echo "$log" | grep -v ' DEBUG ' | cut -c1-200
echo "..."
echo "$log" | grep '\[local\]' | tail -4 | cut -c1-200
[ "$code" = 0 ] || fail "exit code $code, not 0"
for line in "Shutting down" "Application shutdown complete" "Finished server process"; do
  grep -qF "$line" <<<"$log" || fail "the log lacks uvicorn's \"$line\""
done
# llama-server's own last words on SIGTERM, read from its pipe by the proxy.
grep -q '\[local\].*cleaning up before exit' <<<"$log" \
  || fail "the log does not show llama-server shutting down"
if grep -qE 'ignored SIGTERM|Traceback|exited with code|restarting llama-server' <<<"$log"; then
  fail "the log shows an unclean stop"
fi

echo
echo "image build ${build_s} s, whole check $(($(date +%s) - start)) s"
echo "container check: OK"
