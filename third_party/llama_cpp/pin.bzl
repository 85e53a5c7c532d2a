"""The llama.cpp pin: the one place it is written.

WORKSPACE (through repositories.bzl) and the Bzlmod extension (//third_party/bzlmod:llama_cpp.bzl)
both spread it into llama_cpp_archive. The patch stack is not listed here: the repository rule
reads it from `patch_series`, so adding a patch is one line there plus the patch file.
"""

LLAMA_CPP_PIN = {
    # The upstream commit the sdist vendors (checked against the sdist's .git/modules record).
    "commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
    "patch_series": "//third_party/llama_cpp/patches:series",
    "pypi_sdist": "llama-cpp-python==0.3.36",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "strip_prefix": "llama_cpp_python-0.3.36/vendor/llama.cpp",
}
