# @vulkan_lavapipe: Mesa's lavapipe software ICD (vulkan_lavapipe_lock.txt), for negative tests
# only: software ICDs never certify. Use (toolchains/vulkan/README.md):
#   VK_DRIVER_FILES=<this repo>/lvp_icd.x86_64.json
#   LD_LIBRARY_PATH=<this repo>/usr/lib/x86_64-linux-gnu:<@vulkan_sdk>/usr/lib/x86_64-linux-gnu
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "lavapipe",
    srcs = ["lvp_icd.x86_64.json"] + glob(
        ["usr/lib/x86_64-linux-gnu/**"],
        exclude = ["**/* *"],
    ),
)

exports_files([
    "ldd.txt",
    "lvp_icd.x86_64.json",
    "packages.json",
])
