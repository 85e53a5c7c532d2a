/* A link-time stand-in for the NVIDIA driver's libcuda.so.1, which the pinned toolkit wheels do
 * not carry. ggml-cuda's virtual-memory pool (VMM, upstream's default) calls the driver API, so
 * libggml-cuda must be linked against libcuda: this library gives the linker the SONAME and the
 * symbols, and the lane's libggml-cuda records `NEEDED libcuda.so.1`, which the host's driver
 * satisfies at run time. It is never shipped in a lane nor put on a library path; were it loaded
 * anyway, every call fails with CUDA_ERROR_STUB_LIBRARY, as NVIDIA's own stub does.
 *
 * Compiled against the pinned toolkit's cuda.h, so a signature that changes upstream fails here.
 * The functions are the driver calls in the pinned ggml-cuda sources; //tests:cuda_driver_stub_test
 * fails when the sources call one this file does not define.
 */
#include <cuda.h>

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  (void)error;
  *pStr = "libcuda link stub: the NVIDIA driver's libcuda.so.1 was not loaded";
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  (void)device;
  (void)ordinal;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  (void)pi;
  (void)attrib;
  (void)dev;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option) {
  (void)granularity;
  (void)prop;
  (void)option;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  (void)ptr;
  (void)size;
  (void)alignment;
  (void)addr;
  (void)flags;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  (void)ptr;
  (void)size;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags) {
  (void)handle;
  (void)size;
  (void)prop;
  (void)flags;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  (void)handle;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  (void)ptr;
  (void)size;
  (void)offset;
  (void)handle;
  (void)flags;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  (void)ptr;
  (void)size;
  return CUDA_ERROR_STUB_LIBRARY;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  (void)ptr;
  (void)size;
  (void)desc;
  (void)count;
  return CUDA_ERROR_STUB_LIBRARY;
}
