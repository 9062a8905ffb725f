#!/usr/bin/env bash
# The compose e2e run (tests/e2e/run.sh STAGE) where Docker and debootstrap are usable;
# elsewhere it says why and skips, except under CI=true, where it fails. SKIP_E2E=1 skips
# it outside CI (a quicker local `make check`).
#   scripts/e2e.sh [all|build|up]
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
if [[ ${CI:-} != true && ${SKIP_E2E:-} == 1 ]]; then
  echo "e2e $stage: skipped (SKIP_E2E=1)"
elif docker info >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then
  exec tests/e2e/run.sh "$stage"
elif [[ ${CI:-} == true ]]; then
  echo "e2e $stage: Docker engine or debootstrap not usable under CI=true" >&2
  exit 1
else
  echo "e2e $stage: skipped (no usable Docker engine or debootstrap here; make infra sets them up)"
fi
