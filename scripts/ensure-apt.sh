#!/usr/bin/env bash
# Install the named Debian packages unless they are already installed. Idempotent and quiet
# when nothing is missing; uses sudo when not root.
set -euo pipefail
missing=()
# PySpark needs a Java runtime (17 is what Spark 4 supports); install one only if none is on PATH.
if ! command -v java >/dev/null 2>&1; then
  missing+=("openjdk-17-jre-headless")
fi
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Packaged daemons must not keep running in the background: tests start their own.
for svc in redis-server prometheus; do
  if [[ " ${missing[*]} " == *" $svc "* ]]; then
    (service "$svc" stop || systemctl stop "$svc") >/dev/null 2>&1 || true
  fi
done
if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
  (service etcd stop || systemctl stop etcd) >/dev/null 2>&1 || true
fi
