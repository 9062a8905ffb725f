#!/usr/bin/env bash
# The test command (`make check`): proto drift, lint, types, every test, then the compose
# e2e run. The e2e's image builds (tests/e2e/run.sh build, several minutes) start first, in
# the background with their own log, while the other checks run; the e2e run at the end
# uses the images. A failed build fails the check and shows its log.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
mkdir -p .artfleet/e2e
BUILD_LOG=.artfleet/e2e/build.log

# Its own session (setsid), so that an early failure stops the whole build, docker CLI included.
setsid scripts/e2e.sh build >"$BUILD_LOG" 2>&1 &
build_pid=$!
echo "== e2e image builds started in the background (log: $BUILD_LOG)"
stop_build() {
  if kill -0 "$build_pid" 2>/dev/null; then
    kill -TERM -- "-$build_pid" 2>/dev/null || true
    wait "$build_pid" 2>/dev/null || true
  fi
}
trap stop_build EXIT

for target in proto-check lint typecheck test; do
  "$MAKE" --no-print-directory "$target" || exit 1
done

build_start=$SECONDS
wait "$build_pid"
build_rc=$?
echo "== e2e image builds: exit $build_rc (waited $((SECONDS - build_start))s for them)"
if ((build_rc != 0)); then
  echo "== the e2e image builds failed; their log ($BUILD_LOG):" >&2
  cat "$BUILD_LOG" >&2
  exit 1
fi
tail -n 20 "$BUILD_LOG"
scripts/e2e.sh up
