#!/usr/bin/env bash
# Install clang-19, which planner.lower.metal_emulator uses to check and run Metal
# Shading Language on Linux. Idempotent: does nothing when clang-19 is already on PATH.
# Used by CI (.ci/run); needs Debian 12 / Ubuntu 24.04 or newer (their archives carry
# clang-19) and root or sudo.
set -euo pipefail

if command -v clang-19 >/dev/null 2>&1; then
  echo "clang-19 is already installed: $(command -v clang-19)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_clang.sh: no apt-get here; install clang-19 with your package manager" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi

# Another apt or dpkg run (unattended upgrades, a parallel install) holds the lock: wait
# for it rather than fail.
apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y)

if ! apt-cache show clang-19 >/dev/null 2>&1; then
  "${apt_get[@]}" update
fi
if ! apt-cache show clang-19 >/dev/null 2>&1; then
  echo "install_clang.sh: this distribution's archive has no clang-19 package;" \
       "add https://apt.llvm.org (llvm.sh 19) and run this script again" >&2
  exit 1
fi
# clang-19 depends on binutils and libc6-dev, which the emulator needs to link kernels.
"${apt_get[@]}" install --no-install-recommends clang-19
clang-19 --version | head -n 1
