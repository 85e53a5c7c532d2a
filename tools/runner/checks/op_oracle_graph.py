"""Each printed eval-callback node mapped to its float64 reference and compared, per-op tolerances.

The tolerances are justified in tools/runner/checks/op_oracle.py's module docstring.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex

import numpy as np

from tools.model import reference_forward as rf
from tools.runner.checks.op_oracle_dump import DumpedNode
from tools.runner.checks.op_oracle_log import Node, OracleLogError, Run, n_printed, printed_indices

# Views move no data: the ops of the lane spec are the ones that compute.
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"})
PRINT_ROUNDING = 5e-5  # "%12.4f"
SUM_ROUNDING = 1e-6  # "%f" (6 decimals), with margin
SUM_SIGMAS = 6.0
F16_ULP_REL = 2.0 ** -10

# op -> (a, r): an element passes when |lane - ref| <= PRINT_ROUNDING + a * rms(ref) + r * |ref|,
# rms(ref) over the node's whole reference tensor (its scale); justified in op_oracle.py's module docstring.
_F32 = (1e-4, 1e-4)
TOLERANCES: dict[str, tuple[float, float]] = {
    "GET_ROWS": _F32, "RMS_NORM": _F32, "MUL": _F32, "ADD": _F32, "MUL_MAT": _F32, "ROPE": _F32,
    "SET_ROWS": _F32, "CONT": _F32, "SCALE": _F32, "SOFT_MAX": _F32, "SILU": _F32, "SWIGLU": _F32,
    "CPY": (1e-5, F16_ULP_REL),
    "FLASH_ATTN_EXT": (2e-2, 1e-2),
}
# Relative error is reported only where |ref| is well above the print resolution.
REL_ERR_FLOOR = 1e-2
# Ops whose output varies across its elements in any model that computes something: a reference
# that is constant (within the element tolerance) means a degenerate model (attn_q/attn_k all zero
# makes every ROPE node 0), against which a lane printing that constant "passes" while nothing was
# tested. Such a node fails instead.
MUST_VARY_OPS = frozenset({"ROPE", "MUL_MAT", "SOFT_MAX", "RMS_NORM", "FLASH_ATTN_EXT"})
# The spread (max - min) of the reference must exceed this many element tolerances: otherwise a
# lane printing the reference's mean everywhere would pass the node.
MIN_SPREAD_TOLERANCES = 2.0


# ---- reference ----

_LAYER = re.compile(r"-(\d+)$")
_CACHE = re.compile(r"^cache_([kv])_l(\d+)\b")


def _layer(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def reference_key(node: Node) -> tuple[str, str] | None:
    """(reference_forward node key, how to lay it out) for a compute node, or None if unknown."""
    name, op, src0 = node.name, node.op, node.src0
    il = _layer(name)
    if op == "GET_ROWS":
        if src0 == "token_embd.weight" and name in ("embd", "inp_embd"):
            return "embd", "plain"
        if node.src1.startswith("out_ids") or node.src1.startswith("inp_out_ids"):
            return src0, "out_rows"
        return None
    if op == "RMS_NORM":
        if name == "norm":
            return "norm", "plain"
        if il is not None and name == f"norm-{il}":
            return (f"norm-{il}/ffn" if src0 == f"ffn_inp-{il}" else f"norm-{il}/attn"), "plain"
        return None
    if op == "MUL_MAT":
        if il is not None and name in (f"Qcur-{il}", f"Kcur-{il}"):
            return f"{name}/mul_mat", "plain"
        return name, "plain"
    if op == "ROPE" and il is not None and name in (f"Qcur-{il}", f"Kcur-{il}"):
        return name, "plain"
    if op in ("MUL", "ADD", "SOFT_MAX", "CONT", "SWIGLU", "SILU", "SCALE"):
        return name, "plain"
    if op == "SET_ROWS":
        m = _CACHE.match(name)
        if m:
            return f"cache_{m.group(1)}_l{m.group(2)}", "cache"
        return None
    if op == "CPY":
        m = _CACHE.match(src0)
        if m and node.type == "f16":
            return f"cache_{m.group(1)}_l{m.group(2)}/f16", "plain"
        return None
    if op == "FLASH_ATTN_EXT":
        m = re.match(r"^Qcur-(\d+)\b", src0)
        if m:
            return f"fattn-{m.group(1)}", "plain"
        return None
    return None


def reference_value(node: Node, ref: dict[str, np.ndarray], out_ids: np.ndarray) -> np.ndarray | None:
    """The node's float64 reference in ggml layout [ne3, ne2, ne1, ne0], or None."""
    key = reference_key(node)
    if key is None or key[0] not in ref:
        return None
    value, layout = ref[key[0]], key[1]
    if layout == "out_rows":
        value = value[out_ids]
    elif layout == "cache" and node.ne[0] == 1:
        # Without flash attention the V cache is stored transposed: cell s of channel c at c*kv_size+s.
        value = value.T.reshape(-1, 1)
    shape = tuple(reversed(node.ne))
    if value.size != math.prod(shape):
        return None
    return value.reshape(shape)


