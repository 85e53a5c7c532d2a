// membw: device-to-device copy bandwidth of GPU 0, the ceiling token generation is measured against.
// Counts bytes read plus bytes written; prints the median of 20 timed copies of a 4 GiB buffer.
#include <algorithm>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "membw: %s failed: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
    const size_t bytes = size_t(4) << 30;
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));  // never time copies of untouched (zero) pages
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < 3; i++) CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    std::vector<float> ms(20);
    for (float & t : ms) {
        CHECK(cudaEventRecord(start));
        CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    std::sort(ms.begin(), ms.end());
    const double median_s = ms[ms.size() / 2] / 1e3;
    printf("{\"bytes_moved\": %zu, \"median_ms\": %.4f, \"bandwidth_gbs\": %.1f}\n", 2 * bytes, median_s * 1e3, 2 * bytes / median_s / 1e9);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return 0;
}
