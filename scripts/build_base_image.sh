#!/usr/bin/env bash
# Build a Debian base image without any registry: debootstrap a minimal bookworm root
# filesystem, add packages and extra CA certificates, then `docker import` it.
#
# Real deployments use a registry image (python:3.11-slim, a CUDA image); this path serves
# air-gapped clusters and our CI, where no image can be pulled.
#
#   scripts/build_base_image.sh [--tag TAG] [--packages "pkg ..."] [--ca-dir DIR]
#                               [--suite SUITE] [--force]
#
# --ca-dir: every *.crt there is trusted inside the image (default: the host's
#   /usr/local/share/ca-certificates, so a corporate TLS proxy keeps working).
# The image has a non-root user `sandbox` (uid/gid 1000) owning /workspace.
set -euo pipefail

TAG="artfleet/base:bookworm"
SUITE="bookworm"
PACKAGES="python3 python3-pytest git ca-certificates bash procps"
CA_DIR="/usr/local/share/ca-certificates"
FORCE=0
while (($#)); do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --packages) PACKAGES="$2"; shift 2 ;;
    --ca-dir) CA_DIR="$2"; shift 2 ;;
    --suite) SUITE="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

for tool in debootstrap docker; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install $tool)" >&2; exit 1; }
done
if [[ $FORCE == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG already exists (use --force to rebuild)"
  exit 0
fi

ROOT="$(mktemp -d /tmp/artfleet-rootfs.XXXXXX)"
cleanup() { rm -rf --one-file-system "$ROOT"; }
trap cleanup EXIT

# No mirror argument: debootstrap's default mirror, or the host's apt proxy settings.
debootstrap --variant=minbase --include="${PACKAGES// /,}" "$SUITE" "$ROOT" >/tmp/debootstrap.log 2>&1 \
  || { tail -n 30 /tmp/debootstrap.log >&2; exit 1; }

if [[ -d $CA_DIR ]] && compgen -G "$CA_DIR/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp "$CA_DIR"/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
fi

chroot "$ROOT" groupadd --gid 1000 sandbox
chroot "$ROOT" useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home \
  --shell /bin/bash sandbox
install -d -m 0755 -o 1000 -g 1000 "$ROOT/workspace"
# Keep the image small: package caches and docs are not needed at run time.
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* \
  "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/log/*.log

tar --numeric-owner -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["/bin/bash"]' \
  - "$TAG" >/dev/null
echo "built $TAG"
