"""The memory-bandwidth roofline of token generation: weight bytes read per token (device buffers for
accelerators, each weight byte once for the CPU lane) x tg tokens/s, over the measured bandwidth.
"""

from __future__ import annotations

import pathlib

from tools.runner import log_blocks
from tools.runner.checks.speed_bench import (
    ROOFLINE_CPU_LANE,
    ROOFLINE_LANE,
    backend_problems,
    bench_figures,
    device_weight_bytes,
    fnum_cfg,
    load_bench,
    load_optional_bench,
    model_buffers,
    parse_membw,
    parse_offloaded,
)


def accelerator_roofline(logs_dir, cfg, backend, m, counts, problems, summary) -> str:
    big_tests, big_log = load_bench(logs_dir, ROOFLINE_LANE)
    if not big_tests:
        problems.append("no roofline bench (accelerator lanes need --roofline_model, a memory-bandwidth-bound GGUF)")
        return summary
    problems += [f"roofline bench: {p}" for p in backend_problems(big_tests, backend, True)]
    big = bench_figures(big_tests)
    m["roofline_tg_tokens_per_s"] = big.get("tg_tokens_per_s", 0.0)
    m["roofline_pp_tokens_per_s"] = big.get("pp_tokens_per_s", 0.0)
    counts["roofline_model_file_bytes"] = int(big.get("model_bytes", 0))
    device, host, lines = device_weight_bytes(big_log, backend)
    counts["roofline_device_weight_bytes"], counts["roofline_host_weight_bytes"] = device, host
    offl = parse_offloaded(big_log)
    if device <= 0 or offl is None or offl[0] != offl[1]:
        problems.append(f"roofline bench log: no device model buffer or no full offload (offloaded {offl}, lines {lines})")
    cpu_tests, _ = load_bench(logs_dir, ROOFLINE_CPU_LANE)
    if cpu_tests:
        problems += [f"roofline CPU lane bench: {p}" for p in backend_problems(cpu_tests, "cpu", False)]
        cpu_big = bench_figures(cpu_tests)
        for kind in ("pp", "tg"):
            cpu_value = cpu_big.get(f"{kind}_tokens_per_s", 0.0)
            m[f"roofline_cpu_lane_{kind}_tokens_per_s"] = cpu_value
            if cpu_value > 0:
                m[f"roofline_speedup_{kind}"] = m[f"roofline_{kind}_tokens_per_s"] / cpu_value
    for kind in ("pp", "tg"):
        speedup, floor = m.get(f"roofline_speedup_{kind}"), m[f"floor_roofline_speedup_{kind}"]
        if speedup is None or not speedup >= floor:  # `not >=` also fails NaN
            problems.append(f"roofline {kind} x{speedup if speedup is not None else 'absent'} vs the CPU lane, below the "
                            f"relative floor x{floor:g}")
    override = fnum_cfg(cfg, "hbm_bandwidth_gbs_override")
    bw = override if override > 0 else membw_gbs(logs_dir, problems, "device memory")
    if bw is None:
        return summary
    m["hbm_bandwidth_gbs"] = bw
    _roofline_fraction(m, device, bw, problems)
    summary += (f"; roofline: {device} B in device memory ({host} B host-resident excluded) x "
                f"{m['roofline_tg_tokens_per_s']:.0f} tok/s = {100 * m['tg_roofline_fraction']:.1f}% of "
                f"{bw:.0f} GB/s{' (override)' if override > 0 else ' (measured)'}, x{m.get('roofline_speedup_pp', 0):.1f} pp / "
                f"x{m.get('roofline_speedup_tg', 0):.1f} tg vs CPU lane")
    return summary


def _roofline_fraction(m: dict[str, float], weight_bytes: int, bw_gbs: float, problems: list[str]) -> None:
    """tg_roofline_fraction: the weight bytes read per token x tg tokens/s, over the bandwidth."""
    m["tg_roofline_fraction"] = m["roofline_tg_tokens_per_s"] * weight_bytes / (bw_gbs * 1e9)
    if not m["tg_roofline_fraction"] <= 1.0:
        problems.append(f"tg reaches {m['tg_roofline_fraction']:.2f} of the roofline: bytes or bandwidth are wrong")


def membw_gbs(logs_dir: pathlib.Path, problems: list[str], what: str) -> float | None:
    """GB/s from speed.membw.json, or None with the reason added to problems."""
    membw = logs_dir / "speed.membw.json"
    if not membw.is_file():
        problems.append(f"{what} bandwidth not measured (no speed.membw.json)")
        return None
    try:
        return parse_membw(log_blocks.read(membw))
    except (ValueError, KeyError, TypeError) as err:
        problems.append(f"speed.membw.json unreadable: {err}")
        return None


def tensor_sizes(model: pathlib.Path) -> dict[str, int]:
    """Each tensor's bytes in the GGUF (one read of its header for every figure below)."""
    import gguf  # heavy import, only for the roofline model

    return {t.name: int(t.n_bytes) for t in gguf.GGUFReader(model, "r").tensors}


