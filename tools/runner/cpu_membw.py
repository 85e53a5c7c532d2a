"""Host memory bandwidth for the CPU lane's roofline: a STREAM-style copy with one thread per core.

Run by path (python3 cpu_membw.py THREADS): numpy copies a buffer far larger than the caches, each
thread its own slice (numpy releases the GIL while copying), and prints the same JSON as the CUDA
probe (membw.cu): bytes_moved counts bytes read plus written per sample (STREAM's convention; a
write-allocate read is not counted), samples_ms the wall time of each repetition. The runner
derives GB/s = bytes_moved / median_high(samples_ms), exactly as for the GPU probe.
"""

import json
import sys
import threading
import time

import numpy as np

BUFFER_BYTES = 1 << 30  # 1 GiB source + 1 GiB destination: past any CPU cache
REPETITIONS = 7


def main() -> int:
    threads = max(1, int(sys.argv[1])) if len(sys.argv) > 1 else 1
    src = np.ones(BUFFER_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    bounds = np.linspace(0, src.size, threads + 1, dtype=np.int64)

    def copy(i: int) -> None:
        np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]])

    samples = []
    for rep in range(REPETITIONS + 1):  # the first pass faults the pages in: not a sample
        workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if rep:
            samples.append(round(elapsed_ms, 4))
    if not np.array_equal(dst[:: 1 << 16], src[:: 1 << 16]):
        print("cpu_membw: the copy is wrong", file=sys.stderr)
        return 1
    print(json.dumps({"device": "host memory", "threads": threads, "bytes_moved": 2 * src.nbytes, "samples_ms": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
