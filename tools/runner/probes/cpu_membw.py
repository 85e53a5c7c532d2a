"""Host memory read bandwidth for the CPU lane's roofline, one thread per llama-bench thread.

Run by path (python3 cpu_membw.py THREADS). Token generation streams the weights, so what bounds
it is read bandwidth: each thread scans its slice of a 1 GiB buffer of non-zero bytes (past any
CPU cache; non-zero so no page is the shared zero page) with glibc's memchr for a byte that is not
there (vectorised, read-only; ctypes releases the GIL during the call). The buffer is anonymous
memory advised for transparent huge pages where the kernel offers them: the roofline is the
memory's capacity, and with 4 KiB pages page walks, not DRAM, cut a scan's rate (measured on a
zen4 host: 26-32 GB/s with 4 KiB pages, 33-34 GB/s with huge pages, token generation itself
31.5 GB/s). Prints the JSON the GPU probe (membw.cu) prints: bytes_moved = bytes read per sample,
samples_ms = each repetition's wall time; "statistic": "fastest" tells the runner to divide by the
fastest sample: on a shared host other processes only slow a sample down, so the fastest is the
capacity.
"""

import ctypes
import ctypes.util
import json
import mmap
import sys
import threading
import time

BUFFER_BYTES = 1 << 30
REPETITIONS = 15


def main() -> int:
    threads = max(1, int(sys.argv[1])) if len(sys.argv) > 1 else 1
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.memchr.restype = ctypes.c_void_p
    libc.memchr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    buf = mmap.mmap(-1, BUFFER_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages = "4KiB"
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
            pages = "huge (madvised)"
        except OSError:  # a kernel without transparent huge pages
            pass
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    ctypes.memset(base, 2, BUFFER_BYTES)  # every page written, with a byte memchr is not looking for
    bounds = [BUFFER_BYTES * i // threads for i in range(threads + 1)]
    found = []

    def scan(i: int) -> None:
        found.append(libc.memchr(base + bounds[i], 1, bounds[i + 1] - bounds[i]))

    samples = []
    for rep in range(REPETITIONS + 1):  # the first pass warms the TLB: not a sample
        workers = [threading.Thread(target=scan, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if rep:
            samples.append(round(elapsed_ms, 4))
    if any(f is not None for f in found):
        print("cpu_membw: memchr found a byte that is not in the buffer", file=sys.stderr)
        return 1
    print(json.dumps({"device": "host memory (read)", "threads": threads, "bytes_moved": BUFFER_BYTES,
                      "pages": pages, "statistic": "fastest", "samples_ms": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
