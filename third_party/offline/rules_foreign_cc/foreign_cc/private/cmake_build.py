"""Runs one cmake() action: configure, build, install, then copy the declared outputs.

The config file is written by cmake.bzl. Everything the build printed goes to the log output; on
failure the tail of it is printed with the step that failed, and the action exits non-zero.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

_COMPILER_FILE = re.compile(r"CMake(?P<lang>C|CXX|CUDA|HIP|OBJC|OBJCXX)Compiler\.cmake$")


class BuildError(Exception):
    """A step of the CMake build failed; the message names the step."""


def substitute(value: str, exec_root: str) -> str:
    # rules_foreign_cc spells the exec root $EXT_BUILD_ROOT in cache entries and env.
    return value.replace("$$EXT_BUILD_ROOT$$", exec_root).replace("$EXT_BUILD_ROOT", exec_root)


def compilers(build_dir: pathlib.Path) -> dict[str, dict[str, str]]:
    """Compiler id, version and path per language, read from CMake's own detection results."""
    found = {}
    for path in sorted(build_dir.glob("CMakeFiles/*/CMake*Compiler.cmake")):
        match = _COMPILER_FILE.search(path.name)
        if not match:
            continue
        lang = match["lang"]
        text = path.read_text()
        fields = {}
        for key in ("COMPILER_ID", "COMPILER_VERSION", "COMPILER"):
            m = re.search(rf'set\(CMAKE_{lang}_{key} "([^"]*)"\)', text)
            if m:
                fields[key.lower()] = m[1]
        found[lang] = fields
    return found


def tool_version(tool: str, env: dict[str, str]) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, env=env, check=False).stdout
    except OSError:
        return ""
    return out.splitlines()[0].strip() if out else ""


def find_output(name: str, roots: list[pathlib.Path]) -> pathlib.Path:
    for root in roots:
        direct = [root / "bin" / name, root / "lib" / name, root / name]
        for candidate in direct:
            if candidate.exists():
                return candidate
    for root in roots:
        matches = sorted(p for p in root.rglob(name) if p.is_file() and "CMakeFiles" not in p.parts)
        if matches:
            return matches[0]
    raise BuildError(f"declared output {name} was not produced (looked in {', '.join(map(str, roots))})")


def without_parallelism(build_args: list[str]) -> list[str]:
    """build_args minus the job count, which `jobs` (capped by this host's cores) replaces."""
    out, skip = [], False
    for i, arg in enumerate(build_args):
        if skip:
            skip = False
            continue
        if arg in ("--parallel", "-j") and i + 1 < len(build_args) and build_args[i + 1].isdigit():
            skip = True
            continue
        if re.fullmatch(r"-j\d+|--parallel=\d+", arg):
            continue
        out.append(arg)
    return out


def run_step(step: str, cmd: list[str], env: dict[str, str], log, commands: list) -> None:
    log.write(f"\n### {step}: {' '.join(cmd)}\n")
    log.flush()
    started = time.time()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    commands.append({"step": step, "argv": cmd, "seconds": round(time.time() - started, 3), "exit_code": proc.returncode})
    if proc.returncode != 0:
        raise BuildError(f"{step} failed with exit code {proc.returncode}")


def build(config: dict) -> None:
    exec_root = os.getcwd()
    out_prefix = pathlib.Path(exec_root, config["install_prefix"])
    source_dir = pathlib.Path(exec_root, config["source_dir"])
    jobs = max(1, min(config["jobs"], os.cpu_count() or 1))
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"cmake-{config['name']}-"))
    build_dir, install_dir = scratch / "build", scratch / "install"

    env = dict(os.environ)
    for key, value in config["env"].items():
        value = substitute(value, exec_root)
        env[key] = f"{value}:{env[key]}" if key.endswith("PATH") and env.get(key) else value
    # Paths of this action's scratch and exec root must not leak into the artifacts.
    prefix_maps = f"-ffile-prefix-map={exec_root}=. -ffile-prefix-map={scratch}=."
    for var in ("CFLAGS", "CXXFLAGS"):
        env[var] = f"{env.get(var, '')} {prefix_maps}".strip()

    cache = {k: substitute(v, exec_root) for k, v in config["cache_entries"].items()}
    prefixes = [os.path.join(exec_root, p) for p in config["deps_prefixes"]]
    if prefixes:
        cache["CMAKE_PREFIX_PATH"] = ";".join(prefixes + ([cache["CMAKE_PREFIX_PATH"]] if "CMAKE_PREFIX_PATH" in cache else []))
    configure = ["cmake", *config["generate_args"], "-S", str(source_dir), "-B", str(build_dir),
                 f"-DCMAKE_INSTALL_PREFIX={install_dir}"] + [f"-D{k}={v}" for k, v in sorted(cache.items())]
    build_cmd = ["cmake", "--build", str(build_dir), "-j", str(jobs)]
    if config["targets"]:
        build_cmd += ["--target", *config["targets"]]
    build_cmd += without_parallelism(config["build_args"])

    commands: list = []
    started = time.time()
    log_path = pathlib.Path(config["log"])
    try:
        with log_path.open("w") as log:
            log.write(f"# cmake() {config['name']}: {jobs} jobs\n")
            run_step("configure", configure, env, log, commands)
            run_step("build", build_cmd, env, log, commands)
            if config["install"]:
                run_step("install", ["cmake", "--install", str(build_dir)], env, log, commands)
            roots = [install_dir, build_dir] if config["install"] else [build_dir]
            for sub, names in (("bin", config["out_binaries"]), ("lib", config["out_shared_libs"] + config["out_static_libs"])):
                for name in names:
                    dest = out_prefix / sub / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(find_output(name, roots), dest)  # follows soname symlinks
            for sub in ([config["out_include_dir"]] if config["out_include_dir"] else []) + config["out_data_dirs"]:
                src = install_dir / sub if config["install"] else build_dir / sub
                if not src.is_dir():
                    raise BuildError(f"declared directory {sub} was not produced under {src.parent}")
                shutil.copytree(src, out_prefix / sub, dirs_exist_ok=True)
            meta = {
                "name": config["name"],
                "jobs": jobs,
                "cmake_version": tool_version("cmake", env),
                "ninja_version": tool_version("ninja", env),
                "compilers": compilers(build_dir),
                "cache_entries": config["cache_entries"],
                "env": config["env"],
                "targets": config["targets"],
                "commands": commands,
                "started": started,
                "finished": time.time(),
            }
            pathlib.Path(config["meta"]).write_text(json.dumps(meta, indent=2, sort_keys=True))
    except BuildError as err:
        tail = log_path.read_text().splitlines()[-60:]
        sys.stderr.write("\n".join(tail) + f"\n\ncmake({config['name']}): {err}. Full log: {log_path}\n")
        sys.exit(1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    build(json.loads(pathlib.Path(sys.argv[1]).read_text()))


if __name__ == "__main__":
    main()
