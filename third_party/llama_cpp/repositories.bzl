"""WORKSPACE macro for @llama_cpp (WORKSPACE may not spread a dict into a rule call; a .bzl may)."""

load("//third_party/llama_cpp:llama_cpp_archive.bzl", "llama_cpp_archive")
load("//third_party/llama_cpp:pin.bzl", "LLAMA_CPP_PIN")

def llama_cpp_repositories():
    """@llama_cpp at the pin of pin.bzl, with the patch stack of patches/series."""
    llama_cpp_archive(
        name = "llama_cpp",
        **LLAMA_CPP_PIN
    )
