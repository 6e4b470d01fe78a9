#!/usr/bin/env bash
# Make the local base image `localhost/mirrorgate-base:bookworm` for building the Dockerfile where no
# registry is reachable (CI): Debian bookworm's minimal root file system from Debian's own packages
# (debootstrap), with Debian's Python 3.11, venv and pip, imported into podman's image store.
#
#   scripts/image_base.sh                 # once; later runs reuse the cache and return at once
#   buildah bud --build-arg BASE=localhost/mirrorgate-base:bookworm -t mirrorgate:0.1.0 .
#
# The root file system is cached as a tarball in $MIRRORGATE_IMAGE_CACHE (default
# /var/tmp/mirrorgate-image), so only the first run debootstraps; the image is imported from the
# tarball when the image store does not have it. Needs root, debootstrap and podman.
# $DEBIAN_MIRROR overrides the mirror (default: the first bookworm mirror of the apt sources).
set -euo pipefail

IMAGE=${MIRRORGATE_BASE_IMAGE:-localhost/mirrorgate-base:bookworm}
CACHE=${MIRRORGATE_IMAGE_CACHE:-/var/tmp/mirrorgate-image}
TARBALL=$CACHE/base-bookworm.tar
# What the Dockerfile's stages need beyond minbase: `python -m venv` (python-is-python3,
# python3-venv: venv with pip), TLS roots for pip, and groupadd/useradd (passwd is in minbase).
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates

step() { printf 'image_base: %s\n' "$*" >&2; }
elapsed() { echo "$(($(date +%s) - $1))s"; }

if podman image exists "$IMAGE"; then
  step "$IMAGE is in the image store"
  exit 0
fi

if [[ ! -s $TARBALL ]]; then
  mirror=${DEBIAN_MIRROR:-}
  if [[ -z $mirror ]]; then
    mirror=$(grep -hE '^[[:space:]]*(URIs:|deb[[:space:]])' /etc/apt/sources.list \
      /etc/apt/sources.list.d/* 2>/dev/null | grep -Eo 'https?://[^ ]+/debian/?( |$)' \
      | head -n 1 | tr -d ' ' || true)
    mirror=${mirror:-http://deb.debian.org/debian}
  fi
  mkdir -p "$CACHE"
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  started=$(date +%s)
  step "debootstrap bookworm from $mirror (a few minutes, once)"
  if ! debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$mirror" \
    >"$CACHE/debootstrap.log" 2>&1; then
    tail -n 20 "$CACHE/debootstrap.log" >&2
    step "debootstrap failed; the whole log is $CACHE/debootstrap.log"
    exit 1
  fi
  # An image needs no package lists, apt caches or documentation.
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
  step "debootstrap took $(elapsed "$started")"
  started=$(date +%s)
  tar -C "$rootfs" --numeric-owner -cf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
  step "cached the root file system in $TARBALL ($(du -h "$TARBALL" | cut -f1), $(elapsed "$started"))"
fi

started=$(date +%s)
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$TARBALL" "$IMAGE" >/dev/null
step "imported $IMAGE from $TARBALL in $(elapsed "$started")"
