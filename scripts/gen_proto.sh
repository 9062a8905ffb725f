#!/usr/bin/env bash
# The one way to generate Python from proto/: stubs plus .pyi type stubs, committed under
# src/artfleet/v1. `scripts/gen_proto.sh --check` fails when the committed code drifts.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/src"
if [[ "${1:-}" == "--check" ]]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  out="$tmp"
fi
mkdir -p "$out/artfleet/v1"
python -m grpc_tools.protoc -I "$root/proto" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$root"/proto/artfleet/v1/*.proto
# grpc_tools writes absolute imports (`from artfleet.v1 import x_pb2`), which resolve
# inside our package as it is.
touch "$out/artfleet/v1/__init__.py"
if [[ "${1:-}" == "--check" ]]; then
  if ! diff -r -x __pycache__ "$root/src/artfleet/v1" "$out/artfleet/v1"; then
    echo "generated code drifted from proto/: run scripts/gen_proto.sh and commit" >&2
    exit 1
  fi
  echo "generated code matches proto/"
fi
