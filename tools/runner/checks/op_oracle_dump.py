"""llama-eval-callback's node dump (`--lanes-node-dump FILE`, patch 0006) as data, read with bounds.

The file is the lane's output, so it is untrusted: every length is bounded by the file's size and
by fixed limits, every node's element count must equal its shape's, and the file must end with the
trailer that counts the nodes written (a truncated dump is refused, never read as a shorter graph).

Layout (little-endian): b"LANESND1"; per node: u32 len + name, u32 len + op (ggml_op_desc),
u32 len + type name, i64 ne[4], u64 count, count float32 values in i3,i2,i1,i0 order (count 0 for
types other than f32/f16/bf16); then b"LANESEND" and u64 the number of nodes.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import pathlib
import struct

import numpy as np

MAGIC = b"LANESND1"
TRAILER = b"LANESEND"
# The embedded model's two runs dump ~3 MB; a real model's prompt a few hundred MB at most.
MAX_DUMP_BYTES = 1 << 30
MAX_NAME_BYTES = 256
MAX_NODES = 1 << 20
FLOAT_TYPES = frozenset({"f32", "f16", "bf16"})


class NodeDumpError(ValueError):
    """The dump cannot be read as the nodes it claims to hold."""


@dataclasses.dataclass(frozen=True)
class DumpedNode:
    name: str
    op: str
    type: str
    ne: tuple[int, int, int, int]
    values: np.ndarray  # float32, ggml layout flattened (i0 fastest); empty for non-float types


class _Reader:
    def __init__(self, path: pathlib.Path, data: bytes):
        self.path, self.data, self.at = path, data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise NodeDumpError(f"{self.path}: truncated at byte {self.at} reading {what} "
                                f"({n} bytes wanted, {len(self.data) - self.at} left)")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def text(self, what: str) -> str:
        n = self.u32(f"{what} length")
        if n > MAX_NAME_BYTES:
            raise NodeDumpError(f"{self.path}: {what} of {n} bytes at byte {self.at} (limit {MAX_NAME_BYTES})")
        try:
            return self.take(n, what).decode("ascii")
        except UnicodeDecodeError as err:
            raise NodeDumpError(f"{self.path}: {what} at byte {self.at - n} is not ASCII") from err


def read_dump(path: pathlib.Path) -> list[DumpedNode]:
    """Every node of one dump (gzip-compressed when its name ends in .gz), in the order the graph
    computed them."""
    path = pathlib.Path(path)
    size = path.stat().st_size
    if size > MAX_DUMP_BYTES:
        raise NodeDumpError(f"{path}: {size} bytes, over the {MAX_DUMP_BYTES}-byte limit")
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read(MAX_DUMP_BYTES + 1)
    except (OSError, EOFError) as err:  # a corrupt or truncated gzip stream
        raise NodeDumpError(f"{path}: not readable ({err})") from err
    if len(data) > MAX_DUMP_BYTES:
        raise NodeDumpError(f"{path}: over {MAX_DUMP_BYTES} bytes uncompressed")
    reader = _Reader(path, data)
    if reader.take(len(MAGIC), "the magic") != MAGIC:
        raise NodeDumpError(f"{path}: not a node dump (no {MAGIC!r} header)")
    nodes: list[DumpedNode] = []
    while True:
        if data[reader.at:reader.at + len(TRAILER)] == TRAILER:
            reader.take(len(TRAILER), "the trailer")
            written = reader.u64("the node count")
            break
        if len(nodes) >= MAX_NODES:
            raise NodeDumpError(f"{path}: more than {MAX_NODES} nodes")
        name = reader.text("a node name")
        op = reader.text(f"node {name!r}'s op")
        type_name = reader.text(f"node {name!r}'s type")
        ne = struct.unpack("<4q", reader.take(32, f"node {name!r}'s shape"))
        if any(n < 0 for n in ne):
            raise NodeDumpError(f"{path}: node {name!r} has a negative dimension {ne}")
        count = reader.u64(f"node {name!r}'s element count")
        want = math.prod(ne) if type_name in FLOAT_TYPES else 0
        if count != want:
            raise NodeDumpError(f"{path}: node {name!r} ({type_name}{list(ne)}) holds {count} values, its shape {want}")
        values = np.frombuffer(reader.take(4 * count, f"node {name!r}'s values"), dtype="<f4")
        nodes.append(DumpedNode(name, op, type_name, ne, values))
    if written != len(nodes):
        raise NodeDumpError(f"{path}: the trailer counts {written} nodes, the file holds {len(nodes)}")
    if reader.at != len(data):
        raise NodeDumpError(f"{path}: {len(data) - reader.at} bytes after the trailer")
    return nodes


def write_dump(path: pathlib.Path, nodes: list[DumpedNode]) -> None:
    """Writes nodes in the dump's layout, gzip-compressed (the runner keeps a subset of a large dump)."""
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(MAGIC)
        for n in nodes:
            for text in (n.name, n.op, n.type):
                raw = text.encode("ascii")
                f.write(struct.pack("<I", len(raw)) + raw)
            f.write(struct.pack("<4q", *n.ne))
            values = np.asarray(n.values, dtype="<f4")
            f.write(struct.pack("<Q", values.size))
            f.write(values.tobytes())
        f.write(TRAILER + struct.pack("<Q", len(nodes)))
