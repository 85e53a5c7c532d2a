"""Per-op oracle for quantized and non-llama graphs: every node recomputed in float64 from the lane's
own inputs (the node dump), the way test-backend-ops checks one op at a time.

The chained oracle (op_oracle_graph) follows one float64 forward pass through the graph, which
only works while the lane's nodes are the model's arithmetic in float32. With quantized weights
ggml quantizes every matmul's activations to 8 bits (F16 weights: to F16), so errors of the
order of the quantization step enter at every matmul and compound along the chain. Here each
node's reference is computed from the lane's dumped values of its sources (and the GGUF's weights,
dequantized by gguf-py), so one node's error never enters another's reference.

Tolerances (an element passes when |lane - ref| <= tol):
  - MUL_MAT with a weight: the activation row x is quantized in blocks (Q8_0/Q8_1: 32 values,
    Q8_K for K-quants: 256) with step d = max|x_block| / 127, rounding error uniform in +-d/2
    (F16 weights: the F16 rounding of x). The output's error is then a sum of K independent terms
    w_k e_k, variance sum_k w_k^2 d_k^2 / 12, plus Q8_0/Q8_1's F16 storage of each block's scale
    (and Q8_1's block sum): one rounding of <= 2^-11 relative per block, variance (2^-11)^2 / 3 x
    the block's share of the dot product squared (its sum x the block's largest |w|, bounding the
    weight block's min, for Q8_1). tol = 6 sigma, computed per element from the lane's own x and
    the weight, + K 2^-24 sum_k |w_k x_k| (float32 summation, rigorous in any order). A wrong
    block, scale, row or kernel moves the output by the signal itself, far outside.
  - MUL_MAT of two nodes (KQ, KQV), and the element-wise ops: float32 arithmetic on the lane's
    inputs, 1e-5 of the node's rms + 1e-5 relative, except ROPE (float32 angles built by repeated
    products: 2e-4), GELU-based ops (ggml's F16 table: 2e-3), SOFT_MAX (1e-5), and FLASH_ATTN_EXT and the
    F16 casts (the chained oracle's bounds).
The per-op counts and the worst error/tolerance ratio are the figures; a node this module cannot
recompute (an op or a source it does not know) is unresolved and fails the check.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import gguf
import numpy as np

from tools.model import reference_forward as rf
from tools.runner.checks.op_oracle_dump import DumpedNode
from tools.runner.checks.op_oracle_graph import (
    F16_ULP_REL,
    VIEW_OPS,
    NodeResult,
    _aligned,
    mark_worst,
)
from tools.runner.checks.op_oracle_graph import (
    TOLERANCES as CHAINED_TOLERANCES,
)
from tools.runner.checks.op_oracle_log import Node, OracleLogError, Run

Q = gguf.GGMLQuantizationType
# The activation format of a quantized weight's matmul (ggml type traits vec_dot_type): block size.
_Q8_BLOCK = {Q.Q4_0: 32, Q.Q4_1: 32, Q.Q5_0: 32, Q.Q5_1: 32, Q.Q8_0: 32,
             Q.Q2_K: 256, Q.Q3_K: 256, Q.Q4_K: 256, Q.Q5_K: 256, Q.Q6_K: 256}
SIGMAS = 6.0
# Q8_0/Q8_1 store each block's scale d (and Q8_1 its sum s) as F16: relative error <= 2^-11, one
# independent rounding per block. Q8_K keeps d in float32.
F16_STORAGE_REL = 2.0 ** -11
_F16_SCALED = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}
_WITH_MIN = {Q.Q4_1, Q.Q5_1}  # their dot adds min x s, with s stored as F16
# Float32 summation of K products: |error| <= K u sum |w x| (u = 2^-24), whatever the order.
F32_ACCUMULATION_REL = 2.0 ** -24
ELEMENTWISE = (1e-5, 1e-5)
LOCAL_TOLERANCES: dict[str, tuple[float, float]] = {
    "GET_ROWS": ELEMENTWISE, "RMS_NORM": ELEMENTWISE, "MUL": ELEMENTWISE, "ADD": ELEMENTWISE,
    "SET_ROWS": ELEMENTWISE, "CONT": ELEMENTWISE, "SCALE": ELEMENTWISE, "SOFT_MAX": ELEMENTWISE,
    "SILU": ELEMENTWISE, "SWIGLU": ELEMENTWISE, "MUL_MAT": ELEMENTWISE,
    "ROPE": (2e-4, 2e-4), "GELU": (2e-3, 2e-3), "GEGLU": (2e-3, 2e-3),
    "CPY": CHAINED_TOLERANCES["CPY"], "FLASH_ATTN_EXT": CHAINED_TOLERANCES["FLASH_ATTN_EXT"],
}
_LAYER = re.compile(r"-(\d+)\b")
_CACHE = re.compile(r"^cache_([kv])_l(\d+)\b")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the graph's op parameters are for this model (eval-callback prints no op params)."""

    rms_eps: float
    head_dim: int
    n_rot: int
    rope_neox: bool
    rope_base: Callable[[int], float]
    rope_freq_scale: float
    freq_factors: np.ndarray | None
    kq_scale: float
    window: Callable[[int], int]  # sliding window of layer il (0: none)
    scales: dict[str, float]  # SCALE source name prefix (the scaled tensor) -> factor


