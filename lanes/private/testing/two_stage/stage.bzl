"""A cmake() stage of the fixture, configured as a lane's stages are (lanes/private/stage.bzl)."""

load("@rules_foreign_cc//foreign_cc:defs.bzl", "cmake")
load("//lanes/private:stage.bzl", "STAGE_FEATURES")

_LIKE_A_LANE = {
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_C_FLAGS": "-ffile-prefix-map=$EXT_BUILD_ROOT=.",
    "CMAKE_INSTALL_RPATH": "\\$ORIGIN/../lib",
}

def fixture_stage(name, cache_entries = {}, **kwargs):
    """cmake() with the lanes' relocatable, sandbox-path-free settings, Ninja and STAGE_FEATURES.

    Args:
      name: the target.
      cache_entries: entries beside the shared ones.
      **kwargs: any other cmake() attribute.
    """
    entries = dict(_LIKE_A_LANE)
    entries.update(cache_entries)
    cmake(
        name = name,
        cache_entries = entries,
        features = STAGE_FEATURES,
        generate_args = ["-GNinja"],
        **kwargs
    )
