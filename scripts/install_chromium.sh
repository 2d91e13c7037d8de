#!/usr/bin/env bash
# Install Chromium, which tests/cli/test_report_browser.py runs headless to load the HTML
# page 'planner report' writes. Idempotent: does nothing when chromium (or
# chromium-browser) is already on PATH. Used by CI (.ci/run); needs a Debian or Ubuntu
# archive with a 'chromium' package and root or sudo.
set -euo pipefail

for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then
    echo "chromium is already installed: $(command -v "$name")"
    exit 0
  fi
done

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium.sh: no apt-get here; install chromium with your package manager" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi

# Another apt or dpkg run (unattended upgrades, a parallel install) holds the lock: wait
# for it rather than fail.
apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y)

if ! apt-cache show chromium >/dev/null 2>&1; then
  "${apt_get[@]}" update
fi
if ! apt-cache show chromium >/dev/null 2>&1; then
  echo "install_chromium.sh: this distribution's archive has no chromium package;" \
       "install Chromium another way and run this script again" >&2
  exit 1
fi
"${apt_get[@]}" install --no-install-recommends chromium
chromium --version
