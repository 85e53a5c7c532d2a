// membw: device-to-device copy bandwidth of one GPU, the ceiling token generation is measured against.
// Run by the speed step (compiled with nvcc there); its stdout is kept as speed.membw.json and the
// runner derives the bandwidth from it: bytes_moved / median(samples_ms). Counts bytes read plus
// bytes written; 20 timed copies of a 4 GiB buffer after 3 untimed ones.
//   usage: membw [gpu index, default 0]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "membw: %s failed: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main(int argc, char ** argv) {
    const int device = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
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
    std::vector<float> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median_s = sorted[sorted.size() / 2] / 1e3;
    printf("{\"device\": \"%s\", \"gpu_index\": %d, \"bytes_moved\": %zu, \"samples_ms\": [", prop.name, device, 2 * bytes);
    for (size_t i = 0; i < ms.size(); i++) printf("%s%.6f", i ? ", " : "", ms[i]);
    printf("], \"median_ms\": %.6f, \"bandwidth_gbs\": %.1f}\n", median_s * 1e3, 2 * bytes / median_s / 1e9);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return 0;
}
