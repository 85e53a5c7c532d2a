"""A cmake() rule with the real rules_foreign_cc attribute names, for offline builds.

Outputs are laid out as the real rule lays them out: <name>/bin, <name>/lib, <name>/include.
The action configures with CMake, builds with Ninja and (optionally) installs; declared outputs
are then copied out of the install prefix, or out of the build tree for targets CMake does not
install (tests). It also writes <name>_foreign_cc/{build.log,meta.json}: the exact command lines,
compiler id and version, and timings, which build evidence is made from.
"""

# Private to this stand-in (defs.bzl does not export it, as the real rules export no such
# provider): what a dependent cmake() needs to put this target's install prefix on
# CMAKE_PREFIX_PATH. The real rule gets the same from the dependency's CcInfo and outputs.
_CMakeDepInfo = provider(
    doc = "Install prefix and files of a cmake() target, for cmake() targets that depend on it.",
    fields = {
        "install_prefix": "exec-root-relative path of <name>/",
        "files": "depset of every output under the prefix",
    },
)

def _parallel_jobs(build_args):
    """The job count asked for in build_args (`--parallel N`, `-j N`, `-jN`); 1 if none.

    The real rule passes build_args to `cmake --build` as they are; this stand-in does too, and
    also reserves that many CPUs from Bazel for the action (capped by the host's cores at run
    time), which is what rules_foreign_cc's later `resource_size` does.
    """
    for i, arg in enumerate(build_args):
        if arg in ("--parallel", "-j") and i + 1 < len(build_args) and build_args[i + 1].isdigit():
            return int(build_args[i + 1])
        if arg.startswith("-j") and arg[2:].isdigit():
            return int(arg[2:])
        if arg.startswith("--parallel=") and arg[len("--parallel="):].isdigit():
            return int(arg[len("--parallel="):])
    return 1

def _source_root(files):
    roots = [f.dirname for f in files if f.basename == "CMakeLists.txt"]
    if not roots:
        fail("lib_source has no CMakeLists.txt")
    return sorted(roots, key = len)[0]

def _declare(ctx, name, sub, names):
    return [ctx.actions.declare_file("{}/{}/{}".format(name, sub, n)) for n in names]

