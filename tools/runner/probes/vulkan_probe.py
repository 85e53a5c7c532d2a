"""The Vulkan loader's own device list, printed like `vulkaninfo --summary` (GPU<n>: key = value).

  python3 -m tools.runner.probes.vulkan_probe

Asks the loader (libvulkan.so.1, found the way the lane's libggml-vulkan finds it) for every
physical device and its VkPhysicalDeviceProperties and VkPhysicalDeviceDriverProperties, through
ctypes: no vulkan-tools (and none of the X11/Wayland libraries vulkaninfo links) on the GPU host.
Also prints which loader and ICD manifests were used, so the run records them. Exit 1 (with the
VkResult) when the loader or an instance cannot be had; exit 0 with zero GPU blocks when the
loader sees no device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import struct
import sys

VK_SUCCESS = 0
VK_STRUCTURE_TYPE_APPLICATION_INFO = 0
VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1
VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000
VK_API_VERSION_1_2 = (1 << 22) | (2 << 12)

DEVICE_TYPES = {
    0: "PHYSICAL_DEVICE_TYPE_OTHER",
    1: "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU",
    2: "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU",
    3: "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU",
    4: "PHYSICAL_DEVICE_TYPE_CPU",
}
# VkPhysicalDeviceProperties: apiVersion, driverVersion, vendorID, deviceID, deviceType, then
# deviceName[256]; the limits that follow are not read, but the buffer must hold them all.
_PROPERTIES_HEAD = struct.Struct("<IIIIi256s")
_PROPERTIES_SIZE = 1024  # sizeof(VkPhysicalDeviceProperties) is 824 on x86_64


class _ApplicationInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_ApplicationInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


class _DriverProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("driverID", ctypes.c_int),
                ("driverName", ctypes.c_char * 256), ("driverInfo", ctypes.c_char * 256),
                ("conformanceVersion", ctypes.c_uint8 * 4)]


class _Properties2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("properties", ctypes.c_uint8 * _PROPERTIES_SIZE)]


def version_string(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def load_loader() -> tuple[ctypes.CDLL, str]:
    errors = []
    for name in ("libvulkan.so.1", ctypes.util.find_library("vulkan") or ""):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as err:
            errors.append(str(err))
            continue
        return lib, _loaded_path(name)
    raise OSError("no Vulkan loader (libvulkan.so.1): " + "; ".join(errors))


def _loaded_path(soname: str) -> str:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if soname.split(".so")[0] in line and "/" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return soname


def icd_manifests() -> list[str]:
    """The ICD manifests the loader was pointed at, with the library each names."""
    lines = []
    for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES"):
        for path in filter(None, os.environ.get(var, "").split(":")):
            try:
                library = json.loads(open(path).read()).get("ICD", {}).get("library_path", "?")
            except (OSError, ValueError) as err:
                library = f"unreadable: {err}"
            lines.append(f"{var} {path} -> {library}")
    return lines or ["ICD manifests: the loader's default search (VK_DRIVER_FILES/VK_ICD_FILENAMES unset)"]


def probe() -> int:
    try:
        vk, loader_path = load_loader()
    except OSError as err:
        print(f"ERROR: {err}")
        return 1
    print(f"loader = {loader_path}")
    for line in icd_manifests():
        print(line)
    vk.vkCreateInstance.restype = ctypes.c_int
    app = _ApplicationInfo(VK_STRUCTURE_TYPE_APPLICATION_INFO, None, b"lanes-vulkan-probe", 1, b"lanes", 1, VK_API_VERSION_1_2)
    info = _InstanceCreateInfo(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    result = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if result != VK_SUCCESS:
        print(f"ERROR: vkCreateInstance returned VkResult {result}")
        return 1
    try:
        count = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        devices = (ctypes.c_void_p * max(count.value, 1))()
        result = vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), devices)
        if result not in (VK_SUCCESS, 5):  # 5 = VK_INCOMPLETE
            print(f"ERROR: vkEnumeratePhysicalDevices returned VkResult {result}")
            return 1
        print(f"devices = {count.value}")
        get_props2 = vk.vkGetPhysicalDeviceProperties2
        for index in range(count.value):
            driver = _DriverProperties(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, None)
            props = _Properties2(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, ctypes.cast(ctypes.pointer(driver), ctypes.c_void_p))
            get_props2(ctypes.c_void_p(devices[index]), ctypes.byref(props))
            api, drv, vendor, device_id, dtype, raw_name = _PROPERTIES_HEAD.unpack_from(bytes(props.properties))
            name = raw_name.split(b"\0", 1)[0].decode(errors="replace")
            print(f"GPU{index}:")
            print(f"\tapiVersion         = {version_string(api)}")
            print(f"\tdriverVersion      = {drv} (0x{drv:x})")
            print(f"\tvendorID           = 0x{vendor:04x}")
            print(f"\tdeviceID           = 0x{device_id:04x}")
            print(f"\tdeviceType         = {DEVICE_TYPES.get(dtype, str(dtype))}")
            print(f"\tdeviceName         = {name}")
            print(f"\tdriverID           = {driver.driverID}")
            print(f"\tdriverName         = {driver.driverName.decode(errors='replace')}")
            print(f"\tdriverInfo         = {driver.driverInfo.decode(errors='replace')}")
    finally:
        vk.vkDestroyInstance(instance, None)
    return 0


if __name__ == "__main__":
    sys.exit(probe())
