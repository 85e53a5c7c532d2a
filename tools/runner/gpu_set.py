"""Multi-GPU device classes: the GPUs of one host a run is split over and how the host links them.

`nvidia-smi topo -m` is the host's word on the links. Its output is untrusted input: read bounded,
parsed strictly (a matrix of GPU<n> rows and columns whose cells are nvidia-smi's own legend: X, NV<n>,
PIX, PXB, PHB, NODE, SYS), and anything else refused (TopologyError), never guessed.

The scope helpers (key, diffs, slug) are shared by the runner (the device class it records), certify
(the record's file name) and admission (a record for N GPUs admits only nodes with the same count,
GPUs and links). A one-GPU class has no gpu_set: its key, slug and refusals are what they were.
"""

from __future__ import annotations

import re

from proto import runner_report_pb2 as rpb

NVIDIA_TOPO = ["nvidia-smi", "topo", "-m"]
TOPO_MAX_BYTES = 64 * 1024
MAX_GPUS = 64
# nvidia-smi's legend, strongest first; NV<n> is n bonded NVLinks (more is stronger).
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_CELL = re.compile(r"X|NV[1-9][0-9]{0,2}|PIX|PXB|PHB|NODE|SYS")
_GPU = re.compile(r"GPU(0|[1-9][0-9]{0,2})")
# Colour/underline escapes newer nvidia-smi versions put around header cells; nothing else is stripped.
_SGR = re.compile(r"\x1b\[[0-9;]{0,16}m")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
SPLIT_MODES = ("layer", "row")


class TopologyError(ValueError):
    """nvidia-smi topo -m output that does not parse as its GPU matrix."""


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """{(i, j): link} for every ordered pair of distinct GPUs of `nvidia-smi topo -m`'s matrix.

    Refuses (TopologyError) output over TOPO_MAX_BYTES, control characters other than SGR escapes,
    a header without GPU0..GPUn-1 columns, missing, repeated or out-of-order GPU rows, cells outside
    the legend, a diagonal that is not X, an X off it, and an asymmetric matrix."""
    if len(text) > TOPO_MAX_BYTES:
        raise TopologyError(f"nvidia-smi topo -m printed {len(text)} characters (more than {TOPO_MAX_BYTES}): refused")
    text = _SGR.sub("", text).replace("\r\n", "\n")
    if (bad := _CONTROL.search(text)) is not None:
        raise TopologyError(f"nvidia-smi topo -m output holds control character {bad.group()!r}: refused")
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        raise TopologyError("nvidia-smi topo -m printed nothing")
    header = lines[0].split()
    n = 0
    while n < len(header) and _GPU.fullmatch(header[n]):
        if header[n] != f"GPU{n}":
            raise TopologyError(f"topology header column {n + 1} is {header[n]!r}, expected GPU{n}")
        n += 1
    if n == 0:
        raise TopologyError(f"topology header names no GPU column: {lines[0][:120]!r}")
    if n > MAX_GPUS:
        raise TopologyError(f"topology lists {n} GPUs (more than {MAX_GPUS}): refused")
    rows: list[list[str]] = []
    for line in lines[1:]:
        if line.strip().startswith("Legend"):
            break
        cells = line.split()
        if not _GPU.fullmatch(cells[0]):
            continue  # NIC<n> rows and the like: not GPUs
        if cells[0] != f"GPU{len(rows)}":
            raise TopologyError(f"topology row {cells[0]!r} where GPU{len(rows)} was expected")
        if len(cells) < n + 1:
            raise TopologyError(f"topology row {cells[0]} has {len(cells) - 1} cells, fewer than its {n} GPU columns")
        rows.append(cells[1:n + 1])
    if len(rows) != n:
        raise TopologyError(f"topology has {len(rows)} GPU rows for {n} GPU columns")
    links: dict[tuple[int, int], str] = {}
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            if not _CELL.fullmatch(cell):
                raise TopologyError(f"topology cell GPU{i}/GPU{j} is {cell[:20]!r}, not one of X, NV<n>, "
                                    "PIX, PXB, PHB, NODE, SYS")
            if (cell == "X") != (i == j):
                raise TopologyError(f"topology cell GPU{i}/GPU{j} is {cell!r}: X belongs on the diagonal only")
            if i != j:
                links[(i, j)] = cell
    for (i, j), cell in links.items():
        if links[(j, i)] != cell:
            raise TopologyError(f"topology is not symmetric: GPU{i}/GPU{j} {cell} but GPU{j}/GPU{i} {links[(j, i)]}")
    return links


def link_rank(link: str) -> tuple[int, int]:
    """Orders links strongest first: NV<more> < NV<fewer> < PIX < PXB < PHB < NODE < SYS."""
    if link.startswith("NV"):
        return (0, -int(link[2:]))
    return (LINK_ORDER.index(link), 0)


def weakest_link(links: list[str]) -> str:
    return max(links, key=link_rank)


