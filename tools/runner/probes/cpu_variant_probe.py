"""Runs the ops that have CPU-variant-specific kernels on one variant of the CPU lane and saves their
outputs, for the cpu_variants check to compare with the x64 baseline variant.

Run by path, one process per variant (python3 cpu_variant_probe.py --lib_dir LIB --variant_dir BIN --variant NAME
--out OUT.npz): a variant that faults (SIGILL on an instruction the host lacks or has not enabled)
takes only its own process down, and the runner names the signal. The variant is loaded with
ggml_backend_load(), which refuses it (score 0) when the host's CPU cannot run it: exit status
NOT_RUNNABLE. Every weight is quantized by libggml-base's reference quantizer (the same bytes for
every variant), set into each buffer type the variant offers (its default one and its extra ones:
CPU_REPACK's interleaved blocks, AMX's tiles), and multiplied by batches of 1 and more tokens.
With --save_inputs the quantized bytes are saved too: the check dequantizes them with gguf-py, not
with the lane, for its float64 reference.

stdout: one `case <id> <status> [detail]` line per case (status: computed, unsupported, error),
then `variant <name> score <score> buffer_types <names>`. Inputs are seeded from the case id, so
every variant sees the same numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import pathlib
import sys

import numpy as np

NOT_RUNNABLE = 3  # exit status: ggml_backend_load refused the variant on this host (score 0)

# enum ggml_type values (ggml.h) of the weight types with variant-specific kernels.
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 8, "q4_k": 12, "q5_k": 13, "q6_k": 14,
              "iq4_nl": 20}
MUL_MAT_TYPES = ("f16", "q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_nl")
# One token (the GEMV paths, AMX's avx512-vnni fast path) and more (the GEMM/tile paths; 37 leaves
# a partial tile of every tile height).
BATCHES = (1, 8, 37)
MUL_MAT_K, MUL_MAT_N = 512, 128  # a multiple of every block (QK_K = 256) and of AMX's 2 x TILE_N
FLASH_ATTN_KV_TYPES = ("f16", "q8_0")
FLASH_ATTN_QUERIES = (1, 8)
FA_HEAD_DIM, FA_HEADS, FA_KV_HEADS, FA_KV = 128, 4, 2, 96
DEFAULT_BUFFER = "default"


@dataclasses.dataclass(frozen=True)
class Case:
    op: str           # MUL_MAT or FLASH_ATTN_EXT
    weight_type: str  # MUL_MAT: src0's type; FLASH_ATTN_EXT: K and V's type
    batch: int        # tokens (MUL_MAT's src1 columns, FLASH_ATTN_EXT's queries)
    buffer: str       # where the weight lives: "default" or an extra buffer type's name

    @property
    def case_id(self) -> str:
        return f"{self.op}.{self.weight_type}.b{self.batch}.{self.buffer}"

    @property
    def default_case_id(self) -> str:
        """The same case with its weight in the default buffer (what an extra buffer is compared with)."""
        return dataclasses.replace(self, buffer=DEFAULT_BUFFER).case_id

    @property
    def inputs_id(self) -> str:
        """Same numbers in every buffer type: only the placement differs."""
        return f"{self.op}.{self.weight_type}.b{self.batch}"


def baseline_cases() -> list[Case]:
    """Every case in the default buffer type: what the x64 baseline computes."""
    cases = [Case("MUL_MAT", t, b, DEFAULT_BUFFER) for t in MUL_MAT_TYPES for b in BATCHES]
    return cases + [Case("FLASH_ATTN_EXT", t, q, DEFAULT_BUFFER) for t in FLASH_ATTN_KV_TYPES for q in FLASH_ATTN_QUERIES]


def cases_for(extra_buffers: list[str]) -> list[Case]:
    """The baseline cases plus every MUL_MAT case again with its weight in each extra buffer type."""
    return baseline_cases() + [Case("MUL_MAT", t, b, name) for name in extra_buffers
                               for t in MUL_MAT_TYPES for b in BATCHES]


def rng_for(case: Case) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(case.inputs_id.encode()).digest()[:8], "little"))


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    signatures = {
        "ggml_backend_load": (P, [ctypes.c_char_p]),
        "ggml_backend_reg_dev_get": (P, [P, SZ]),
        "ggml_backend_reg_get_proc_address": (P, [P, ctypes.c_char_p]),
        "ggml_backend_dev_init": (P, [P, ctypes.c_char_p]),
        "ggml_backend_dev_buffer_type": (P, [P]),
        "ggml_backend_dev_supports_op": (ctypes.c_bool, [P, P]),
        "ggml_backend_buft_name": (ctypes.c_char_p, [P]),
        "ggml_backend_alloc_ctx_tensors_from_buft": (P, [P, P]),
        "ggml_backend_buffer_free": (None, [P]),
        "ggml_backend_tensor_set": (None, [P, P, SZ, SZ]),
        "ggml_backend_tensor_get": (None, [P, P, SZ, SZ]),
        "ggml_backend_graph_compute": (ctypes.c_int, [P, P]),
        "ggml_backend_free": (None, [P]),
        "ggml_init": (P, [_InitParams]),
        "ggml_free": (None, [P]),
        "ggml_tensor_overhead": (SZ, []),
        "ggml_graph_overhead": (SZ, []),
        "ggml_new_tensor_2d": (P, [P, ctypes.c_int, I64, I64]),
        "ggml_new_tensor_4d": (P, [P, ctypes.c_int, I64, I64, I64, I64]),
        "ggml_mul_mat": (P, [P, P, P]),
        "ggml_flash_attn_ext": (P, [P, P, P, P, P, ctypes.c_float, ctypes.c_float, ctypes.c_float]),
        "ggml_new_graph": (P, [P]),
        "ggml_build_forward_expand": (None, [P, P]),
        "ggml_nbytes": (SZ, [P]),
        "ggml_row_size": (SZ, [ctypes.c_int, I64]),
        "ggml_quantize_chunk": (SZ, [ctypes.c_int, P, P, I64, I64, I64, P]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def quantize(ggml: ctypes.CDLL, type_name: str, values: np.ndarray) -> bytes:
    """Rows of float32 in a ggml type, by libggml-base's reference quantizer."""
    rows, per_row = values.shape
    ggml_type = GGML_TYPES[type_name]
    out = ctypes.create_string_buffer(ggml.ggml_row_size(ggml_type, per_row) * rows)
    src = np.ascontiguousarray(values, dtype=np.float32)
    ggml.ggml_quantize_chunk(ggml_type, src.ctypes.data, out, 0, rows, per_row, None)
    return out.raw


