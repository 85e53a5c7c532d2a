"""Offline shim for @rules_python//python:defs.bzl.

Same load label and symbols as the real rules_python, so BUILD files work unchanged when the
real ruleset is available; offline these are Bazel 4.2.3's native Python rules.
"""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

py_binary = native.py_binary
py_library = native.py_library
py_runtime = native.py_runtime
py_test = native.py_test
py_runtime_pair = _py_runtime_pair
