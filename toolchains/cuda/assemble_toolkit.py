"""Assembles a CUDA toolkit directory from NVIDIA's redistributable wheels (stdlib only).

Run by the `cuda_toolkit` repository rule, the way hermetic CUDA in XLA assembles NVIDIA's
redistributables: every wheel's nvidia/cu13/ tree is merged into one root that CMake's
FindCUDAToolkit accepts (bin/ a real directory, lib64 -> lib, unversioned .so links).
"""

import argparse
import json
import os
import pathlib
import re
import stat
import sys
import zipfile

_PREFIX = re.compile(r"^nvidia/cu\d+/")


def extract(wheel: pathlib.Path, root: pathlib.Path) -> list[str]:
    """Extracts one wheel's toolkit files under root, keeping mode bits; returns their paths."""
    placed = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not _PREFIX.match(info.filename):
                continue
            rel = _PREFIX.sub("", info.filename)
            dest = root / rel
            if dest.exists():
                sys.exit(f"assemble_toolkit: {rel} is in two wheels ({wheel.name}); the lock mixes toolkits")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                out.write(src.read())
            mode = (info.external_attr >> 16) & 0o777
            # Wheels lose exec bits for some tools; anything in bin/ or nvvm/bin/ must run.
            if "/bin/" in f"/{rel}" or mode & stat.S_IXUSR:
                mode |= 0o755
            os.chmod(dest, mode or 0o644)
            placed.append(rel)
    return placed


def link_unversioned(lib: pathlib.Path) -> list[str]:
    """libfoo.so -> libfoo.so.N for the libraries CMake and the linker look up by plain name."""
    made = []
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
            made.append(plain.name)
    return made


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheels", type=pathlib.Path, required=True)
    parser.add_argument("--root", type=pathlib.Path, required=True)
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob("*.whl"))
    if not wheels:
        sys.exit(f"assemble_toolkit: no wheels in {args.wheels}")
    manifest = {}
    for wheel in wheels:
        manifest[wheel.name] = len(extract(wheel, args.root))
    lib = args.root / "lib"
    links = link_unversioned(lib)
    if not (args.root / "lib64").exists():
        (args.root / "lib64").symlink_to("lib")
    for required in ("bin/nvcc", "lib/libcudart.so", "lib/libcublas.so", "lib/libcublasLt.so", "include/cuda_runtime.h"):
        if not (args.root / required).exists():
            sys.exit(f"assemble_toolkit: {required} missing after unpacking {[w.name for w in wheels]}")
    (args.root / "toolkit_manifest.json").write_text(json.dumps({"wheels": manifest, "links": links}, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
