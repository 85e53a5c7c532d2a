"""Runs one cmake() action as rules_foreign_cc 0.10.1's build script does: configure, build, install.

The config file is written by cmake.bzl. Layout and variables are the real rule's: the exec root is
$EXT_BUILD_ROOT, CMake installs into $INSTALLDIR (the target's output directory), the build runs in
$INSTALLDIR.build_tmpdir and dependencies are copied into $INSTALLDIR.ext_build_deps/<lib_name>.
Values are expanded as the real rule's `set -euo pipefail` bash script expands double-quoted strings,
so what fails there (an unbound `$ORIGIN`) fails here. Everything the build printed goes to the log
output; on failure the tail of it is printed with the step that failed, and the action exits non-zero.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

_COMPILER_FILE = re.compile(r"CMake(?P<lang>C|CXX|CUDA|HIP|OBJC|OBJCXX)Compiler\.cmake$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The real rule's placeholder for its own variables, written $$NAME$$ in cache entries and env.
_PLACEHOLDER = re.compile(r"\$\$([A-Za-z_][A-Za-z0-9_]*)\$\$")
# Files in $INSTALLDIR whose absolute build paths the real rule rewrites to placeholders.
_REWRITTEN = re.compile(r".*(\.pc|\.la|-config|\.mk|\.cmake)$")


class BuildError(Exception):
    """A step of the CMake build failed; the message names the step."""


def expand(value: str, variables: dict[str, str], what: str) -> str:
    """`value` as bash expands it between double quotes under `set -u`.

    `\\$`, `\\\\`, `\\"` and a backquote escape lose their backslash; `$NAME` and `${NAME}` are
    replaced, an unset NAME is an error as in the real rule's script. Command substitution and
    parameter operators are refused: the stand-in does not run a shell over values.
    """
    value = _PLACEHOLDER.sub(lambda m: "$" + m[1], value)
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value) and value[i + 1] in '$`"\\':
            out.append(value[i + 1])
            i += 2
            continue
        if ch == "\\" and i + 1 == len(value):
            raise BuildError(f"{what}: {value!r} ends in a backslash, which would escape the script's closing quote")
        if ch == "`":
            raise BuildError(f"{what}: command substitution in {value!r} is not supported by the offline cmake()")
        if ch == "$":
            rest = value[i + 1:]
            if rest[:1] and rest[0] in "$?#@*-!0123456789":
                raise BuildError(f"{what}: the special parameter ${rest[0]} in {value!r} is not supported by the offline cmake()")
            if rest.startswith("("):
                raise BuildError(f"{what}: command substitution in {value!r} is not supported by the offline cmake()")
            if rest.startswith("{"):
                end = rest.find("}")
                name = rest[1:end] if end > 0 else ""
                if not _NAME.fullmatch(name):
                    raise BuildError(f"{what}: parameter expansion ${{{rest[1:end] if end > 0 else rest}}} in {value!r} is not supported by the offline cmake()")
                consumed = end + 1
            else:
                match = _NAME.match(rest)
                if not match:
                    out.append("$")
                    i += 1
                    continue
                name, consumed = match[0], match.end()
            if name not in variables:
                raise BuildError(f"{what}: {name}: unbound variable (in {value!r}; the real rule's script runs under set -u: write \\${name} for a literal ${name})")
            out.append(variables[name])
            i += 1 + consumed
            continue
        out.append(ch)
        i += 1
    return "".join(out)


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


def with_jobs(build_args: list[str], jobs: int) -> list[str]:
    """build_args with the job count capped by this host's cores (the CPUs Bazel reserved)."""
    out, skip = [], False
    for i, arg in enumerate(build_args):
        if skip:
            skip = False
            continue
        if arg in ("--parallel", "-j") and i + 1 < len(build_args) and build_args[i + 1].isdigit():
            skip = True
            out += ["--parallel", str(jobs)]
            continue
        if re.fullmatch(r"-j\d+|--parallel=\d+", arg):
            out += ["--parallel", str(jobs)]
            continue
        out.append(arg)
    return out


def cmake_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def toolchain_file(settings: dict[str, str]) -> str:
    """The CMake toolchain file the real rule writes (crosstool_bazel.cmake), one set() a setting."""
    lines = []
    for key, value in sorted(settings.items()):
        cache = ' CACHE FILEPATH "Archiver"' if key == "CMAKE_AR" else ""
        lines.append(f'set({key} "{cmake_string(value)}"{cache})\n')
    return "".join(lines)


def run_step(step: str, cmd: list[str], env: dict[str, str], cwd: pathlib.Path, log, commands: list) -> None:
    log.write(f"\n### {step}: {' '.join(cmd)}\n")
    log.flush()
    started = time.time()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, check=False)
    commands.append({"step": step, "argv": cmd, "seconds": round(time.time() - started, 3), "exit_code": proc.returncode})
    if proc.returncode != 0:
        raise BuildError(f"{step} failed with exit code {proc.returncode}")