def make_gpu_set(rows: list[dict[str, str]], indices: list[int], topology: dict[tuple[int, int], str]) -> rpb.GpuSet:
    """The GpuSet of nvidia-smi's query rows at `indices` (in the run's device order) with their links."""
    gs = rpb.GpuSet(count=len(indices))
    for i in indices:
        row = rows[i]
        gs.gpus.add(index=i, name=row["name"], compute_capability=row["compute_cap"],
                    driver_version=row["driver_version"], driver_major=row["driver_version"].split(".")[0])
    pairs = []
    for p, a in enumerate(indices):
        for b in indices[p + 1:]:
            lo, hi = min(a, b), max(a, b)
            if (lo, hi) not in topology:
                raise TopologyError(f"nvidia-smi topo -m gives no link between GPU{lo} and GPU{hi}")
            gs.links.add(a=lo, b=hi, link=topology[(lo, hi)])
            pairs.append(topology[(lo, hi)])
    gs.interconnect = weakest_link(pairs) if pairs else ""
    return gs


def count(dc: rpb.DeviceClass) -> int:
    """GPUs the class is about: gpu_set.count, else 1 for an accelerator class (0 for a CPU one)."""
    if dc.HasField("gpu_set") and dc.gpu_set.count:
        return dc.gpu_set.count
    return 0 if dc.backend in ("", "cpu") else 1


def _relative_links(gs: rpb.GpuSet) -> tuple[tuple[int, int, str], ...]:
    """Links by position in the set (a node using GPUs 2,3 is the class of a record made on 0,1)."""
    pos = {g.index: p for p, g in enumerate(gs.gpus)}
    return tuple(sorted((min(pos.get(l.a, -1), pos.get(l.b, -1)), max(pos.get(l.a, -1), pos.get(l.b, -1)), l.link)
                        for l in gs.links))


def key(dc: rpb.DeviceClass) -> tuple:
    """The multi-GPU part of the scope key; () for a one-GPU (or CPU) class, as before gpu_set."""
    if count(dc) < 2:
        return ()
    gs = dc.gpu_set
    return (gs.count, tuple((g.name, g.compute_capability, g.driver_major) for g in gs.gpus), gs.interconnect,
            _relative_links(gs))


def diffs(record: rpb.DeviceClass, node: rpb.DeviceClass) -> list[str]:
    """Each way the node's GPUs differ from the record's (empty when the multi-GPU keys agree)."""
    if key(record) == key(node):
        return []
    rn, nn = count(record), count(node)
    if rn != nn:
        return [f"GPU count {rn} != node {nn} (a record for {rn} GPU{'s' if rn != 1 else ''} admits only nodes "
                f"with {rn})"]
    out = []
    for p, (rg, ng) in enumerate(zip(record.gpu_set.gpus, node.gpu_set.gpus)):
        for f in ("name", "compute_capability", "driver_major"):
            if getattr(rg, f) != getattr(ng, f):
                out.append(f"GPU {p} {f} {getattr(rg, f)!r} != node {getattr(ng, f)!r}")
    if len(record.gpu_set.gpus) != len(node.gpu_set.gpus):
        out.append(f"GPUs listed {len(record.gpu_set.gpus)} != node {len(node.gpu_set.gpus)}")
    if record.gpu_set.interconnect != node.gpu_set.interconnect:
        out.append(f"interconnect {record.gpu_set.interconnect!r} != node {node.gpu_set.interconnect!r}")
    elif _relative_links(record.gpu_set) != _relative_links(node.gpu_set):
        out.append(f"GPU links {_links_label(record.gpu_set)} != node {_links_label(node.gpu_set)}")
    return out or ["GPU set differs"]


def _links_label(gs: rpb.GpuSet) -> str:
    return ",".join(f"{a}-{b}:{link}" for a, b, link in _relative_links(gs)) or "(none)"


def slug_parts(dc: rpb.DeviceClass) -> list[str] | None:
    """The device class slug's parts for a multi-GPU class, e.g. cuda, 2x, NVIDIA H200, 9.0, 580, NV18;
    None for a one-GPU class (its slug stays as it was)."""
    if count(dc) < 2:
        return None
    gs = dc.gpu_set
    parts = [dc.backend, f"{gs.count}x"]
    if dc.vendor and dc.vendor.lower() not in dc.device_name.lower():
        parts.append(dc.vendor)
    kinds = {(g.name, g.compute_capability) for g in gs.gpus}
    if len(kinds) <= 1:
        parts += [dc.device_name, dc.compute_capability]
    else:
        parts += [f"{g.name}-{g.compute_capability}" for g in gs.gpus]
    parts += [dc.driver_major, gs.interconnect]
    return parts


def label(dc: rpb.DeviceClass) -> str:
    """Human summary of a multi-GPU class, e.g. "2x NVIDIA H200 (9.0), NV18"; "" for one GPU."""
    if count(dc) < 2:
        return ""
    gs = dc.gpu_set
    names = sorted({f"{g.name} ({g.compute_capability})" for g in gs.gpus})
    return f"{gs.count}x {' + '.join(names)}, {gs.interconnect or '?'}"
