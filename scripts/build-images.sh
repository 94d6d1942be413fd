#!/usr/bin/env bash
# Build the container images the demo and the tests use, without a registry (`make images`):
#   localhost/rota/busybox:1    a static busybox: sh and the usual tools
#   localhost/rota/python:3.11  Debian's python3.11 (with its standard library) and the same busybox
# Each rootfs is made from Debian packages (busybox-static on this host, the python debs fetched with
# `apt-get download` into var/images/debs) and imported with `podman import`. An image already present is
# kept; ROTA_IMAGES_REBUILD=1 builds it again. Podman runs with deploy/podman/containers.conf.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}"
BUILD=var/images
PYTHON_DEBS=(libc6 zlib1g libexpat1 libffi8 libbz2-1.0 liblzma5 libssl3 libuuid1 libcrypt1
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib)

have() { [ "${ROTA_IMAGES_REBUILD:-0}" != 1 ] && podman image exists "$1"; }

busybox_root() {  # $1: directory that gets /bin/sh and every busybox applet
  mkdir -p "$1/bin" "$1/tmp" "$1/etc"
  chmod 1777 "$1/tmp"
  cp /bin/busybox "$1/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || [ -e "$1/bin/$applet" ] || ln -s busybox "$1/bin/$applet"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$1/etc/passwd"
  echo 'root:x:0:' >"$1/etc/group"
}

import() {  # $1: rootfs directory, $2: image name
  tar -C "$1" -c . | podman import --quiet --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'WORKDIR /' - "$2" >/dev/null
  echo "images: built $2"
}

command -v podman >/dev/null || { echo "images: podman is not installed (scripts/system-packages.sh)" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "images: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }

if have localhost/rota/busybox:1; then
  echo "images: localhost/rota/busybox:1 present"
else
  rm -rf "$BUILD/busybox" && busybox_root "$BUILD/busybox"
  import "$BUILD/busybox" localhost/rota/busybox:1
fi

if have localhost/rota/python:3.11; then
  echo "images: localhost/rota/python:3.11 present"
else
  mkdir -p "$BUILD/debs"
  missing=()
  for deb in "${PYTHON_DEBS[@]}"; do
    compgen -G "$BUILD/debs/${deb}_*.deb" >/dev/null || missing+=("$deb")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    (cd "$BUILD/debs" && apt-get download -qq "${missing[@]}" 2>/dev/null) ||
      (cd "$BUILD/debs" && apt-get update -qq && apt-get download -qq "${missing[@]}")
  fi
  rm -rf "$BUILD/python" && mkdir -p "$BUILD/python"
  for deb in "$BUILD"/debs/*.deb; do dpkg-deb -x "$deb" "$BUILD/python"; done
  busybox_root "$BUILD/python"
  ln -sf python3.11 "$BUILD/python/usr/bin/python3"
  ln -sf python3 "$BUILD/python/usr/bin/python"
  import "$BUILD/python" localhost/rota/python:3.11
fi

# localhost/rota/serve:1: the python image with scripts/images/serve.py at /opt/rota/serve.py (the demo's
# inference server); rebuilt whenever the script changes (its hash is the image's label rota.serve).
SERVE_HASH=$(sha256sum scripts/images/serve.py | cut -c1-16)
if [ "${ROTA_IMAGES_REBUILD:-0}" != 1 ] && podman image exists localhost/rota/serve:1 &&
  [ "$(podman image inspect --format '{{index .Labels "rota.serve"}}' localhost/rota/serve:1)" = "$SERVE_HASH" ]; then
  echo "images: localhost/rota/serve:1 present"
else
  podman rm --force --ignore rota-serve-build >/dev/null
  podman create --quiet --name rota-serve-build localhost/rota/python:3.11 /bin/true >/dev/null
  rm -rf "$BUILD/serve" && mkdir -p "$BUILD/serve/rota" && cp scripts/images/serve.py "$BUILD/serve/rota/serve.py"
  chmod -R a+rX "$BUILD/serve"
  podman cp "$BUILD/serve/." rota-serve-build:/opt
  podman commit --quiet --change "LABEL rota.serve=$SERVE_HASH" --change 'CMD ["python3", "/opt/rota/serve.py"]' \
    rota-serve-build localhost/rota/serve:1 >/dev/null
  podman rm --force rota-serve-build >/dev/null
  echo "images: built localhost/rota/serve:1"
fi
