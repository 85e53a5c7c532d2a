"""A cmake() rule with the real rules_foreign_cc 0.10.1 attribute names and behaviour, for offline builds.

What the real rule does, this does, so a BUILD file that builds here builds with the real rule and
gives the same artifacts (tests/real_rules compares the two):
- the compiler, archiver and flags come from the registered C++ toolchain, filtered by the target's
  `features`, and reach CMake through a generated toolchain file;
- cache entries and env values are expanded as a `set -u` bash script expands double-quoted
  strings (`$ORIGIN` must be written `\\$ORIGIN`; `$EXT_BUILD_ROOT`, `$EXT_BUILD_DEPS`,
  `$BUILD_TMPDIR`, `$INSTALLDIR` are the rule's own variables);
- the build runs in <name>.build_tmpdir, dependencies are copied into <name>.ext_build_deps/<dep>,
  CMake installs into <name>/ and the declared outputs are taken from there only (a target that is
  not installed gets there through `postfix_script`).
It also writes <name>_foreign_cc/meta.json (command lines, compilers, timings) for build evidence.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# Private to this stand-in (defs.bzl does not export it): where a dependent cmake() finds this
# target's install directory. The real rule passes the same through its ForeignCcDeps provider.
_CMakeDepInfo = provider(
    doc = "Install directory and files of a cmake() target, for cmake() targets that depend on it.",
    fields = {
        "lib_name": "the directory name under the dependent's $EXT_BUILD_DEPS",
        "install_dir": "exec-root-relative path of <name>/",
        "files": "depset of every output under it",
    },
)

# Features an external build system cannot honour; the real rule turns off the same ones.
_UNSUPPORTED_FEATURES = ["fdo_instrument", "fdo_optimize", "layering_check", "module_maps", "thin_lto"]

def _parallel_jobs(build_args):
    """The job count asked for in build_args (`--parallel N`, `-j N`, `-jN`); 1 if none.

    The stand-in also reserves that many CPUs from Bazel for the action (capped by the host's
    cores at run time), which is what rules_foreign_cc's later `resource_size` does.
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

def _generator(generate_args):
    """(generator, other options): the -G argument is taken out and passed last, as the real rule does."""
    generator = "Unix Makefiles"
    options = []
    for arg in generate_args:
        if arg.startswith("-G"):
            generator = arg[2:].strip(" '\"")
        else:
            options.append(arg)
    return generator, options

def _absolute(path, force):
    """A toolchain path under the exec root made absolute; absolute ones stay as they are."""
    if path.startswith("/"):
        return path
    if force or path.startswith("external/") or path.startswith("bazel-out/"):
        return "$$EXT_BUILD_ROOT$$/" + path
    return path

def _command_line(feature_configuration, action, variables):
    # buildifier: disable=native-cc-common
    return cc_common.get_memory_inefficient_command_line(
        feature_configuration = feature_configuration,
        action_name = action,
        variables = variables,
    )

def _link_variables(cc_toolchain, features, dynamic):
    # buildifier: disable=native-cc-common
    return cc_common.create_link_variables(
        cc_toolchain = cc_toolchain,
        feature_configuration = features,
        is_using_linker = True,
        is_linking_dynamic_library = dynamic,
        must_keep_debug = False,
    )

def _with(flags, extra):
    return flags + [f for f in extra if f not in flags]

