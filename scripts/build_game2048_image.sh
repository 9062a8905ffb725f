#!/usr/bin/env bash
# Build the `game-2048` MCP environment's sandbox image (scripts/build_mcp_image.sh).
#
#   scripts/build_game2048_image.sh [--tag TAG] [--server FILE.py] [--module MODULE] [--force]
#
# --server: the server module's file (default: this repo's 2048 server,
#   services/rollout/artfleet_rollout/bundled/mcp_2048.py, with its game module game2048.py
#   beside it; the console script `artfleet-mcp-2048` runs the same main). It must import
#   only the stdlib, `mcp` and its neighbours, and run stdio when executed as a script;
#   with --module the image runs `python3 -m MODULE` instead.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="artfleet/mcp-2048:latest"
SERVER="services/rollout/artfleet_rollout/bundled/mcp_2048.py"
GAME="services/rollout/artfleet_rollout/bundled/game2048.py"
MODULE=""
EXTRA=()
while (($#)); do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --server) SERVER="$2"; shift 2 ;;
    --module) MODULE="$2"; shift 2 ;;
    --force) EXTRA+=(--force); shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
ARGS=(--tag "$TAG" --server "$SERVER" --file "$GAME")
if [[ -n $MODULE ]]; then
  ARGS+=(--cmd "python3 -m ${MODULE##*.}")
fi
exec scripts/build_mcp_image.sh "${ARGS[@]}" "${EXTRA[@]}"
