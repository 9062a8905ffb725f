#!/usr/bin/env bash
# Infrastructure the tests need on a fresh Debian machine (CI and developers alike):
# bubblewrap (local sandbox), Docker engine (docker sandbox), debootstrap (base image),
# chromium (the console tests drive Debian's browser with Playwright; no `playwright install`),
# prometheus and promtool (the health panels' queries and alert rules run on a real one),
# libnuma (vLLM's CPU kernels).
# Idempotent: what is there already is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# vLLM's CPU build (.venv-vllm, the inference service) links libnuma.
ldconfig -p | grep -q 'libnuma\.so\.1 ' || missing+=(libnuma1)
command -v g++ >/dev/null 2>&1 || missing+=(g++)  # vLLM compiles the model (torch.compile)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  # Our own daemon for this machine; it outlives the script on purpose (tests use it).
  nohup dockerd >/tmp/artfleet-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { tail -n 20 /tmp/artfleet-dockerd.log >&2; exit 1; }
fi

scripts/build_base_image.sh
