"""Offline stand-in for @rules_foreign_cc//foreign_cc:defs.bzl of rules_foreign_cc 0.10.1.

Only cmake() is provided, with that release's attribute names and providers (DefaultInfo, CcInfo,
OutputGroupInfo with gen_dir, per-file groups and CMake_logs); nothing the real release lacks.
"""

load("//foreign_cc/private:cmake.bzl", _cmake = "cmake")

cmake = _cmake
