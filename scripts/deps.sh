#!/usr/bin/env bash
# scripts/deps.sh — installs the named Debian packages that are missing, and
# nothing else. Usage: scripts/deps.sh PACKAGE...
#
# Runs apt-get (with one `apt-get update` first) only when something is
# missing; prints what it installs. Needs root (or sudo) only in that case.
set -euo pipefail

missing=()
for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "deps: missing packages (${missing[*]}) and not root; install them or run as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
