"""A cmake() rule with the real rules_foreign_cc attribute names, for offline builds.

Outputs are laid out as the real rule lays them out: <name>/bin, <name>/lib, <name>/include.
The action configures with CMake, builds with Ninja and (optionally) installs; declared outputs
are then copied out of the install prefix, or out of the build tree for targets CMake does not
install (tests). It also writes <name>_foreign_cc/{build.log,meta.json}: the exact command lines,
compiler id and version, and timings, which build evidence is made from.
"""

CMakeInfo = provider(
    doc = "What a cmake() target built and where its install prefix is.",
    fields = {
        "install_prefix": "exec-root-relative path of <name>/",
        "files": "depset of every output under the prefix",
        "meta": "File: the <name>_foreign_cc/meta.json of this build",
        "log": "File: the build log",
        "shared_libs": "list of File in <name>/lib",
        "binaries": "list of File in <name>/bin",
    },
)

# CPUs asked for per size, as in rules_foreign_cc; the action uses min(this, host cores).
_RESOURCE_SIZES = {"tiny": 1, "small": 2, "medium": 4, "large": 8, "enormous": 16, "default": 8}

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
        info = dep[CMakeInfo]
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
        jobs = _RESOURCE_SIZES[ctx.attr.resource_size],
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
        execution_requirements = {"resources:cpu:{}".format(_RESOURCE_SIZES[ctx.attr.resource_size]): ""},
        use_default_shell_env = False,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    files = depset(outputs)
    return [
        DefaultInfo(files = depset(binaries + shared_libs + static_libs + dirs)),
        OutputGroupInfo(logs = depset([log, meta])),
        CMakeInfo(
            install_prefix = prefix,
            files = files,
            meta = meta,
            log = log,
            shared_libs = shared_libs,
            binaries = binaries,
        ),
    ]

cmake = rule(
    implementation = _cmake_impl,
    doc = "Configures, builds and installs a CMake project (a subset of rules_foreign_cc's cmake()).",
    attrs = {
        "lib_source": attr.label(mandatory = True, allow_files = True, doc = "All the project's files; the shallowest CMakeLists.txt is the source root."),
        "lib_name": attr.string(doc = "Output directory name; defaults to the target name."),
        "cache_entries": attr.string_dict(doc = "-D entries for the configure step."),
        "generate_args": attr.string_list(default = ["-GNinja"]),
        "build_args": attr.string_list(),
        "targets": attr.string_list(doc = "Targets to build; empty builds the default target."),
        "install": attr.bool(default = True),
        "env": attr.string_dict(doc = "Environment for CMake and the build (PATH-like entries are prepended)."),
        "deps": attr.label_list(providers = [CMakeInfo], doc = "cmake() targets whose install prefixes join CMAKE_PREFIX_PATH."),
        "build_data": attr.label_list(allow_files = True, doc = "Extra inputs (toolkits, stubs)."),
        "out_binaries": attr.string_list(),
        "out_shared_libs": attr.string_list(),
        "out_static_libs": attr.string_list(),
        "out_include_dir": attr.string(default = "include"),
        "out_data_dirs": attr.string_list(),
        "resource_size": attr.string(default = "default", values = _RESOURCE_SIZES.keys()),
        "_cmake_build": attr.label(default = "//foreign_cc/private:cmake_build", executable = True, cfg = "host"),
    },
)