def _toolchain_file_entries(ctx, cc_toolchain):
    """CMAKE_* settings from the C++ toolchain, keyed as they go into the toolchain file."""
    unsupported = ctx.disabled_features + _UNSUPPORTED_FEATURES
    if not ctx.coverage_instrumented():
        unsupported = unsupported + ["coverage"]

    # buildifier: disable=native-cc-common
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = unsupported,
    )

    # buildifier: disable=native-cc-common
    compile_variables = cc_common.create_compile_variables(feature_configuration = features, cc_toolchain = cc_toolchain)

    # buildifier: disable=native-cc-common
    cxx_variables = cc_common.create_compile_variables(feature_configuration = features, cc_toolchain = cc_toolchain, add_legacy_cxx_options = True)

    cpp = ctx.fragments.cpp
    c_flags = _with(_command_line(features, ACTION_NAMES.c_compile, compile_variables), cpp.copts + cpp.conlyopts)
    cxx_flags = _with(_command_line(features, ACTION_NAMES.cpp_compile, cxx_variables), cpp.copts + cpp.cxxopts)
    asm_flags = _with(_command_line(features, ACTION_NAMES.assemble, compile_variables), cpp.copts)
    shared_flags = _with(_command_line(features, ACTION_NAMES.cpp_link_dynamic_library, _link_variables(cc_toolchain, features, True)), cpp.linkopts)
    exe_flags = _with(_command_line(features, ACTION_NAMES.cpp_link_executable, _link_variables(cc_toolchain, features, False)), cpp.linkopts)
    for flag in c_flags + cxx_flags:
        if flag.startswith("--sysroot") or flag.startswith("--gcc-toolchain") or flag.startswith("-gcc-toolchain"):
            fail("the offline cmake() stand-in does not translate {} into CMake settings; use the real rules_foreign_cc".format(flag))

    entries = {}
    cc, cxx, ar, linker = [
        # buildifier: disable=native-cc-common
        cc_common.get_tool_for_action(feature_configuration = features, action_name = action)
        for action in [ACTION_NAMES.c_compile, ACTION_NAMES.cpp_compile, ACTION_NAMES.cpp_link_static_library, ACTION_NAMES.cpp_link_executable]
    ]
    if cc:
        entries["CMAKE_C_COMPILER"] = _absolute(cc, True)
    if cxx:
        entries["CMAKE_CXX_COMPILER"] = _absolute(cxx, True)
    if ar:
        entries["CMAKE_AR"] = _absolute(ar, True)
        if ar.endswith("/libtool"):
            fail("the offline cmake() stand-in does not support a libtool archiver; use the real rules_foreign_cc")
    if linker and linker != cxx:
        entries["CMAKE_CXX_LINK_EXECUTABLE"] = " ".join([_absolute(linker, False), "<FLAGS>", "<CMAKE_CXX_LINK_FLAGS>", "<LINK_FLAGS>", "<OBJECTS>", "-o <TARGET>", "<LINK_LIBRARIES>"])
    for key, flags in [
        ("CMAKE_C_FLAGS_INIT", c_flags),
        ("CMAKE_CXX_FLAGS_INIT", cxx_flags),
        ("CMAKE_ASM_FLAGS_INIT", asm_flags),
        ("CMAKE_SHARED_LINKER_FLAGS_INIT", shared_flags),
        ("CMAKE_EXE_LINKER_FLAGS_INIT", exe_flags),
    ]:
        if flags:
            entries[key] = " ".join([_absolute(f, False) for f in flags])
    toolchain_env = {}
    for action in [ACTION_NAMES.c_compile, ACTION_NAMES.cpp_link_static_library, ACTION_NAMES.cpp_link_executable]:
        # buildifier: disable=native-cc-common
        toolchain_env.update(cc_common.get_environment_variables(feature_configuration = features, action_name = action, variables = compile_variables))
    return entries, toolchain_env

# User values that go into the toolchain file: appended to the toolchain's (flags) or replacing it.
_ENV_INTO_TOOLCHAIN_FILE = {
    "ASMFLAGS": ("CMAKE_ASM_FLAGS_INIT", False),
    "CC": ("CMAKE_C_COMPILER", True),
    "CFLAGS": ("CMAKE_C_FLAGS_INIT", False),
    "CXX": ("CMAKE_CXX_COMPILER", True),
    "CXXFLAGS": ("CMAKE_CXX_FLAGS_INIT", False),
}
_CACHE_INTO_TOOLCHAIN_FILE = {
    "CMAKE_AR": ("CMAKE_AR", True),
    "CMAKE_ASM_FLAGS": ("CMAKE_ASM_FLAGS_INIT", False),
    "CMAKE_CXX_ARCHIVE_CREATE": ("CMAKE_CXX_ARCHIVE_CREATE", False),
    "CMAKE_CXX_FLAGS": ("CMAKE_CXX_FLAGS_INIT", False),
    "CMAKE_CXX_LINK_EXECUTABLE": ("CMAKE_CXX_LINK_EXECUTABLE", True),
    "CMAKE_C_ARCHIVE_CREATE": ("CMAKE_C_ARCHIVE_CREATE", False),
    "CMAKE_C_FLAGS": ("CMAKE_C_FLAGS_INIT", False),
    "CMAKE_EXE_LINKER_FLAGS": ("CMAKE_EXE_LINKER_FLAGS_INIT", False),
    "CMAKE_RANLIB": ("CMAKE_RANLIB", True),
    "CMAKE_SHARED_LINKER_FLAGS": ("CMAKE_SHARED_LINKER_FLAGS_INIT", False),
    "CMAKE_STATIC_LINKER_FLAGS": ("CMAKE_STATIC_LINKER_FLAGS_INIT", False),
}