def _cache_geometry(run: Run) -> rf.KvCache:
    """kv_size and n_kv as the run's own graph shows them (K SET_ROWS rows; KQ or K-view cells)."""
    kv_size = next((n.ne[1] for n in run.nodes if n.op == "SET_ROWS" and n.name.startswith("cache_k_l")), 0)
    n_kv = next((n.ne[0] for n in run.nodes if n.op == "MUL_MAT" and n.name.startswith("kq-")), 0)
    n_kv = n_kv or next((n.ne[1] for n in run.nodes if n.op == "CPY" and n.src0.startswith("cache_k_l")), 0)
    if not kv_size or not n_kv:
        raise OracleLogError(f"run {shlex.join(run.argv)}: no KV-cache nodes to size the cache from")
    return rf.KvCache(kv_size=kv_size, n_kv=n_kv, flash_attn=run.flash_attn == "on")


# ---- comparison ----

@dataclasses.dataclass
class NodeResult:
    node: Node
    status: str  # "pass", "fail", "unresolved", "view"
    why: str = ""
    elements: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst_ratio: float = 0.0  # max over elements and the sum of error / tolerance (> 1 fails)
    after_fa: bool = False  # downstream of a FLASH_ATTN_EXT node (checked with the FA tolerance)


def compare_node(node: Node, want: np.ndarray, atol: float, rtol: float) -> NodeResult:
    idx = np.ix_(range(node.ne[3]), printed_indices(node.ne[2]), printed_indices(node.ne[1]),
                 printed_indices(node.ne[0]))
    expected = n_printed(node.ne)
    if len(node.values) != expected or not node.sums:
        return NodeResult(node, "fail", f"printed {len(node.values)} values and {len(node.sums)} sums, "
                                        f"expected {expected} and >= 1 (truncated log?)")
    got = np.asarray(node.values, np.float64)
    ref = want[idx].reshape(-1)
    res = NodeResult(node, "pass", elements=int(got.size))
    if not np.all(np.isfinite(ref)):
        return dataclasses.replace(res, status="fail", why="the reference is not finite")
    if not (np.all(np.isfinite(got)) and all(math.isfinite(s) for s in node.sums)):
        return dataclasses.replace(res, status="fail", why="NaN/Inf in the lane's output", max_abs_err=math.inf,
                                   max_rel_err=math.inf, worst_ratio=math.inf)
    flat = want.reshape(-1)
    rms = float(np.sqrt(np.mean(flat * flat))) if flat.size else 0.0
    degenerate = _degenerate(node, flat, rms, atol, rtol)
    if degenerate:
        return dataclasses.replace(res, status="fail", why=degenerate)
    err = np.abs(got - ref)
    tol = PRINT_ROUNDING + atol * rms + rtol * np.abs(ref)
    big = np.abs(ref) >= REL_ERR_FLOOR
    res.max_abs_err = float(err.max(initial=0.0))
    res.max_rel_err = float((err[big] / np.abs(ref[big])).max(initial=0.0))
    ratio = float((err / tol).max(initial=0.0))
    # The sum covers every element, printed or not. Its tolerance: the rounding of the lane's own
    # float32 sequential sum (simulated on the reference, counted twice) plus SUM_SIGMAS standard
    # deviations of a sum of independent element errors each within the element tolerance.
    sum64 = float(flat.sum())
    sum32 = float(np.cumsum(flat.astype(np.float32), dtype=np.float32)[-1]) if flat.size else 0.0
    elem_tol = atol * rms + rtol * np.abs(flat)
    sum_tol = SUM_ROUNDING + 2.0 * abs(sum32 - sum64) + SUM_SIGMAS * float(np.sqrt(np.sum(elem_tol * elem_tol)))
    sum_err = max(abs(s - sum64) for s in node.sums)
    res.worst_ratio = max(ratio, sum_err / sum_tol)
    if ratio > 1.0:
        k = int(np.argmax(err / tol))
        res.status, res.why = "fail", f"value {got[k]:.4f} vs reference {ref[k]:.6f} (|err| {err[k]:.3g} > tol {tol[k]:.3g})"
    elif sum_err > sum_tol:
        res.status, res.why = "fail", f"sum {node.sums[0]:.6f} vs reference {float(flat.sum()):.6f} (|err| {sum_err:.3g} > tol {sum_tol:.3g})"
    return res