def rewrite_absolute_paths(install_dir: pathlib.Path, replacements: list[tuple[str, str]]) -> None:
    """As the real rule: build-time absolute paths in installed .cmake/.pc/... files -> placeholders."""
    for path in sorted(install_dir.rglob("*")):
        if path.is_symlink() or not path.is_file() or not _REWRITTEN.fullmatch(path.name):
            continue
        text = path.read_text(errors="surrogateescape")
        new = text
        for old, placeholder in replacements:
            new = new.replace(old, placeholder)
        if new != text:
            stat = path.stat()
            path.write_text(new, errors="surrogateescape")
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def copy_dependency(src: pathlib.Path, dest: pathlib.Path) -> None:
    if not src.is_dir():
        raise BuildError(f"dependency install directory {src} is missing")
    shutil.copytree(src, dest, symlinks=False)


def take_outputs(config: dict, exec_root: str) -> None:
    """Declared outputs must be in $INSTALLDIR; a symlink there becomes a copy of what it names."""
    for rel in config["outputs"]:
        path = pathlib.Path(exec_root, rel)
        if path.is_symlink():
            target = path.resolve()
            path.unlink()
            shutil.copy2(target, path)
        if not path.is_file():
            raise BuildError(f"declared output {path.name} is not in the install directory ({path.parent}); "
                             "install it, or copy it there with postfix_script")
    for rel in config["output_dirs"]:
        if not pathlib.Path(exec_root, rel).is_dir():
            raise BuildError(f"declared directory {rel} is not in the install directory")


def build(config: dict) -> None:
    exec_root = os.getcwd()
    install_dir = pathlib.Path(exec_root, config["install_dir"])
    build_dir = pathlib.Path(str(install_dir) + ".build_tmpdir")
    deps_dir = pathlib.Path(str(install_dir) + ".ext_build_deps")
    variables = dict(os.environ)
    variables.update({"EXT_BUILD_ROOT": exec_root, "INSTALLDIR": str(install_dir),
                      "BUILD_TMPDIR": str(build_dir), "EXT_BUILD_DEPS": str(deps_dir)})
    jobs = max(1, min(config["jobs"], os.cpu_count() or 1))

    env = dict(variables)
    for key, value in config["toolchain_env"].items():
        env[key] = expand(value, variables, f"toolchain env {key}")
    for key, value in config["env"].items():
        env[key] = expand(value, variables, f"env {key}")
    cache = {k: expand(v, variables, f"cache entry {k}") for k, v in config["cache_entries"].items()}
    toolchain = {k: expand(v, variables, f"toolchain setting {k}") for k, v in config["toolchain_file"].items()}
    source_dir = pathlib.Path(exec_root, config["source_dir"])

    configure = ["cmake"] + [f"-D{k}={v}" for k, v in cache.items()] + config["options"] + ["-G", config["generator"], str(source_dir)]
    build_cmds = [["cmake", "--build", ".", "--config", cache.get("CMAKE_BUILD_TYPE", "Release")]
                  + (["--target", t] if t else []) + with_jobs(config["build_args"], jobs)
                  for t in (config["targets"] or [""])]

    commands: list = []
    started = time.time()
    log_path = pathlib.Path(config["log"])
    try:
        with log_path.open("w") as log:
            log.write(f"# cmake() {config['name']}: {jobs} jobs\n")
            for stale in (build_dir, deps_dir):
                shutil.rmtree(stale, ignore_errors=True)
            for made in (install_dir, build_dir, deps_dir):
                made.mkdir(parents=True, exist_ok=True)
            for dep in config["deps"]:
                copy_dependency(pathlib.Path(exec_root, dep["install_dir"]), deps_dir / dep["lib_name"])
            (build_dir / "crosstool_bazel.cmake").write_text(toolchain_file(toolchain))
            run_step("configure", configure, env, build_dir, log, commands)
            for i, cmd in enumerate(build_cmds):
                run_step("build" if len(build_cmds) == 1 else f"build {config['targets'][i]}", cmd, env, build_dir, log, commands)
            if config["install"]:
                run_step("install", ["cmake", "--install", ".", "--config", cache.get("CMAKE_BUILD_TYPE", "Release")],
                         env, build_dir, log, commands)
            if config["postfix_script"]:
                run_step("postfix_script", ["bash", "-c", "set -euo pipefail\n" + config["postfix_script"]],
                         env, build_dir, log, commands)
            rewrite_absolute_paths(install_dir, [(str(build_dir), "${EXT_BUILD_DEPS}"), (str(deps_dir), "${EXT_BUILD_DEPS}"),
                                                 (exec_root, "${EXT_BUILD_ROOT}")])
            take_outputs(config, exec_root)
            meta = {
                "name": config["name"],
                "jobs": jobs,
                "cmake_version": tool_version("cmake", env),
                "ninja_version": tool_version("ninja", env),
                "compilers": compilers(build_dir),
                "cache_entries": config["user_cache_entries"],
                "env": config["user_env"],
                "targets": config["targets"],
                "commands": commands,
                "started": started,
                "finished": time.time(),
            }
            pathlib.Path(config["meta"]).write_text(json.dumps(meta, indent=2, sort_keys=True))
    except BuildError as err:
        tail = log_path.read_text().splitlines()[-60:] if log_path.exists() else []
        sys.stderr.write("\n".join(tail) + f"\n\ncmake({config['name']}): {err}. Full log: {log_path}\n")
        sys.exit(1)
    finally:
        for scratch in (build_dir, deps_dir):
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    build(json.loads(pathlib.Path(sys.argv[1]).read_text()))


if __name__ == "__main__":
    main()
