"""Hardware profiles for the cost model, stored as documented JSON files beside this module.

A profile (``format_version`` 7; files of versions 1 to 6, which lack some optional fields,
still load) holds:

* ``peak_flops``: FLOP/s by unit (``matmul``: tensor cores / GEMM, ``vector``: everything
  else) and dtype; a dtype missing from a table uses that table's ``float32`` entry.
* ``memory_bandwidth`` (bytes/s), ``memory_capacity`` (bytes).
* ``launch_overhead`` (seconds of host work per kernel launch).
* ``efficiency``: achievable fraction of peak for ``matmul``, ``vector`` and ``memory``.
* ``matmul_tile``: ``[tm, tn, tk]``; GEMM work is counted on dims rounded up to these
  multiples (tile quantization penalty for small or odd shapes).
* ``family_efficiency`` (optional, version 2): op family (``conv``, ``attention``, ``norm``,
  ``reduction``, ``pool``, ``shape``, ``fused``...) -> a positive multiplier on both
  efficiencies of that family's kernels (default 1), fitted by `rewrite.measurement.calibrate`.
* ``element_time`` (optional, version 7): element-wise op -> seconds per output element at
  ``float32`` on the vector unit, measured by `rewrite.measurement.calibrate` on a CPU (the
  slope of the op's time over two sizes, so the launch is not in it). It replaces the op's
  FLOPs over the vector peak in the compute term: on a CPU a ``tanh`` costs ~12x an ``add`` per
  element and a ``pow`` by a tensor ~20x, which no one FLOP count per op captures. A key
  ``"<op>.scalar"`` is the binary op with a 0-d operand (what `rewrite.lowering` passes as a
  Python number: ``x ** 3.0`` is another kernel than ``x ** y``). Other dtypes scale by the
  vector peak's ratio to ``float32``; an op without an entry keeps its FLOPs.
* ``view_overhead`` (optional, version 2): seconds charged per view node (reshape, slice...),
  e.g. eager framework dispatch on a CPU; default 0 (views are free).
* ``fusion`` (optional, version 2): ``"kernel"`` (default: a fused group is one kernel),
  ``"eager"`` (the backend runs a fused group's body op by op, as eager PyTorch does; fitted
  profiles of uncompiled measurements say so) or, from version 4, ``"compiled"`` (a compiler
  such as Inductor generates the code of every kernel outside the matmul, convolution and
  attention families and fuses it with its neighbours: such a kernel is charged its arithmetic
  alone, no launch and no memory traffic, so the search does not chase gains the compiler takes
  anyway; the library kernels keep their whole cost).
* ``fold_weights`` (optional, version 4): computations on weights and constants alone run once,
  when the model is loaded (`rewrite.to_module` folds them, as a compiler's freezing pass does),
  so they cost no time per call; default false.
* ``matmul_align`` and ``unaligned_efficiency`` (optional, version 4): a GEMM whose output
  columns (N) are not a multiple of ``matmul_align`` runs at ``unaligned_efficiency`` times its
  efficiency (CPU BLAS packs such a product's last panel with a slow remainder path); defaults 1
  and 1 (no penalty).
* ``fused_epilogues`` (optional, version 5): the convolution library applies a convolution's
  bias, a residual add and an activation in the same call (oneDNN's post-ops on a CPU), so on a
  profile with ``fusion: "eager"`` a fused group of that form (`rewrite.epilogue`) is charged as
  one kernel, as `rewrite.to_module` runs it; default false.
* ``device_overhead`` (optional, version 3): seconds the device spends per kernel beyond its
  roofline time (start-up and drain of a small kernel), default 0.
* ``dispatch`` (optional, version 3): ``"serial"`` (default: the host's launch and view overheads
  add to the kernels' times, as on a CPU) or ``"async"`` (the host queues launches while the
  device runs earlier kernels, as on a GPU: a graph takes the longer of the host's time, launches
  and views, and the device's, its kernels; `rewrite.cost`).
* ``provenance`` (optional): how the profile was made (device name, torch version, date, fit
  quality); informational.
* ``interconnect`` (required): ``bandwidth`` (bytes/s per direction, > 0) and ``latency``
  (s, >= 0, default 0) for the alpha-beta collective model used by sharded graphs.
* ``cluster`` (optional, version 6): how devices of this kind are wired for plans over many
  devices (`rewrite.plans`): ``devices_per_node`` (int >= 1), ``intra_node`` and ``inter_node``
  links (each ``bandwidth`` in bytes/s per device and direction, ``latency`` in s). Default: one
  device per node, both links the ``interconnect``.
* ``training`` (optional, version 6): factors of the training-step model of `rewrite.plans`
  (each a positive number; see `rewrite.plans.step`): ``link_efficiency`` (achieved fraction of
  a link's bandwidth by collectives, default 0.8), ``float8_efficiency`` (achieved fraction of the
  float8 matmul peak, default the matmul efficiency), ``memory_reserve`` (reserved over allocated
  bytes of the caching allocator, default 1.0), ``backward_attention`` (attention backward over
  forward time, default 2.5).

Every number must be finite; `DeviceProfile` validates on construction and raises
`CostModelError` naming the field.

Built-in profiles: ``h100_sxm`` (alias ``h100``), ``h200``, ``a100``, ``cpu`` (datasheet
numbers), and the measured profiles under ``measured/`` (fitted by `rewrite.measurement.calibrate`
on the machine their ``provenance`` names). A path to a JSON file of the same layout works
wherever a name does.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, TypeGuard

from rewrite.errors import CostModelError

__all__ = [
    "DEVICE_FORMAT_VERSION",
    "DISPATCH",
    "FUSION",
    "DeviceProfile",
    "device_names",
    "load_device",
    "measured_profiles",
]

DEVICE_FORMAT_VERSION = 7
_DIR = Path(__file__).parent
#: How the host's launch work and the device's kernels combine (see the module docstring).
DISPATCH = ("serial", "async")
#: How fused groups and the kernels a compiler generates are charged (see the module docstring).
FUSION = ("kernel", "eager", "compiled")


@dataclass(frozen=True)
class DeviceProfile:
    """A validated hardware profile (see the module docstring for the fields)."""

    name: str
    description: str
    peak_flops: Mapping[str, Mapping[str, float]]
    memory_bandwidth: float
    memory_capacity: float
    launch_overhead: float
    efficiency: Mapping[str, float]
    matmul_tile: tuple[int, int, int]
    interconnect: Mapping[str, Any]
    aliases: tuple[str, ...] = ()
    family_efficiency: Mapping[str, float] = field(default_factory=dict)
    element_time: Mapping[str, float] = field(default_factory=dict)
    view_overhead: float = 0.0
    device_overhead: float = 0.0
    fusion: str = "kernel"
    dispatch: str = "serial"
    fold_weights: bool = False
    matmul_align: int = 1
    unaligned_efficiency: float = 1.0
    fused_epilogues: bool = False
    cluster: Mapping[str, Any] = field(default_factory=dict)
    training: Mapping[str, float] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for unit in ("matmul", "vector"):
            table = self.peak_flops.get(unit) if isinstance(self.peak_flops, Mapping) else None
            if (
                not isinstance(table, Mapping)
                or "float32" not in table
                or not all(_is_number(v) and v > 0 for v in table.values())
            ):
                raise CostModelError(
                    f"device {self.name!r}: peak_flops[{unit!r}] must map dtypes (including 'float32') "
                    f"to positive FLOP/s, but got {table!r}."
                )
        eff = self.efficiency if isinstance(self.efficiency, Mapping) else {}
        for k in ("matmul", "vector", "memory"):
            v = eff.get(k)
            if not (_is_number(v) and 0 < v <= 1):
                raise CostModelError(
                    f"device {self.name!r}: efficiency[{k!r}] must be a number in (0, 1], but got {v!r}."
                )
        for name, v, low in (
            ("memory_bandwidth", self.memory_bandwidth, "> 0"),
            ("memory_capacity", self.memory_capacity, "> 0"),
            ("launch_overhead", self.launch_overhead, ">= 0"),
            ("view_overhead", self.view_overhead, ">= 0"),
            ("device_overhead", self.device_overhead, ">= 0"),
        ):
            if not (_is_number(v) and (v > 0 if low == "> 0" else v >= 0)):
                raise CostModelError(
                    f"device {self.name!r}: {name} must be a finite number {low}, but got {v!r}."
                )
        if self.fusion not in FUSION:
            raise CostModelError(
                f"device {self.name!r}: fusion must be one of {FUSION}, but got {self.fusion!r}."
            )
        for flag in ("fold_weights", "fused_epilogues"):
            if not isinstance(getattr(self, flag), bool):
                raise CostModelError(
                    f"device {self.name!r}: {flag} must be true or false, but got "
                    f"{getattr(self, flag)!r}."
                )
        align, ue = self.matmul_align, self.unaligned_efficiency
        if isinstance(align, bool) or not isinstance(align, int) or align < 1:
            raise CostModelError(
                f"device {self.name!r}: matmul_align must be an int >= 1, but got {align!r}."
            )
        if not (_is_number(ue) and 0 < ue <= 1):
            raise CostModelError(
                f"device {self.name!r}: unaligned_efficiency must be a number in (0, 1], but got "
                f"{ue!r}."
            )
        if self.dispatch not in DISPATCH:
            raise CostModelError(
                f"device {self.name!r}: dispatch must be one of {DISPATCH}, but got "
                f"{self.dispatch!r}."
            )
        if not _positive_map(self.family_efficiency):
            raise CostModelError(
                f"device {self.name!r}: family_efficiency must map op families to positive "
                f"numbers, but got {self.family_efficiency!r}."
            )
        if not _positive_map(self.element_time):
            raise CostModelError(
                f"device {self.name!r}: element_time must map element-wise ops to positive "
                f"seconds per element, but got {self.element_time!r}."
            )
        tile = self.matmul_tile
        if (
            not isinstance(tile, tuple)
            or len(tile) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in tile)
        ):
            raise CostModelError(
                f"device {self.name!r}: matmul_tile must be 3 ints >= 1, got {tile!r}."
            )
        link = self.interconnect if isinstance(self.interconnect, Mapping) else {}
        bw, lat = link.get("bandwidth"), link.get("latency", 0.0)
        if not (_is_number(bw) and bw > 0 and _is_number(lat) and lat >= 0):
            raise CostModelError(
                f"device {self.name!r}: interconnect must give 'bandwidth' (bytes/s, > 0) and "
                f"'latency' (s, >= 0) for sharded costing, but got {self.interconnect!r}; add e.g. "
                '"interconnect": {"bandwidth": 450e9, "latency": 5e-6}.'
            )

        self._check_cluster()

    def _check_cluster(self) -> None:
        c = self.cluster if isinstance(self.cluster, Mapping) else None
        if c is None:
            raise CostModelError(f"device {self.name!r}: cluster must be an object, got {c!r}.")
        if c:
            dpn = c.get("devices_per_node")
            if isinstance(dpn, bool) or not isinstance(dpn, int) or dpn < 1:
                raise CostModelError(
                    f"device {self.name!r}: cluster.devices_per_node must be an int >= 1, but "
                    f"got {dpn!r}."
                )
            for key in ("intra_node", "inter_node"):
                link = c.get(key)
                ok = (
                    isinstance(link, Mapping)
                    and _is_number(link.get("bandwidth"))
                    and link["bandwidth"] > 0
                    and _is_number(link.get("latency", 0.0))
                )
                if not ok:
                    raise CostModelError(
                        f"device {self.name!r}: cluster.{key} must give 'bandwidth' (bytes/s, > 0) "
                        f"and 'latency' (s, >= 0), but got {link!r}."
                    )
        if not _positive_map(self.training):
            raise CostModelError(
                f"device {self.name!r}: training must map factor names to positive numbers, but "
                f"got {self.training!r}."
            )

    def links(self) -> tuple[int, Mapping[str, Any], Mapping[str, Any]]:
        """``(devices_per_node, intra_node link, inter_node link)``; without a ``cluster``
        field, one device per node and the ``interconnect`` for both links."""
        if self.cluster:
            c = self.cluster
            return int(c["devices_per_node"]), c["intra_node"], c["inter_node"]
        return 1, self.interconnect, self.interconnect

    def peak(self, unit: str, dtype: str) -> float:
        """Peak FLOP/s of ``unit`` (``matmul`` or ``vector``) for ``dtype``."""
        table = self.peak_flops[unit]
        return table.get(dtype, table["float32"])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceProfile:
        """Validate and build a profile from its JSON dict.

        Raises:
            CostModelError: On a missing field, a bad value or a newer ``format_version``.
        """
        version = d.get("format_version")
        if not isinstance(version, int) or version > DEVICE_FORMAT_VERSION:
            raise CostModelError(
                f"device profiles must have format_version <= {DEVICE_FORMAT_VERSION}, but got "
                f"{version!r}; upgrade rewrite-tuner to read newer profiles."
            )
        name = d.get("name", "?")
        try:
            return cls(
                name=d["name"],
                description=d.get("description", ""),
                peak_flops={u: dict(t) for u, t in d["peak_flops"].items()},
                memory_bandwidth=_number(d, "memory_bandwidth"),
                memory_capacity=_number(d, "memory_capacity"),
                launch_overhead=_number(d, "launch_overhead"),
                efficiency=dict(d["efficiency"]),
                matmul_tile=tuple(d.get("matmul_tile", (1, 1, 1))),  # type: ignore[arg-type]
                interconnect=dict(d["interconnect"]),
                aliases=tuple(d.get("aliases", ())),
                family_efficiency=dict(d.get("family_efficiency", {})),
                element_time=dict(d.get("element_time", {})),
                view_overhead=_number(d, "view_overhead") if "view_overhead" in d else 0.0,
                device_overhead=(_number(d, "device_overhead") if "device_overhead" in d else 0.0),
                fusion=d.get("fusion", "kernel"),
                dispatch=d.get("dispatch", "serial"),
                fold_weights=d.get("fold_weights", False),
                matmul_align=d.get("matmul_align", 1),
                unaligned_efficiency=(
                    _number(d, "unaligned_efficiency") if "unaligned_efficiency" in d else 1.0
                ),
                fused_epilogues=d.get("fused_epilogues", False),
                cluster=dict(d.get("cluster", {})),
                training=dict(d.get("training", {})),
                provenance=dict(d.get("provenance", {})),
            )
        except KeyError as e:
            raise CostModelError(
                f"device profile {name!r} is missing field {e}; see the field list in "
                "rewrite/devices/__init__.py or copy a built-in profile such as h100_sxm.json."
            ) from None
        except (TypeError, ValueError, AttributeError) as e:
            if isinstance(e, CostModelError):
                raise
            raise CostModelError(
                f"device profile {name!r} has a field of the wrong type ({e}); peak_flops, "
                "efficiency and interconnect are objects, the others numbers."
            ) from None

    def to_dict(self) -> dict[str, Any]:
        """The profile's JSON dict (current ``format_version``); `from_dict` reads it back."""
        return {
            "format": "rewrite-device",
            "format_version": DEVICE_FORMAT_VERSION,
            "name": self.name,
            "aliases": list(self.aliases),
            "description": self.description,
            "peak_flops": {u: dict(t) for u, t in self.peak_flops.items()},
            "memory_bandwidth": self.memory_bandwidth,
            "memory_capacity": self.memory_capacity,
            "launch_overhead": self.launch_overhead,
            "view_overhead": self.view_overhead,
            "device_overhead": self.device_overhead,
            "efficiency": dict(self.efficiency),
            "family_efficiency": dict(self.family_efficiency),
            "element_time": dict(self.element_time),
            "fusion": self.fusion,
            "dispatch": self.dispatch,
            "fold_weights": self.fold_weights,
            "matmul_align": self.matmul_align,
            "unaligned_efficiency": self.unaligned_efficiency,
            "fused_epilogues": self.fused_epilogues,
            "matmul_tile": list(self.matmul_tile),
            "interconnect": dict(self.interconnect),
            "cluster": dict(self.cluster),
            "training": dict(self.training),
            "provenance": dict(self.provenance),
        }

    @cached_property
    def digest(self) -> str:
        """A digest of the profile's contents (`to_dict`), computed once per profile: equal
        profiles share it, so it keys the cost caches (`rewrite.cost`) rather than an object's
        ``id`` or its name."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _positive_map(value: Any) -> bool:
    """Whether ``value`` maps names (strings) to positive numbers."""
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and _is_number(v) and v > 0 for k, v in value.items()
    )


def _is_number(v: Any) -> TypeGuard[float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _number(d: Mapping[str, Any], field: str) -> float:
    v = d[field]
    if not _is_number(v):
        raise CostModelError(
            f"device profile {d.get('name', '?')!r}: {field} must be a finite number, but got {v!r}."
        )
    return float(v)


@cache
def _builtin() -> dict[str, DeviceProfile]:
    out: dict[str, DeviceProfile] = {}
    for p in [*sorted(_DIR.glob("*.json")), *sorted((_DIR / "measured").glob("*.json"))]:
        prof = DeviceProfile.from_dict(json.loads(p.read_text()))
        for key in (prof.name, *prof.aliases):
            out[key] = prof
    return out


def measured_profiles() -> list[DeviceProfile]:
    """The shipped profiles fitted by `rewrite.measurement.calibrate` on real machines
    (``rewrite/devices/measured/``; their provenance names the machine), sorted by file name."""
    return [
        DeviceProfile.from_dict(json.loads(p.read_text()))
        for p in sorted((_DIR / "measured").glob("*.json"))
    ]


def device_names() -> list[str]:
    """Names of the built-in profiles (aliases excluded)."""
    return sorted({p.name for p in _builtin().values()})


_FILES: dict[tuple[str, int, int], DeviceProfile] = {}
_FILES_MAX = 64


def _load_file(path: Path) -> DeviceProfile:
    """The profile in a JSON file, read again only when the file changed (its modification time
    or size), so a path passed on every call yields one profile object."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    hit = _FILES.get(key)
    if hit is not None:
        return hit
    try:
        prof = DeviceProfile.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as e:
        raise CostModelError(f"device profile {str(path)!r} is not valid JSON: {e}.") from None
    except UnicodeDecodeError:
        raise CostModelError(
            f"device profile {str(path)!r} is not a text file (not UTF-8); pass a profile JSON "
            "such as rewrite/devices/h100_sxm.json."
        ) from None
    for old in [k for k in _FILES if k[0] == key[0]]:
        del _FILES[old]
    if len(_FILES) >= _FILES_MAX:
        _FILES.pop(next(iter(_FILES)))
    _FILES[key] = prof
    return prof


