#!/bin/sh
# glslc of the pinned Debian package, run with the libshaderc.so.1 unpacked next to it: the host
# has no libshaderc, and LD_LIBRARY_PATH set here reaches glslc only, not the compilers.
root=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$root/usr/bin/glslc" "$@"