def _move_into(toolchain, values, table):
    rest = {}
    for key, value in values.items():
        if key not in table:
            rest[key] = value
            continue
        target, replace = table[key]
        toolchain[target] = value if replace or target not in toolchain else toolchain[target] + " " + value
    return rest

def _configure_settings(ctx, toolchain):
    """(toolchain file entries, -D cache entries, env) as the real rule passes them to CMake."""
    user_cache = dict(ctx.attr.cache_entries)
    if "CMAKE_TOOLCHAIN_FILE" in user_cache or not ctx.attr.generate_crosstool_file:
        fail("the offline cmake() stand-in always generates the toolchain file; use the real rules_foreign_cc for your own")
    emptied = [k for k, v in user_cache.items() if v == ""]
    user_prefix = user_cache.pop("CMAKE_PREFIX_PATH", None)
    env = _move_into(toolchain, ctx.attr.env, _ENV_INTO_TOOLCHAIN_FILE)
    cache = _move_into(toolchain, user_cache, _CACHE_INTO_TOOLCHAIN_FILE)
    cache["CMAKE_TOOLCHAIN_FILE"] = "$$BUILD_TMPDIR$$/crosstool_bazel.cmake"
    if "CMAKE_BUILD_TYPE" not in cache:
        cache["CMAKE_BUILD_TYPE"] = "Debug" if ctx.var.get("COMPILATION_MODE", "fastbuild") == "dbg" else "Release"
    cache["CMAKE_INSTALL_PREFIX"] = "$$INSTALLDIR$$"
    cache["CMAKE_PREFIX_PATH"] = ";".join(["$$EXT_BUILD_DEPS$$"] + ([user_prefix.strip("\"'")] if user_prefix != None else []))
    for key in emptied:
        cache.pop(key, None)
    if not cache.get("CMAKE_RANLIB"):
        cache["CMAKE_RANLIB"] = ""
    return toolchain, cache, env

def _cmake_impl(ctx):
    name = ctx.attr.lib_name or ctx.label.name
    source_root = _source_root(ctx.files.lib_source)
    cc_toolchain = find_cpp_toolchain(ctx)

    binaries = _declare(ctx, name, "bin", ctx.attr.out_binaries)
    shared_libs = _declare(ctx, name, "lib", ctx.attr.out_shared_libs)
    static_libs = _declare(ctx, name, "lib", ctx.attr.out_static_libs)
    dirs = []
    if ctx.attr.out_include_dir:
        dirs.append(ctx.actions.declare_directory("{}/{}".format(name, ctx.attr.out_include_dir)))
    dirs += [ctx.actions.declare_directory("{}/{}".format(name, d)) for d in ctx.attr.out_data_dirs]
    log = ctx.actions.declare_file("{}_foreign_cc/CMake.log".format(name))
    meta = ctx.actions.declare_file("{}_foreign_cc/meta.json".format(name))
    outputs = binaries + shared_libs + static_libs + dirs + [log, meta]
    install_dir = "{}/{}".format(ctx.bin_dir.path, "/".join([p for p in [ctx.label.package, name] if p]))

    deps = [dep[_CMakeDepInfo] for dep in ctx.attr.deps]
    toolchain_entries, toolchain_env = _toolchain_file_entries(ctx, cc_toolchain)
    toolchain_entries, cache, env = _configure_settings(ctx, toolchain_entries)
    generator, options = _generator(ctx.attr.generate_args)
    config = struct(
        name = name,
        source_dir = source_root,
        install_dir = install_dir,
        toolchain_file = toolchain_entries,
        cache_entries = cache,
        user_cache_entries = ctx.attr.cache_entries,
        generator = generator,
        options = options,
        build_args = ctx.attr.build_args,
        targets = ctx.attr.targets,
        install = ctx.attr.install,
        env = env,
        toolchain_env = toolchain_env,
        user_env = ctx.attr.env,
        postfix_script = ctx.attr.postfix_script,
        deps = [struct(lib_name = d.lib_name, install_dir = d.install_dir) for d in deps],
        outputs = [f.path for f in binaries + shared_libs + static_libs],
        output_dirs = [d.path for d in dirs],
        jobs = _parallel_jobs(ctx.attr.build_args),
        log = log.path,
        meta = meta.path,
    )
    config_file = ctx.actions.declare_file("{}_foreign_cc/config.json".format(name))
    ctx.actions.write(config_file, config.to_json())

    ctx.actions.run(
        executable = ctx.executable._cmake_build,
        arguments = [config_file.path],
        inputs = depset(
            [config_file] + ctx.files.lib_source + ctx.files.build_data,
            transitive = [d.files for d in deps] + [cc_toolchain.all_files],
        ),
        outputs = outputs,
        mnemonic = "CMake",
        progress_message = "CMake build of {} ({})".format(name, ctx.label),
        execution_requirements = {"resources:cpu:{}".format(_parallel_jobs(ctx.attr.build_args)): ""},
        use_default_shell_env = False,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )

    # As the real rule: DefaultInfo, CcInfo, and OutputGroupInfo with gen_dir, one group per
    # declared output file and CMake_logs (here also meta.json, which build evidence is made from).
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
        _CMakeDepInfo(lib_name = name, install_dir = install_dir, files = depset(binaries + shared_libs + static_libs + dirs)),
    ]