def _cmake_impl(ctx):
    name = ctx.attr.lib_name or ctx.label.name
    source_root = _source_root(ctx.files.lib_source)

    binaries = _declare(ctx, name, "bin", ctx.attr.out_binaries)
    shared_libs = _declare(ctx, name, "lib", ctx.attr.out_shared_libs)
    static_libs = _declare(ctx, name, "lib", ctx.attr.out_static_libs)
    dirs = []
    if ctx.attr.out_include_dir:
        dirs.append(ctx.actions.declare_directory("{}/{}".format(name, ctx.attr.out_include_dir)))
    dirs += [ctx.actions.declare_directory("{}/{}".format(name, d)) for d in ctx.attr.out_data_dirs]
    log = ctx.actions.declare_file("{}_foreign_cc/build.log".format(name))
    meta = ctx.actions.declare_file("{}_foreign_cc/meta.json".format(name))
    outputs = binaries + shared_libs + static_libs + dirs + [log, meta]
    prefix = "{}/{}/{}".format(ctx.bin_dir.path, ctx.label.package, name) if ctx.label.package else "{}/{}".format(ctx.bin_dir.path, name)

    dep_prefixes = []
    dep_files = []
    for dep in ctx.attr.deps:
        info = dep[_CMakeDepInfo]
        dep_prefixes.append(info.install_prefix)
        dep_files.append(info.files)

    # Values are passed as written ($ORIGIN must survive); $EXT_BUILD_ROOT is the exec root.
    cache_entries = ctx.attr.cache_entries
    config = struct(
        name = name,
        source_dir = source_root,
        install_prefix = prefix,
        cache_entries = cache_entries,
        generate_args = ctx.attr.generate_args,
        build_args = ctx.attr.build_args,
        targets = ctx.attr.targets,
        install = ctx.attr.install,
        env = ctx.attr.env,
        deps_prefixes = dep_prefixes,
        out_binaries = ctx.attr.out_binaries,
        out_shared_libs = ctx.attr.out_shared_libs,
        out_static_libs = ctx.attr.out_static_libs,
        out_include_dir = ctx.attr.out_include_dir,
        out_data_dirs = ctx.attr.out_data_dirs,
        jobs = _parallel_jobs(ctx.attr.build_args),
        log = log.path,
        meta = meta.path,
    )
    config_file = ctx.actions.declare_file("{}_foreign_cc/config.json".format(name))
    ctx.actions.write(config_file, config.to_json())

    ctx.actions.run(
        executable = ctx.executable._cmake_build,
        arguments = [config_file.path],
        inputs = depset([config_file] + ctx.files.lib_source + ctx.files.build_data, transitive = dep_files),
        outputs = outputs,
        mnemonic = "CMake",
        progress_message = "CMake build of {} ({})".format(name, ctx.label),
        execution_requirements = {"resources:cpu:{}".format(_parallel_jobs(ctx.attr.build_args)): ""},
        use_default_shell_env = False,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )

    # As the real rule: DefaultInfo, CcInfo, and OutputGroupInfo with gen_dir, one group per
    # declared output file and CMake_logs (here: the build log and meta.json, whose command lines,
    # compilers and timings the lanes' build evidence is made from).
    groups = {"gen_dir": depset(dirs), "CMake_logs": depset([log, meta])}
    for f in binaries + shared_libs + static_libs:
        groups[f.basename] = depset([f])
    headers = dirs[:1] if ctx.attr.out_include_dir else []
    return [
        DefaultInfo(files = depset(binaries + shared_libs + static_libs + dirs)),
        OutputGroupInfo(**groups),
        # buildifier: disable=native-cc-common (Bazel 4.2.3: globals; the rules_cc stand-in has no cc/common)
        # buildifier: disable=native-cc-info
        CcInfo(compilation_context = cc_common.create_compilation_context(headers = depset(headers))),
        _CMakeDepInfo(install_prefix = prefix, files = depset(outputs)),
    ]

cmake = rule(
    implementation = _cmake_impl,
    doc = "Configures, builds and installs a CMake project: the subset of rules_foreign_cc 0.10.1's cmake() that Lanes uses, same attribute names and providers.",
    attrs = {
        "lib_source": attr.label(mandatory = True, allow_files = True, doc = "All the project's files; the shallowest CMakeLists.txt is the source root."),
        "lib_name": attr.string(doc = "Output directory name; defaults to the target name."),
        "cache_entries": attr.string_dict(doc = "-D entries for the configure step."),
        # As rules_foreign_cc 0.10.1: no generator given means CMake's default (Unix Makefiles on Linux).
        "generate_args": attr.string_list(),
        "build_args": attr.string_list(doc = "Extra `cmake --build` arguments; `--parallel N` also reserves N CPUs."),
        "targets": attr.string_list(doc = "Targets to build; empty builds the default target."),
        "install": attr.bool(default = True),
        "env": attr.string_dict(doc = "Environment for CMake and the build (PATH-like entries are prepended)."),
        "deps": attr.label_list(providers = [_CMakeDepInfo], doc = "cmake() targets whose install prefixes join CMAKE_PREFIX_PATH."),
        "build_data": attr.label_list(allow_files = True, doc = "Extra inputs (toolkits, stubs)."),
        "out_binaries": attr.string_list(),
        "out_shared_libs": attr.string_list(),
        "out_static_libs": attr.string_list(),
        "out_include_dir": attr.string(default = "include"),
        "out_data_dirs": attr.string_list(),
        # buildifier: disable=attr-cfg (as lanes/lane.bzl's _writer: the tool's path is in every
        # cmake() action's key; rules_foreign_cc 0.10.1 itself uses "exec" on Bazel >= 5).
        "_cmake_build": attr.label(default = "//foreign_cc/private:cmake_build", executable = True, cfg = "host"),
    },
)