def architecture(path, reader: gguf.GGUFReader) -> Architecture:
    arch = str(reader.fields["general.architecture"].contents())
    if arch in ("llama", "qwen2"):
        from tools.model import reference_forward

        hp = reference_forward.load_hparams(path, reader)
        factors = next((rf.dequantize(t) for t in reader.tensors if t.name == "rope_freqs.weight"), None)
        return Architecture(hp.rms_eps, hp.head_size, hp.n_rot, hp.rope_neox, lambda il: hp.rope_freq_base,
                            hp.rope_freq_scale, factors, 1.0 / math.sqrt(hp.head_size), lambda il: 0, {})
    if arch == "gemma3":
        from tools.model import reference_gemma3

        hp = reference_gemma3.load_hparams(path, reader)
        return Architecture(hp.rms_eps, hp.head_dim, hp.head_dim, True, hp.rope_base, 1.0, None, 1.0,
                            lambda il: hp.sliding_window if hp.is_local(il) else 0,
                            {"embd": math.sqrt(hp.n_embd), "Qcur": hp.attention_scale})
    raise rf.UnsupportedModelError(f"{path}: architecture {arch!r} has no per-op parameters here")


class Weights:
    """The GGUF's tensors by name, dequantized by gguf-py on first use (float64)."""

    def __init__(self, reader: gguf.GGUFReader):
        self.tensors = {t.name: t for t in reader.tensors}
        self.cache: dict[str, np.ndarray] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def type(self, name: str) -> Q:
        return self.tensors[name].tensor_type

    def get(self, name: str) -> np.ndarray:
        if name not in self.cache:
            self.cache[name] = np.asarray(rf.dequantize(self.tensors[name]), np.float64)
        return self.cache[name]


