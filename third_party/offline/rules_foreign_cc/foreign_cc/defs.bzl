"""Offline shim for @rules_foreign_cc//foreign_cc:defs.bzl (only cmake() is provided)."""

load("//foreign_cc/private:cmake.bzl", _CMakeInfo = "CMakeInfo", _cmake = "cmake")

cmake = _cmake
CMakeInfo = _CMakeInfo