def load_device(device: str | Path | DeviceProfile) -> DeviceProfile:
    """A profile by built-in name or alias, by JSON path (read once while the file is
    unchanged), or passed through.

    Raises:
        CostModelError: If the name is unknown or the file invalid.
    """
    if isinstance(device, DeviceProfile):
        return device
    builtin = _builtin()
    if isinstance(device, str) and device.lower() in builtin:
        return builtin[device.lower()]
    if not isinstance(device, str | Path):
        raise CostModelError(
            f"device must be a profile name ({sorted(builtin)}), a path to a profile JSON or a "
            f"DeviceProfile, but got {device!r} of type {type(device).__name__}."
        )
    path = Path(device)
    looks_like_path = isinstance(device, Path) or path.suffix == ".json" or "/" in str(device)
    if looks_like_path and not path.is_file():
        state = "is a folder" if path.is_dir() else "does not exist"
        raise CostModelError(
            f"device profile file {str(path)!r} {state}. Check the path (relative paths start "
            f"at {str(Path.cwd())!r}), or name a built-in profile: {sorted(builtin)}."
        )
    if path.suffix == ".json" and path.exists():
        return _load_file(path)
    raise CostModelError(
        f"device must be one of {sorted(builtin)} or a path to a profile JSON, but got {str(device)!r}."
    )
