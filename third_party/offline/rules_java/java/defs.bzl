"""Stand-in for @rules_java//java:defs.bzl: re-exports Bazel's native Java rules.

Bazel 4.2.3's @bazel_tools//tools/jdk loads this while resolving registered toolchains, even for
builds with no Java in them.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_plugin = native.java_plugin
java_proto_library = getattr(native, "java_proto_library", None)
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
