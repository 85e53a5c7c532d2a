#!/usr/bin/env bash
# Installs what Lanes needs on a fresh Debian/Ubuntu host: Bazel (Debian's bazel-bootstrap 4.2.3),
# CMake, Ninja, a C/C++ compiler, patch, binutils and Python 3 with pip; for tests, Chromium. Idempotent.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need=()
# chromium: test-only, for //tools/matrix:dashboard_test (the operator dashboard in headless Chromium).
for pkg in bazel-bootstrap cmake ninja-build g++ patch binutils python3 python3-pip chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup_host: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Debian's /usr/bin/bazel wrapper runs /usr/bin/bazel-<.bazelversion>; bazel-bootstrap installs
# /usr/bin/bazel-4. Link the exact version after checking that it is the one packaged.
version=$(dpkg-query -W -f='${Version}' bazel-bootstrap)
case "$version" in
  4.2.3+*) ;;
  *) echo "setup_host: bazel-bootstrap is $version; Lanes pins Bazel 4.2.3 (.bazelversion)" >&2; exit 1 ;;
esac
if [ ! -x /usr/bin/bazel-4.2.3 ]; then $SUDO ln -sf bazel-4 /usr/bin/bazel-4.2.3; fi
echo "setup_host: bazel-bootstrap $version, $(cmake --version | head -1), ninja $(ninja --version), $(c++ --version | head -1)"
