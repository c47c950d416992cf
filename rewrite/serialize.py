"""Versioned JSON serialization of graphs (exact round trip) and a compact text dump.

JSON layout (``format_version`` 1)::

    {"format": "rewrite-graph", "format_version": 1, "name": str,
     "inputs": [node id, ...], "outputs": [[node id, output index], ...],
     "nodes": [{"id": int, "op": str, "attrs": {...}, "inputs": [[id, index], ...],
                "types": [[[dims...], dtype], ...]}, ...]}     # nodes in topological order

Attribute values: JSON scalars; tuples as lists; a `ConstArray` as
``{"$const": {"dtype", "shape", "data": base64 of the C-order bytes}}``; a fused body as
``{"$graph": <graph object>}``. Loading re-runs type inference and checks it against the stored
types, so a corrupt file fails with a message naming the node.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rewrite.errors import RewriteError, SerializationError
from rewrite.ir import ConstArray, Graph, Node, TensorType, Value, numpy_dtype
from rewrite.ops import get_op

__all__ = ["FORMAT_VERSION", "from_json", "load", "save", "to_json", "to_text"]

#: Current graph format version; files with a larger version are refused.
FORMAT_VERSION = 1
_FORMAT = "rewrite-graph"


def _enc(v: Any) -> Any:
    if isinstance(v, ConstArray):
        data = base64.b64encode(v.array.tobytes()).decode("ascii")
        return {"$const": {"dtype": v.dtype, "shape": list(v.array.shape), "data": data}}
    if isinstance(v, Graph):
        return {"$graph": to_dict(v)}
    if isinstance(v, tuple | list):
        return [_enc(x) for x in v]
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    if isinstance(v, dict):
        if "$const" in v:
            c = v["$const"]
            raw = base64.b64decode(c["data"])
            arr = np.frombuffer(raw, dtype=numpy_dtype(c["dtype"])).reshape(c["shape"])
            return ConstArray(arr, c["dtype"])
        if "$graph" in v:
            return from_dict(v["$graph"])
        raise SerializationError(
            f"attribute objects must hold '$const' or '$graph', but got keys {sorted(v)}."
        )
    return v


def to_dict(graph: Graph) -> dict[str, Any]:
    """The JSON-ready dict of ``graph``."""
    nodes = [
        {
            "id": n.id,
            "op": n.op,
            "attrs": {k: _enc(v) for k, v in sorted(n.attrs.items())},
            "inputs": [list(v) for v in n.inputs],
            "types": [[list(t.shape), t.dtype] for t in n.types],
        }
        for n in graph
    ]
    return {
        "format": _FORMAT,
        "format_version": FORMAT_VERSION,
        "name": graph.name,
        "inputs": list(graph.inputs),
        "outputs": [list(v) for v in graph.outputs],
        "nodes": nodes,
    }


def to_json(graph: Graph, indent: int | None = None) -> str:
    """``graph`` as a JSON string (see the module docstring for the layout)."""
    return json.dumps(to_dict(graph), indent=indent)


def from_dict(d: Mapping[str, Any]) -> Graph:
    """Rebuild a graph from `to_dict` output, re-checking every node's types.

    Raises:
        SerializationError: On a wrong format, a newer ``format_version``, a missing field or a
            node whose stored types disagree with inference.
    """
    if not isinstance(d, Mapping) or d.get("format") != _FORMAT:
        raise SerializationError(
            f"a graph file must have format={_FORMAT!r}, but got {d.get('format') if isinstance(d, Mapping) else type(d).__name__!r}."
        )
    version = d.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise SerializationError(f"format_version must be a positive int, but got {version!r}.")
    if version > FORMAT_VERSION:
        raise SerializationError(
            f"this graph was written with format_version={version}, newer than the {FORMAT_VERSION} "
            "this rewrite-tuner reads; upgrade rewrite-tuner to load it."
        )
    try:
        nodes: dict[int, Node] = {}
        for nd in d["nodes"]:
            nodes[nd["id"]] = _load_node(nd, nodes)
        return Graph(nodes, d["inputs"], [Value(*v) for v in d["outputs"]], d["name"])
    except KeyError as e:
        raise SerializationError(
            f"graph file is missing field {e}; it is corrupt or truncated."
        ) from None
    except SerializationError:
        raise
    except (RewriteError, TypeError, ValueError) as e:
        raise SerializationError(f"graph file is corrupt: {e}") from e


def _load_node(nd: Mapping[str, Any], nodes: Mapping[int, Node]) -> Node:
    opdef = get_op(nd["op"])
    inputs = tuple(Value(*v) for v in nd["inputs"])
    for v in inputs:
        if v.node not in nodes:
            raise SerializationError(
                f"node {nd['id']} reads node {v.node}, which is not listed before it."
            )
    in_types = tuple(nodes[v.node].types[v.index] for v in inputs)
    attrs = opdef.check_attrs({k: _dec(v) for k, v in nd["attrs"].items()})
    types = opdef.infer(in_types, attrs)
    stored = tuple(TensorType(tuple(s), dt) for s, dt in nd["types"])
    if stored != types:
        raise SerializationError(
            f"node {nd['id']} ({nd['op']}) stores types {[str(t) for t in stored]} but inference gives "
            f"{[str(t) for t in types]}; the file is corrupt."
        )
    return Node(nd["id"], nd["op"], attrs, inputs, in_types, types)


def from_json(text: str) -> Graph:
    """Parse a graph from a JSON string.

    Raises:
        SerializationError: If the text is not JSON or not a valid graph.
    """
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise SerializationError(
            f"graph file is not valid JSON ({e}); it is corrupt or truncated."
        ) from None
    return from_dict(d)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see `write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, `os.replace`,
    then fsync the folder so the rename itself survives a crash.

    The file gets the permissions a plain ``open(path, "w")`` would give it: an existing file's
    mode is kept, a new file gets ``0o666`` minus the umask (and the folder's default ACL).

    Returns:
        The path written.

    Raises:
        OSError: If the folder does not exist or cannot be written; the error names ``path``,
            not the temporary file, and nothing is left behind.
    """
    path = Path(path)
    fd, tmp = _create_temp(path)
    try:
        with contextlib.suppress(OSError):  # keep the mode of the file being replaced
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def _create_temp(path: Path) -> tuple[int, str]:
    """Create ``.NAME.XXXXXXXX.tmp`` beside ``path`` with mode ``0o666`` (the kernel applies the
    umask, as for any new file; `tempfile.mkstemp` would force ``0o600``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as err:
            raise type(err)(err.errno, err.strerror, str(path)) from None
    raise FileExistsError(errno.EEXIST, "no free temporary file name beside it", str(path))


def save(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` as JSON atomically (see `write_text_atomic`)."""
    write_text_atomic(path, to_json(graph))