def rows_only_bytes(model: pathlib.Path | dict[str, int]) -> int:
    """Bytes of the token embedding when the model has a separate output matrix: token generation
    reads one row of it per token, not all of it (with tied embeddings the output matmul reads it)."""
    sizes = model if isinstance(model, dict) else tensor_sizes(model)
    return sizes.get("token_embd.weight", 0) if "output.weight" in sizes else 0


# The CPU backend's buffer over the memory-mapped model file. Its size is the span of the file that
# its tensors cover, so it also spans tensors that were copied out of it into an extra buffer.
MAPPED_BUFFER = "CPU_Mapped"
# An extra buffer (CPU_REPACK, AMX, ...) may hold a repacked copy at most this much larger than the
# model's tensors (block interleaving and AMX compensation terms); more means bytes counted twice.
MAX_EXTRA_BUFFER_GROWTH = 1.02
# Buffer sizes are printed in MiB with 2 decimals (+-5 KiB each).
BUFFER_SLACK = 1e-4


def cpu_weight_bytes_read(buffers: list[tuple[str, int, str]], model_tensor_bytes: int) -> tuple[int, list[str], str]:
    """(bytes of weights read per token before the row-gathered exclusion, problems, how counted).

    Each weight byte is counted once. With only the mapping (the zen4 path) that is the mapped buffer.
    With extra buffers (repacked or AMX copies of tensors, made from the mapping at load time) the
    backend reads the copies and only the tensors left in the mapping: the model's tensor bytes
    (logged from the GGUF) minus what was copied, plus the copies as allocated. The mapped buffer's
    size says nothing here: it spans the copied tensors too (the AMX host's log showed 517.07 MiB
    mapped beside 517.00 MiB of AMX copies of the same weights).
    """
    sizes = {name: nbytes for name, nbytes, _ in buffers}
    mapped = sizes.pop(MAPPED_BUFFER, 0)
    copies = sum(sizes.values())
    if model_tensor_bytes <= 0:  # a run that logged no tensor bytes: only the mapping can be counted
        if copies:
            return 0, [f"extra model buffers {sorted(sizes)} beside the mapping but no roofline_tensor_bytes "
                       "logged: cannot tell which bytes are read once"], ""
        return mapped, [], f"{mapped} B mapped"
    # The buffers must hold the model: a log that understates them would understate the roofline.
    if mapped + copies < model_tensor_bytes * (1 - BUFFER_SLACK):
        return 0, [f"model buffers of {mapped + copies} B cannot hold the model's {model_tensor_bytes} B of tensors"], ""
    if not copies:
        return model_tensor_bytes, [], f"{model_tensor_bytes} B of tensors, all in the {mapped} B mapping"
    if copies > model_tensor_bytes * MAX_EXTRA_BUFFER_GROWTH:
        return 0, [f"extra model buffers hold {copies} B, more than the model's {model_tensor_bytes} B of tensors: "
                   "a tensor counted twice"], ""
    # The copies replace the mapped bytes they were made from; a repacked copy is as large as its
    # source to within MAX_EXTRA_BUFFER_GROWTH, so the tensors left in the mapping are the rest.
    left_in_mapping = max(0, model_tensor_bytes - copies)
    extra = ", ".join(f"{name} {nbytes} B" for name, nbytes in sorted(sizes.items()))
    return copies + left_in_mapping, [], (f"{extra} copied out of the mapping + {left_in_mapping} B of tensors left "
                                          f"in it ({mapped} B mapped span not counted)")


def cpu_roofline(logs_dir, cfg, m, counts, problems, summary) -> str:
    """CPU lane with --roofline_model: tg on it x the weight bytes it reads per token (each weight
    byte once, wherever the backend put it, minus the row-gathered token embedding), as a fraction
    of the host's measured read bandwidth (informational: no floor)."""
    loaded = load_optional_bench(logs_dir, ROOFLINE_LANE, "roofline bench", "roofline bench JSON unreadable",
                                 "cpu", False, problems)
    if loaded is None:
        return summary
    big_tests, big_log = loaded
    m["roofline_tg_tokens_per_s"] = bench_figures(big_tests).get("tg_tokens_per_s", 0.0)
    buffers = model_buffers(big_log)
    rows_only = int(fnum_cfg(cfg, "roofline_rows_only_bytes"))
    read, read_problems, how = cpu_weight_bytes_read(buffers, int(fnum_cfg(cfg, "roofline_tensor_bytes")))
    problems += [f"roofline bench log: {p}" for p in read_problems]
    weights = read - rows_only
    counts["roofline_host_weight_bytes"], counts["roofline_rows_only_bytes"] = weights, rows_only
    if weights <= 0:
        if not read_problems:
            problems.append("roofline bench log: no model buffer lines")
        return summary
    bw = membw_gbs(logs_dir, problems, "host memory")
    if bw is None:
        return summary
    m["host_bandwidth_gbs"] = bw
    _roofline_fraction(m, weights, bw, problems)
    return summary + (f"; roofline: {weights} B ({how}; {rows_only} B of row-gathered token embedding excluded) x "
                      f"{m['roofline_tg_tokens_per_s']:.2f} tok/s = {100 * m['tg_roofline_fraction']:.1f}% of "
                      f"{bw:.1f} GB/s host memory read (measured)")
