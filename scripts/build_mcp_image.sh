#!/usr/bin/env bash
# Build a sandbox image that runs an MCP stdio server, for `Sandbox.McpStdio` (the
# sandbox runs it as `docker run -i IMAGE`): FROM the base image (Debian's python3, no
# pip), plus the official `mcp` SDK installed from wheels this host downloads from PyPI
# (the image build itself needs no network), plus the server.
#
#   scripts/build_mcp_image.sh --tag TAG --server FILE.py [--file FILE]... [--base IMAGE]
#                              [--requirements "mcp==2.3.0 ..."] [--cmd "argv ..."] [--force]
#
# --server: the server's Python file, copied to /opt/mcp/app/ and run as the image's CMD
#   (`python3 /opt/mcp/app/FILE.py`); it may import the stdlib, `mcp` and --requirements.
# --file: more files beside it (helper modules the server imports).
# --cmd: replaces the CMD (e.g. "python3 -m my_server"; /opt/mcp/app is on PYTHONPATH).
#
# The game-2048 environment (console script `artfleet-mcp-2048`, one module written with
# the mcp SDK) is built with scripts/build_game2048_image.sh, a wrapper of this one.
set -euo pipefail

TAG=""
SERVER=""
FILES=()
BASE="artfleet/base:bookworm"
REQUIREMENTS="mcp==2.3.0"
CMD=""
FORCE=0
PYTHON="${PYTHON:-python3}"
while (($#)); do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --server) SERVER="$2"; shift 2 ;;
    --file) FILES+=("$2"); shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --requirements) REQUIREMENTS="$2"; shift 2 ;;
    --cmd) CMD="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -n $TAG && -n $SERVER ]] || { echo "--tag and --server are required (see --help)" >&2; exit 2; }
[[ -f $SERVER ]] || { echo "no server file $SERVER" >&2; exit 2; }
if [[ $FORCE == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG already exists (use --force to rebuild)"
  exit 0
fi
docker image inspect "$BASE" >/dev/null 2>&1 \
  || { echo "base image $BASE is missing: scripts/build_base_image.sh builds it" >&2; exit 1; }

CONTEXT="$(mktemp -d /tmp/artfleet-mcp-image.XXXXXX)"
trap 'rm -rf "$CONTEXT"' EXIT
mkdir -p "$CONTEXT/wheels" "$CONTEXT/app"
# The base image's python3 (Debian bookworm: CPython 3.11 on glibc, x86_64).
# shellcheck disable=SC2086
"$PYTHON" -m pip download --quiet --only-binary=:all: --python-version 3.11 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --dest "$CONTEXT/wheels" pip $REQUIREMENTS
cp "$SERVER" "${FILES[@]}" "$CONTEXT/app/"
if [[ -z $CMD ]]; then
  CMD="python3 /opt/mcp/app/$(basename "$SERVER")"
fi
CMD_JSON="$("$PYTHON" -c 'import json, shlex, sys; print(json.dumps(shlex.split(sys.argv[1])))' "$CMD")"
REQS_JSON="$("$PYTHON" -c 'import json, sys; print(" ".join(sys.argv[1:]))' $REQUIREMENTS)"

cat >"$CONTEXT/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY wheels /tmp/wheels
# pip runs from its own wheel (the base image has no pip); offline, from the wheels.
RUN python3 "\$(ls /tmp/wheels/pip-*.whl)/pip" install --no-cache-dir --no-index \\
      --find-links /tmp/wheels --target /opt/mcp/lib $REQS_JSON \\
    && rm -rf /tmp/wheels
COPY app /opt/mcp/app
ENV PYTHONPATH=/opt/mcp/lib:/opt/mcp/app PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /workspace
CMD $CMD_JSON
DOCKERFILE
docker build --quiet --tag "$TAG" "$CONTEXT" >/dev/null
echo "built $TAG (CMD $CMD_JSON)"
