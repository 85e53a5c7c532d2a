"""What every cmake() stage of a lane shares, with either rule set (the stand-in or rules_foreign_cc)."""

# The lanes compile with llama.cpp's own flags (CMake's Release flags, ggml's per-variant ISA
# flags), as upstream builds it: Bazel's generic defaults (stack protector, frame pointers, -Wall)
# would make a lane slower than upstream's build. The toolchain's compiler, linker and link flags
# (its libstdc++) still apply, with either rule set.
STAGE_FEATURES = ["-default_compile_flags"]

def install_from_build_tree(binaries, libraries, dirs = []):
    """postfix_script for a stage that is not installed: its outputs copied into $INSTALLDIR.

    rules_foreign_cc takes declared outputs from the install directory only; CMake does not install
    tests or the tools of a stage built with install = False, so they are copied from the build tree
    ($BUILD_TMPDIR, the script's working directory), following the SONAME symlinks.

    Args:
      binaries: file names for $INSTALLDIR/bin.
      libraries: file names for $INSTALLDIR/lib.
      dirs: build-tree directories copied to $INSTALLDIR/<dir> as they are.

    Returns:
      The script.
    """
    lines = ["lanes_take() { found=$(find . -name CMakeFiles -prune -o -name \"$2\" \\( -type f -o -type l \\) -print | sort | sed -n 1p); " +
             "test -n \"$found\" || { echo \"postfix_script: $2 was not built\" >&2; exit 1; }; " +
             "mkdir -p \"$INSTALLDIR/$1\"; cp -L \"$found\" \"$INSTALLDIR/$1/$2\"; }"]
    lines += ["lanes_take bin {}".format(f) for f in binaries]
    lines += ["lanes_take lib {}".format(f) for f in libraries]
    lines += ["mkdir -p \"$INSTALLDIR/{d}\" && cp -R {d}/. \"$INSTALLDIR/{d}/\"".format(d = d) for d in dirs]
    return "\n".join(lines)
