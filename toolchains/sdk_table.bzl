"""The SDK table: every lane SDK's detector, the only list of them.

@lane_sdks (sdk_detect.bzl) runs each `detect`, sdk.bzl applies a lane's `build`; neither names an
SDK. Adding an SDK is its detector file (toolchains/<sdk>_detect.bzl, an `sdk_detector(...)` of
sdk_result.bzl; in toolchains/<sdk>/ beside its repository rules when it has some, as CUDA and
Vulkan do) and one line below.
"""

load("//toolchains:host_cc_detect.bzl", "HOST_CC_SDK")
load("//toolchains:metal_detect.bzl", "METAL_SDK")
load("//toolchains:rocm_detect.bzl", "ROCM_SDK")
load("//toolchains/cuda:cuda_detect.bzl", "CUDA_SDK")
load("//toolchains/vulkan:vulkan_detect.bzl", "VULKAN_SDK")

SDK_DETECTORS = [
    HOST_CC_SDK,
    CUDA_SDK,
    VULKAN_SDK,
    ROCM_SDK,
    METAL_SDK,
]

SDK_DETECTORS_BY_NAME = {detector.name: detector for detector in SDK_DETECTORS}