def load(path: str | os.PathLike[str]) -> Graph:
    """Read a graph written by `save`.

    Raises:
        SerializationError: If the file is corrupt or from a newer version.
    """
    return from_json(Path(path).read_text())


def _short(v: Any) -> str:
    if isinstance(v, ConstArray):
        if v.array.size <= 4:
            return repr(v.array.tolist())
        return f"<{v.type}>"
    if isinstance(v, Graph):
        return f"<body {len(v)} nodes>"
    return repr(v)


def to_text(graph: Graph) -> str:
    """A compact, human-readable listing: one line per node in topological order."""
    lines = [f"graph {graph.name}({', '.join(f'%{i}' for i in graph.inputs)}):"]
    for n in graph:
        ins = ", ".join(f"%{v.node}" + (f".{v.index}" if v.index else "") for v in n.inputs)
        attrs = ", ".join(
            f"{k}={_short(v)}"
            for k, v in sorted(n.attrs.items())
            if k not in ("shape", "dtype") or n.op not in ("input", "param")
        )
        sep = "; " if ins and attrs else ""
        types = ", ".join(map(str, n.types))
        lines.append(f"  %{n.id} = {n.op}({ins}{sep}{attrs}) : {types}")
    outs = ", ".join(f"%{v.node}" + (f".{v.index}" if v.index else "") for v in graph.outputs)
    lines.append(f"  return {outs}")
    return "\n".join(lines)