def _shape(ne: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    return (ne[3], ne[2], ne[1], ne[0])


def _layer(name: str) -> int | None:
    m = _LAYER.search(name) or _CACHE.match(name)
    return int(m.groups()[-1]) if m else None


def node_layer(node: Node) -> int | None:
    """The block a node belongs to: its name's (Qcur-3, cache_k_l3 (view)), else its sources' (flash
    attention's output is named node_<n>; gemma3's scaled Q it reads is node_<n> too, its K cache
    view cache_k_l3 ...)."""
    for name in (node.name, node.src0, node.src1):
        il = _layer(name)
        if il is not None:
            return il
    return None


def keep_layers_for(n_layer: int) -> set[int]:
    """The blocks whose nodes are evaluated and kept: the first, the middle and the last. The same
    kernels run in every block; the end-to-end logits (reference_parity) cover all of them."""
    return {0, n_layer // 2, n_layer - 1}


def stored_nodes(nodes: list[Node], keep_layers: set[int]) -> tuple[list[int], set[int]]:
    """(indices of the nodes kept in the dump, indices evaluated): every node of a kept block and
    every layer-less node (embedding, output) is evaluated; the latest earlier node of each source
    name they read is kept too, as their input (the previous block's output)."""
    evaluated = {i for i, n in enumerate(nodes) if node_layer(n) is None or node_layer(n) in keep_layers}
    kept = set(evaluated)
    latest: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if i in evaluated:
            for src in (n.src0, n.src1):
                if src in latest:
                    kept.add(latest[src])
        latest[n.name] = i
    return sorted(kept), evaluated


def _visible(n_tokens: int, n_kv: int, window: int) -> np.ndarray:
    """[n_tokens, n_kv]: token t (position t, cell t of a fresh cache) reads cell j."""
    t = np.arange(n_tokens)[:, None]
    j = np.arange(n_kv)[None, :]
    ok = j <= t
    if window > 0:
        ok &= t - j < window
    return ok


def _rope(x: np.ndarray, positions: np.ndarray, a: Architecture, il: int) -> np.ndarray:
    """x numpy [1, n_tokens, n_heads, head_dim] (ggml ne {head_dim, n_heads, n_tokens})."""
    fn = rf.rope_neox if a.rope_neox else rf.rope_norm
    return fn(x[0], positions, a.n_rot, a.rope_base(il), a.freq_factors, a.rope_freq_scale)[None]


def _matmul_weight_tolerance(w: np.ndarray, wtype: Q, x: np.ndarray) -> np.ndarray:
    """Per-element tolerance of x @ w.T computed by ggml with w of type wtype ([N, M])."""
    k = x.shape[-1]
    var = np.zeros((x.shape[0], w.shape[0]))
    if wtype in _Q8_BLOCK:
        block = _Q8_BLOCK[wtype]
        xb = x.reshape(x.shape[0], k // block, block)
        step = np.abs(xb).max(axis=-1) / 127.0  # [N, blocks]
        wb = w.reshape(w.shape[0], k // block, block)
        var += (step * step / 12.0) @ (wb * wb).sum(axis=-1).T
        if wtype in _F16_SCALED:
            partial = np.einsum("nbk,mbk->nmb", xb, wb)  # each block's share of the dot product
            var += (F16_STORAGE_REL ** 2 / 3.0) * (partial * partial).sum(axis=-1)
        if wtype in _WITH_MIN:
            sums = xb.sum(axis=-1)  # [N, blocks]
            wmax = np.abs(wb).max(axis=-1)  # [M, blocks]: bounds the block's min
            var += (F16_STORAGE_REL ** 2 / 3.0) * ((sums * sums) @ (wmax * wmax).T)
    elif wtype == Q.F16:
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** -24)))) * F16_ULP_REL
        var += (ulp * ulp / 12.0) @ (w * w).T
    magnitude = np.abs(x) @ np.abs(w).T
    return SIGMAS * np.sqrt(var) + k * F32_ACCUMULATION_REL * magnitude


@dataclasses.dataclass
class Graph:
    """The lane's values so far, by node name (the latest node of each name), and the run's inputs."""

    tokens: np.ndarray
    values: dict[str, np.ndarray]
    weights: Weights
    arch: Architecture


class Unresolved(Exception):
    pass


def _src(g: Graph, name: str) -> np.ndarray:
    if name in g.values:
        return g.values[name]
    if name in g.weights:
        return g.weights.get(name)
    raise Unresolved(f"source {name!r} is neither an earlier node nor a weight")