def mul_mat_inputs(case: Case) -> tuple[np.ndarray, np.ndarray]:
    rng = rng_for(case)
    return (rng.standard_normal((MUL_MAT_N, MUL_MAT_K)).astype(np.float32),
            rng.standard_normal((case.batch, MUL_MAT_K)).astype(np.float32))


def flash_attn_inputs(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = rng_for(case)
    q = rng.standard_normal((FA_HEADS, case.batch, FA_HEAD_DIM)).astype(np.float32)
    k = rng.standard_normal((FA_KV_HEADS, FA_KV, FA_HEAD_DIM)).astype(np.float32)
    v = rng.standard_normal((FA_KV_HEADS, FA_KV, FA_HEAD_DIM)).astype(np.float32)
    # Causal: query i sees the first FA_KV - batch + 1 + i keys.
    mask = np.zeros((case.batch, FA_KV), dtype=np.float16)
    for i in range(case.batch):
        mask[i, FA_KV - case.batch + 1 + i:] = -np.inf
    return q, k, v, mask


def _library(lib_dir: pathlib.Path, name: str) -> pathlib.Path:
    """lib_dir/name.so.0 (what a lane ships) or lib_dir/name.so (a build tree)."""
    for candidate in (lib_dir / f"{name}.so.0", lib_dir / f"{name}.so"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{lib_dir}: no {name}.so.0 or {name}.so")


def quantized_inputs(ggml: ctypes.CDLL, case: Case) -> dict[str, np.ndarray]:
    """The bytes a case's weights (MUL_MAT's src0, FLASH_ATTN_EXT's K and V) were set from."""
    def raw(values: np.ndarray) -> np.ndarray:
        return np.frombuffer(quantize(ggml, case.weight_type, values), dtype=np.uint8)

    if case.op == "MUL_MAT":
        return {f"input.{case.inputs_id}.w": raw(mul_mat_inputs(case)[0])}
    _, k, v, _ = flash_attn_inputs(case)
    rows = FA_KV_HEADS * FA_KV
    return {f"input.{case.inputs_id}.k": raw(k.reshape(rows, FA_HEAD_DIM)),
            f"input.{case.inputs_id}.v": raw(v.reshape(rows, FA_HEAD_DIM))}


class Variant:
    def __init__(self, lib_dir: pathlib.Path, variant_path: pathlib.Path, threads: int):
        mode = ctypes.RTLD_GLOBAL
        ctypes.CDLL(str(_library(lib_dir, "libggml-base")), mode=mode)
        self.ggml = _bind(ctypes.CDLL(str(_library(lib_dir, "libggml")), mode=mode))
        self.reg = self.ggml.ggml_backend_load(str(variant_path).encode())
        if not self.reg:
            raise NotRunnable(f"ggml_backend_load refused {variant_path.name} on this host")
        self.score = int(ctypes.CDLL(str(variant_path)).ggml_backend_score())
        self.dev = self.ggml.ggml_backend_reg_dev_get(self.reg, 0)
        self.backend = self.ggml.ggml_backend_dev_init(self.dev, None)
        set_threads = self.ggml.ggml_backend_reg_get_proc_address(self.reg, b"ggml_backend_set_n_threads")
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(set_threads)(self.backend, threads)
        self.buffers = {DEFAULT_BUFFER: self.ggml.ggml_backend_dev_buffer_type(self.dev)}
        get_extra = self.ggml.ggml_backend_reg_get_proc_address(self.reg, b"ggml_backend_dev_get_extra_bufts")
        if get_extra:
            extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(get_extra)(self.dev)
            i = 0
            while extra and extra[i]:
                self.buffers[self.ggml.ggml_backend_buft_name(extra[i]).decode()] = extra[i]
                i += 1

    def _context(self, n_tensors: int) -> int:
        size = n_tensors * self.ggml.ggml_tensor_overhead() + self.ggml.ggml_graph_overhead()
        ctx = self.ggml.ggml_init(_InitParams(size, None, True))
        if not ctx:
            raise RuntimeError("ggml_init failed")
        return ctx

    def run(self, case: Case) -> tuple[str, np.ndarray | None]:
        g = self.ggml
        weights_ctx, ctx = self._context(4), self._context(16)
        buffers = []
        try:
            if case.op == "MUL_MAT":
                w_values, x_values = mul_mat_inputs(case)
                w = g.ggml_new_tensor_2d(weights_ctx, GGML_TYPES[case.weight_type], MUL_MAT_K, MUL_MAT_N)
                x = g.ggml_new_tensor_2d(ctx, GGML_TYPES["f32"], MUL_MAT_K, case.batch)
                out = g.ggml_mul_mat(ctx, w, x)
                inputs = [(w, quantize(g, case.weight_type, w_values)), (x, x_values.tobytes())]
                shape = (case.batch, MUL_MAT_N)
            else:
                q_values, k_values, v_values, mask_values = flash_attn_inputs(case)
                kv_type = GGML_TYPES[case.weight_type]
                q = g.ggml_new_tensor_4d(ctx, GGML_TYPES["f32"], FA_HEAD_DIM, case.batch, FA_HEADS, 1)
                k = g.ggml_new_tensor_4d(weights_ctx, kv_type, FA_HEAD_DIM, FA_KV, FA_KV_HEADS, 1)
                v = g.ggml_new_tensor_4d(weights_ctx, kv_type, FA_HEAD_DIM, FA_KV, FA_KV_HEADS, 1)
                mask = g.ggml_new_tensor_4d(ctx, GGML_TYPES["f16"], FA_KV, case.batch, 1, 1)
                out = g.ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0 / np.sqrt(FA_HEAD_DIM), 0.0, 0.0)
                rows = FA_KV_HEADS * FA_KV
                inputs = [(q, q_values.tobytes()), (mask, mask_values.tobytes()),
                          (k, quantize(g, case.weight_type, k_values.reshape(rows, FA_HEAD_DIM))),
                          (v, quantize(g, case.weight_type, v_values.reshape(rows, FA_HEAD_DIM)))]
                shape = (case.batch, FA_HEADS, FA_HEAD_DIM)
            graph = g.ggml_new_graph(ctx)
            g.ggml_build_forward_expand(graph, out)
            for tensors_ctx, buffer_name in ((weights_ctx, case.buffer), (ctx, DEFAULT_BUFFER)):
                buf = g.ggml_backend_alloc_ctx_tensors_from_buft(tensors_ctx, self.buffers[buffer_name])
                if not buf:
                    return "error", None
                buffers.append(buf)
            # Asked once the weight has its buffer (an extra buffer type answers for its own tensors)
            # and before any data is set: an extra buffer repacks in set_tensor only the tensors it
            # took, like llama.cpp, which places a weight there only when the op is supported.
            if not g.ggml_backend_dev_supports_op(self.dev, out):
                return "unsupported", None
            for tensor, data in inputs:
                if len(data) != g.ggml_nbytes(tensor):
                    return "error", None
                g.ggml_backend_tensor_set(tensor, data, 0, len(data))
            if g.ggml_backend_graph_compute(self.backend, graph) != 0:
                return "error", None
            result = np.empty(int(np.prod(shape)), dtype=np.float32)
            g.ggml_backend_tensor_get(out, result.ctypes.data, 0, result.nbytes)
            return "computed", result.reshape(shape)
        finally:
            for buf in buffers:
                g.ggml_backend_buffer_free(buf)
            g.ggml_free(ctx)
            g.ggml_free(weights_ctx)


class NotRunnable(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib_dir", type=pathlib.Path, required=True)
    parser.add_argument("--variant", required=True, help="the variant's name (libggml-cpu-<name>.so)")
    parser.add_argument("--variant_dir", type=pathlib.Path, help="where libggml-cpu-<name>.so is (default: LIB_DIR)")
    parser.add_argument("--variant_path", type=pathlib.Path, help="the variant's library itself (default: in VARIANT_DIR)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--save_inputs", action="store_true",
                        help="also save the quantized bytes each case's weights were set from (input.<inputs id>.w/.k/.v): "
                             "the check dequantizes them itself for its float64 reference")
    args = parser.parse_args(argv)
    path = args.variant_path or (args.variant_dir or args.lib_dir) / f"libggml-cpu-{args.variant}.so"
    try:
        variant = Variant(args.lib_dir, path, args.threads)
    except NotRunnable as err:
        print(f"variant {args.variant} not_runnable: {err}", flush=True)
        return NOT_RUNNABLE
    extra = [name for name in variant.buffers if name != DEFAULT_BUFFER]
    outputs: dict[str, np.ndarray] = {}
    for case in cases_for(extra):
        # Flushed before the op runs: a variant that faults leaves the case it died in as its last line.
        print(f"case {case.case_id} start", flush=True)
        status, result = variant.run(case)
        print(f"case {case.case_id} {status}", flush=True)
        if result is not None:
            outputs[case.case_id] = result
        if args.save_inputs and case.buffer == DEFAULT_BUFFER:
            outputs.update(quantized_inputs(variant.ggml, case))
    tmp = args.out.with_name(args.out.name + ".tmp.npz")
    np.savez(tmp, **outputs)
    tmp.replace(args.out)
    print(f"variant {args.variant} score {variant.score} buffer_types {','.join(variant.buffers)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