cmake = rule(
    implementation = _cmake_impl,
    doc = "Configures, builds and installs a CMake project: the subset of rules_foreign_cc 0.10.1's cmake() that Lanes uses, same attribute names, providers and behaviour.",
    attrs = {
        "lib_source": attr.label(mandatory = True, allow_files = True, doc = "All the project's files; the shallowest CMakeLists.txt is the source root."),
        "lib_name": attr.string(doc = "Output directory name; defaults to the target name."),
        "cache_entries": attr.string_dict(doc = "-D entries for the configure step, expanded as a `set -u` bash script expands double-quoted strings."),
        "generate_args": attr.string_list(doc = "Configure arguments; a -G argument names the generator (default Unix Makefiles)."),
        "generate_crosstool_file": attr.bool(default = True, doc = "Only True: the toolchain file is generated from the C++ toolchain."),
        "build_args": attr.string_list(doc = "Extra `cmake --build` arguments; `--parallel N` also reserves N CPUs."),
        "targets": attr.string_list(doc = "Targets to build, one `cmake --build` each; empty builds the default target."),
        "install": attr.bool(default = True, doc = "Run `cmake --install` into $INSTALLDIR."),
        "postfix_script": attr.string(doc = "Bash run in $BUILD_TMPDIR after the build (and install), under set -euo pipefail."),
        "env": attr.string_dict(doc = "Environment for CMake and the build; CC, CXX, CFLAGS, CXXFLAGS, ASMFLAGS go into the toolchain file."),
        "deps": attr.label_list(providers = [_CMakeDepInfo], doc = "cmake() targets, copied into $EXT_BUILD_DEPS/<their lib_name>."),
        "build_data": attr.label_list(allow_files = True, doc = "Extra inputs (toolkits, stubs)."),
        "out_binaries": attr.string_list(doc = "Files under $INSTALLDIR/bin."),
        "out_shared_libs": attr.string_list(doc = "Files under $INSTALLDIR/lib."),
        "out_static_libs": attr.string_list(doc = "Files under $INSTALLDIR/lib."),
        "out_include_dir": attr.string(default = "include"),
        "out_data_dirs": attr.string_list(doc = "Directories under $INSTALLDIR."),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
        # buildifier: disable=attr-cfg (as lanes/lane.bzl's _writer: the tool's path is in every
        # cmake() action's key; rules_foreign_cc 0.10.1 itself uses "exec" on Bazel >= 5).
        "_cmake_build": attr.label(default = "//foreign_cc/private:cmake_build", executable = True, cfg = "host"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