def reference(node: Node, g: Graph, history: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray | None]:
    """(reference value in ggml layout [ne3, ne2, ne1, ne0], per-element tolerance or None for the op's
    default) of one compute node, from the lane's own values of its sources."""
    op, shape, il = node.op, _shape(node.ne), _layer(node.name)
    n_tokens = len(g.tokens)
    a = g.arch
    if op == "GET_ROWS":
        if node.src1.startswith("inp_tokens"):
            return _src(g, node.src0)[g.tokens].reshape(shape), None
        if node.src1.startswith(("inp_out_ids", "out_ids")):
            src = _src(g, node.src0)
            return src.reshape(-1, src.shape[-1])[[n_tokens - 1]].reshape(shape), None
        raise Unresolved(f"GET_ROWS rows {node.src1!r}")
    if op == "RMS_NORM":
        x = _src(g, node.src0)
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + a.rms_eps)).reshape(shape), None
    if op in ("MUL", "ADD"):
        x, y = _src(g, node.src0), _src(g, node.src1)
        out = x * y if op == "MUL" else x + y
        return np.broadcast_to(out, shape).copy(), None
    if op == "SCALE":
        factor = next((v for k, v in a.scales.items() if node.src0 == k or node.src0.startswith(k + "-")), None)
        if factor is None:
            raise Unresolved(f"SCALE factor of {node.name!r} ({node.src0})")
        return (_src(g, node.src0) * factor).reshape(shape), None
    if op in ("SWIGLU", "GEGLU"):
        gate, up = _src(g, node.src0), _src(g, node.src1)
        act = rf.silu(gate) if op == "SWIGLU" else 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
        return (act * up).reshape(shape), None
    if op == "MUL_MAT":
        return _mul_mat(node, g, shape)
    if op == "ROPE":
        x = _src(g, node.src0).reshape(shape)
        return _rope(x, np.arange(n_tokens), a, il if il is not None else -1), None
    if op == "CONT":
        return _src(g, node.src0).reshape(shape), None
    if op == "CPY" and node.type == "f16":
        return rf.round_f16(_src(g, node.src0)).reshape(shape), None
    if op == "SET_ROWS":
        return _set_rows(node, g, shape), None
    if op == "SOFT_MAX":
        kq = _src(g, node.src0).reshape(shape)
        visible = _visible(shape[2], shape[3], a.window(il) if il is not None else 0)
        s = np.where(visible[None, None], kq * a.kq_scale, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        return s / s.sum(axis=-1, keepdims=True), None
    if op == "FLASH_ATTN_EXT":
        return _flash_attn(node, g, shape, history), None
    raise Unresolved(f"op {op} is not recomputed by the local oracle")


def _mul_mat(node: Node, g: Graph, shape) -> tuple[np.ndarray, np.ndarray | None]:
    b = _src(g, node.src1)
    if node.src0 in g.weights and node.src0 not in g.values:
        w = g.weights.get(node.src0)
        w2 = w.reshape(-1, w.shape[-1])
        x = b.reshape(-1, b.shape[-1])
        out = x @ w2.T
        tol = _matmul_weight_tolerance(w2, g.weights.type(node.src0), x)
        return out.reshape(shape), tol.reshape(shape)
    a = _src(g, node.src0)
    a4 = a if a.ndim == 4 else a.reshape((1,) * (4 - a.ndim) + a.shape)
    b4 = b if b.ndim == 4 else b.reshape((1,) * (4 - b.ndim) + b.shape)
    group = b4.shape[1] // a4.shape[1]  # broadcast over ne2: consecutive heads share a KV head
    a4 = np.repeat(a4, group, axis=1)
    out = np.einsum("xhmk,xhnk->xhnm", a4, b4)
    magnitude = np.einsum("xhmk,xhnk->xhnm", np.abs(a4), np.abs(b4))
    tol = a4.shape[-1] * F32_ACCUMULATION_REL * magnitude
    return out.reshape(shape), tol.reshape(shape) if tol.size == math.prod(shape) else None


def _set_rows(node: Node, g: Graph, shape) -> np.ndarray:
    m = _CACHE.match(node.name)
    if not m:
        raise Unresolved(f"SET_ROWS into {node.name!r}")
    src = _src(g, node.src0)
    n_tokens = len(g.tokens)
    out = np.zeros(math.prod(shape))
    if shape[-1] == 1:  # transposed V cache: channel c of cell s at c * kv_size + s
        kv_size = math.prod(shape) // (src.size // n_tokens)
        rows = src.reshape(n_tokens, -1)
        for c in range(rows.shape[1]):
            out[c * kv_size:c * kv_size + n_tokens] = rows[:, c]
    else:
        width = shape[-1]
        out.reshape(-1, width)[:n_tokens] = src.reshape(n_tokens, width)
    return out.reshape(shape)


def _flash_attn(node: Node, g: Graph, shape, history: list[tuple[str, str]]) -> np.ndarray:
    il = node_layer(node)
    q = _src(g, node.src0)  # [1, heads, tokens, d]
    k = _src(g, node.src1)  # [1, kv_heads, cells, d] (F16 values)
    v_name = next((name for name, op in reversed(history) if op == "CPY" and name.startswith(f"cache_v_l{il} ")), None)
    if v_name is None:
        raise Unresolved("the V cache copy of the flash-attention node")
    v = _src(g, v_name)
    heads, kv_heads = q.shape[1], k.shape[1]
    k = np.repeat(k, heads // kv_heads, axis=1)
    v = np.repeat(v, heads // kv_heads, axis=1)
    visible = _visible(q.shape[2], k.shape[2], g.arch.window(il) if il is not None else 0)
    s = np.einsum("xhtd,xhsd->xhts", q, k) * g.arch.kq_scale
    s = np.where(visible[None, None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("xhts,xhsd->xthd", p, v)
    return out.reshape(shape)


def compare(node: Node, got: np.ndarray, want: np.ndarray, tol_elem: np.ndarray | None) -> NodeResult:
    atol, rtol = LOCAL_TOLERANCES.get(node.op, ELEMENTWISE)
    res = NodeResult(node, "pass", elements=int(got.size))
    if not np.all(np.isfinite(got)):
        return dataclasses.replace(res, status="fail", why="NaN/Inf in the lane's output", worst_ratio=math.inf)
    rms = float(np.sqrt(np.mean(want * want))) if want.size else 0.0
    tol = atol * rms + rtol * np.abs(want) + 1e-30
    if tol_elem is not None:
        tol = tol + tol_elem
    err = np.abs(got - want)
    ratios = err / tol
    res.max_abs_err = float(err.max(initial=0.0))
    return mark_worst(res, got, want, err, tol, ratios)


def evaluate_run(run: Run, dumped: list[DumpedNode], reader: gguf.GGUFReader, arch: Architecture,
                 keep_layers: set[int]) -> list[NodeResult]:
    """The run's nodes of the kept blocks (stored_nodes; `dumped` holds exactly the kept nodes, in
    order) against their references from the lane's own sources; the other kept nodes are inputs."""
    if not run.tokens:
        raise OracleLogError("the log does not list the input tokens")
    kept, evaluated = stored_nodes(run.nodes, keep_layers)
    if len(dumped) != len(kept):
        raise OracleLogError(f"the node dump holds {len(dumped)} nodes; the log's kept nodes are {len(kept)}")
    g = Graph(np.asarray(run.tokens, np.int64), {}, Weights(reader), arch)
    history: list[tuple[str, str]] = []
    results = []
    for i, d in zip(kept, dumped):
        node = run.nodes[i]
        misaligned = _aligned(node, d)
        if misaligned:
            results.append(NodeResult(node, "fail", misaligned))
            break
        got = d.values.astype(np.float64).reshape(_shape(node.ne))
        if i not in evaluated:
            pass  # an input of a kept block
        elif node.op in VIEW_OPS:
            results.append(NodeResult(node, "view"))
        else:
            try:
                want, tol = reference(node, g, history)
                results.append(compare(node, got, want, tol))
            except Unresolved as err:
                results.append(NodeResult(node, "unresolved", str(err)))
        g.values[node.name] = got
        history.append((node.name, node.op))
    return results