# A printed value is its float32 rounded to 4 decimals; a printed sum the lane's float32 sequential sum
# to 6 decimals (with a float32 ulp of margin): the printed output and the dump must agree to that.
PRINTED_VS_DUMP = PRINT_ROUNDING * (1 + 1e-6)
SUM_VS_DUMP_ABS = 1e-6
SUM_VS_DUMP_REL = 2.0 ** -23


def _aligned(node: Node, dumped: DumpedNode) -> str:
    """Why the dumped node is not the printed one ("" when they agree)."""
    if (dumped.name, dumped.op, dumped.type, dumped.ne) != (node.name, node.op, node.type, node.ne):
        return (f"the dump holds {dumped.name} {dumped.op} ({dumped.type}){list(dumped.ne)} where the log prints "
                f"{node.name} {node.op} ({node.type}){list(node.ne)}")
    return ""


def compare_node_full(node: Node, dumped: DumpedNode, want: np.ndarray, atol: float, rtol: float) -> NodeResult:
    """Every element of the node's dumped output against the reference (no print rounding), after
    checking that what the lane printed is what it dumped."""
    misaligned = _aligned(node, dumped)
    if misaligned:
        return NodeResult(node, "fail", misaligned)
    expected = n_printed(node.ne)
    if len(node.values) != expected or not node.sums:
        return NodeResult(node, "fail", f"printed {len(node.values)} values and {len(node.sums)} sums, "
                                        f"expected {expected} and >= 1 (truncated log?)")
    got_all = dumped.values.astype(np.float64).reshape(want.shape)
    idx = np.ix_(range(node.ne[3]), printed_indices(node.ne[2]), printed_indices(node.ne[1]),
                 printed_indices(node.ne[0]))
    printed = np.asarray(node.values, np.float64)
    corners = got_all[idx].reshape(-1)
    res = NodeResult(node, "pass", elements=int(got_all.size))
    if not (np.all(np.isfinite(got_all)) and np.all(np.isfinite(printed)) and all(math.isfinite(s) for s in node.sums)):
        return dataclasses.replace(res, status="fail", why="NaN/Inf in the lane's output", max_abs_err=math.inf,
                                   max_rel_err=math.inf, worst_ratio=math.inf)
    off = np.abs(printed - corners)
    if off.max(initial=0.0) > PRINTED_VS_DUMP:
        k = int(np.argmax(off))
        return dataclasses.replace(res, status="fail", why=(
            f"the log prints {printed[k]:.4f} where the dump holds {corners[k]:.7g}: the printed output is not "
            "what the lane dumped"), worst_ratio=math.inf)
    # ne[3] sums, one per i3 block, each the float32 sequential sum of the whole node (debug.cpp).
    flat32 = dumped.values.astype(np.float32)
    lane_sum = float(np.cumsum(flat32, dtype=np.float32)[-1]) if flat32.size else 0.0
    sum_off = max(abs(s - lane_sum) for s in node.sums)
    if sum_off > SUM_VS_DUMP_ABS + SUM_VS_DUMP_REL * abs(lane_sum):
        return dataclasses.replace(res, status="fail", why=(
            f"the log prints sum {node.sums[0]:.6f} where the dump's float32 sum is {lane_sum:.6f}: the printed "
            "output is not what the lane dumped"), worst_ratio=math.inf)
    ref = want.reshape(-1)
    got = got_all.reshape(-1)
    if not np.all(np.isfinite(ref)):
        return dataclasses.replace(res, status="fail", why="the reference is not finite")
    rms = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    degenerate = _degenerate(node, ref, rms, atol, rtol)
    if degenerate:
        return dataclasses.replace(res, status="fail", why=degenerate)
    err = np.abs(got - ref)
    tol = atol * rms + rtol * np.abs(ref)
    big = np.abs(ref) >= REL_ERR_FLOOR
    res.max_abs_err = float(err.max(initial=0.0))
    res.max_rel_err = float((err[big] / np.abs(ref[big])).max(initial=0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
    return mark_worst(res, got, ref, err, tol, ratios)


def mark_worst(res: NodeResult, got: np.ndarray, ref: np.ndarray, err: np.ndarray, tol: np.ndarray,
               ratios: np.ndarray) -> NodeResult:
    """The node's worst error/tolerance ratio; above 1 it fails, naming its worst element."""
    res.worst_ratio = float(ratios.max(initial=0.0))
    if res.worst_ratio > 1.0:
        k = int(np.argmax(ratios))
        res.status, res.why = "fail", (f"element {k} of {got.size}: {got.flat[k]:.7g} vs reference {ref.flat[k]:.7g} "
                                       f"(|err| {err.flat[k]:.3g} > tol {tol.flat[k]:.3g})")
    return res


def _degenerate(node: Node, flat: np.ndarray, rms: float, atol: float, rtol: float) -> str:
    """Why the reference of a must-vary op tests nothing ("" when it varies)."""
    if node.op not in MUST_VARY_OPS:
        return ""
    spread = float(np.ptp(flat)) if flat.size else 0.0
    scale = PRINT_ROUNDING + atol * rms + rtol * float(np.abs(flat).max(initial=0.0))
    if spread > MIN_SPREAD_TOLERANCES * scale:
        return ""
    return (f"the reference is constant ({float(flat[0]) if flat.size else 0.0:.6g} across {flat.size} elements, "
            f"spread {spread:.3g} <= {MIN_SPREAD_TOLERANCES:g} x tol {scale:.3g}): a degenerate model, nothing "
            f"is tested by {node.op}")


def evaluate_run(run: Run, model: rf.Model, tolerances: dict[str, tuple[float, float]],
                 dumped: list[DumpedNode] | None = None) -> list[NodeResult]:
    """Each node of the run against the reference: every element from the run's node dump when
    given (aligned node for node with the log), else the printed corners and sums (older runs)."""
    if dumped is not None and len(dumped) != len(run.nodes):
        raise OracleLogError(f"run {shlex.join(run.argv)}: the node dump holds {len(dumped)} nodes, "
                             f"the log prints {len(run.nodes)}")
    if not run.tokens:
        raise OracleLogError(f"run {shlex.join(run.argv)}: the log does not list the input tokens")
    # llama_batch_get_one (eval-callback) requests the logits of the last token only.
    out_ids = np.array([len(run.tokens) - 1])
    ref = rf.forward_nodes(model, run.tokens, out_ids=out_ids, cache=_cache_geometry(run))
    results = []
    fa_atol, fa_rtol = tolerances.get("FLASH_ATTN_EXT", TOLERANCES["FLASH_ATTN_EXT"])
    after_fa = False
    for i, node in enumerate(run.nodes):
        if node.op in VIEW_OPS:
            misaligned = _aligned(node, dumped[i]) if dumped is not None else ""
            results.append(NodeResult(node, "fail", misaligned) if misaligned else NodeResult(node, "view"))
            continue
        want = reference_value(node, ref, out_ids)
        if want is None:
            results.append(NodeResult(node, "unresolved", "no float64 reference for this node"))
            continue
        atol, rtol = tolerances.get(node.op, _F32)
        if after_fa:
            # Downstream of FLASH_ATTN_EXT every value carries its F16-level error; these nodes are
            # held to the FA tolerance and reported apart (the -fa off run checks them tightly).
            atol, rtol = max(atol, fa_atol), max(rtol, fa_rtol)
        res = compare_node(node, want, atol, rtol) if dumped is None else compare_node_full(node, dumped[i], want, atol, rtol)
        res.after_fa = after_fa
        results.append(res)
        after_fa = after_fa or node.op == "FLASH_ATTN_EXT"
    return results
