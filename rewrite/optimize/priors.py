"""`RulePriors`: the firing weight of every rewrite rule; `PriorsFile`: the versioned document
that carries rule priors, search knobs and provenance (the file ``tuner export`` writes).

`RulePriors` holds weights only. Knobs and provenance travel in a `PriorsFile`, and a search
splits one once, at its entry (`rewrite.optimize.api.search_inputs`): the knobs into its
`SearchConfig`, the weights into a `RulePriors`.

File format (``format_version`` 1; the document `studies` exports)::

    {
      "format_version": 1,
      "kind": "rewrite-tuner/rule-priors",
      "priors": {"fuse_elementwise": 0.5, "merge_matmul": 0.3, ...},  # finite, >= 0, sum to 1
                                            # ({} for uniform)
      "search_config": {"tau": 0.5, ...},   # optional: SearchConfig knobs
      "provenance": {...}                   # optional: free-form, finite numbers only
    }

Rules missing from a file get the stated default weight `MISSING_DEFAULT`: the uniform share
``1 / n`` over the ``n`` rules the search runs with, after which all weights are renormalized to
sum to 1. A file naming a rule the search does not know is an error, as is a newer
``format_version``, another ``kind``, or a non-finite number anywhere in the file.

This module is the format's one owner: `PriorsFile` is the document, `read_priors_file` its one
reader (`PriorsFile.load`, `rewrite.search(priors=path)` and the application's
``read_priors_file`` all go through it) and `PriorsFile.save` its one writer.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewrite.errors import PriorsError
from rewrite.serialize import write_text_atomic

__all__ = [
    "FORMAT_VERSION",
    "KIND",
    "MISSING_DEFAULT",
    "PriorsLike",
    "RulePriors",
    "PriorsFile",
    "read_priors_file",
    "validate_document",
]

FORMAT_VERSION = 1
"""Version of the rule-priors file format this code writes; versions up to it load."""

KIND = "rewrite-tuner/rule-priors"
"""The ``kind`` field of a rule-priors file."""

MISSING_DEFAULT = "uniform"
"""Weight of a rule a priors file or dict leaves out: ``1 / n`` before renormalizing."""

_SUM_TOL = 1e-6


@dataclass(frozen=True)
class PriorsFile:
    """A tuned search: rule priors, the search knobs tuned with them and their provenance (the
    content of a priors file, the format's one document type).

    Attributes:
        priors: Rule name to firing probability (non-negative, summing to 1), as in the file.
        search_config: Search knobs that came with the priors (an export's chosen trial's other
            parameters), by name.
        provenance: Where the numbers come from (study, trial, values, date, package version...).
        format_version: Format version of the file.
    """

    priors: dict[str, float]
    search_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "format_version": self.format_version,
            "kind": KIND,
            "priors": dict(self.priors),
            "search_config": dict(self.search_config),
            "provenance": dict(self.provenance),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the document as strict JSON (no NaN), atomically
        (`rewrite.serialize.write_text_atomic`).

        Returns:
            The path written.
        """
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
        return write_text_atomic(path, text)

    @classmethod
    def from_dict(
        cls,
        doc: Any,
        known_rules: Collection[str] | None = None,
        where: str = "priors document",
    ) -> PriorsFile:
        """Validate a parsed document (`validate_document`) and return its content.

        Args:
            doc: The parsed JSON document.
            known_rules: If given, every rule in the document must be one of these.
            where: Names the source in error messages (a path, or a trial).

        Raises:
            PriorsError: On a newer or invalid ``format_version``, another ``kind``, unknown
                rules, negative, non-finite or non-summing priors, or a non-finite number in
                ``search_config`` or ``provenance``.
        """
        validate_document(doc, where)
        priors = doc["priors"]
        if known_rules is not None:
            unknown = sorted(set(priors) - set(known_rules))
            if unknown:
                raise PriorsError(
                    f"{where} names unknown rules {unknown}; known rules are "
                    f"{sorted(known_rules)}. Remove them, or register the rules first."
                )
        return cls(
            priors={k: float(v) for k, v in priors.items()},
            search_config=dict(doc.get("search_config", {})),
            provenance=dict(doc.get("provenance", {})),
            format_version=int(doc["format_version"]),
        )

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], known_rules: Collection[str] | None = None
    ) -> PriorsFile:
        """`read_priors_file`."""
        return read_priors_file(path, known_rules)

    @classmethod
    def of(cls, priors: PriorsLike) -> PriorsFile:
        """``priors`` as a document: a `PriorsFile` as is, a priors file read
        (`read_priors_file`), rule weights (normalized) with no knobs and no provenance.

        Raises:
            PriorsError: On another type, an invalid file or an invalid weight.
        """
        if isinstance(priors, PriorsFile):
            return priors
        if isinstance(priors, str | os.PathLike):
            return read_priors_file(priors)
        return cls(RulePriors.coerce(priors).as_dict())


def read_priors_file(
    path: str | os.PathLike[str], known_rules: Collection[str] | None = None
) -> PriorsFile:
    """Read and validate a priors file (written by `PriorsFile.save` or ``tuner export``).

    The format's one reader: strict JSON (NaN and infinity are refused while parsing), then
    `PriorsFile.from_dict`. Reading never executes code from the file.

    Args:
        path: The JSON file.
        known_rules: If given, every rule in the file must be one of these.

    Raises:
        PriorsError: If the file is missing or unreadable, not JSON, of another kind, from a
            newer ``format_version``, names unknown rules, or holds non-finite, negative or
            non-summing probabilities.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PriorsError(f"Cannot read rule-priors file {str(path)!r}: {err}.") from err
    except UnicodeDecodeError:
        raise PriorsError(
            f"{str(path)!r} is not a text file (not UTF-8), so not a rule-priors JSON file; pass "
            "the file `tuner export` or PriorsFile.save wrote."
        ) from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:
        raise PriorsError(
            f"{str(path)!r} is not a valid rule-priors JSON file: {err}. Rewrite it with "
            "PriorsFile.save or `tuner export`."
        ) from err
    return PriorsFile.from_dict(doc, known_rules, where=repr(str(path)))


class RulePriors:
    """Rule name to firing probability: weights only (the knobs and provenance a priors file
    carries beside them are a `PriorsFile`'s).

    Weights are stored normalized (they sum to 1). An empty `RulePriors` means uniform over
    whatever rules the search runs with. Instances are immutable.

    Args:
        weights: Rule name to non-negative finite weight with a positive sum; normalized here.
            None or empty means uniform.

    Raises:
        PriorsError: On a non-string name, a negative or non-finite weight, or a zero sum.
    """

    __slots__ = ("_w",)

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self._w = _normalized(weights or {})

    # ------------------------------------------------------------------ constructors
    @classmethod
    def uniform(cls, rule_names: Sequence[str]) -> RulePriors:
        """Equal weight on every rule of ``rule_names``."""
        return cls(dict.fromkeys(rule_names, 1.0))

    @classmethod
    def coerce(cls, priors: RulePriors | Mapping[str, float] | None) -> RulePriors:
        """Accept a `RulePriors` (returned as is), a dict of weights or None (uniform).

        Raises:
            PriorsError: On another type (a file path included: a priors file carries knobs
                too; pass it to `rewrite.search`, or read it with `read_priors_file`) or an
                invalid value.
        """
        if priors is None:
            return cls()
        if isinstance(priors, RulePriors):
            return priors
        if isinstance(priors, Mapping):
            return cls(priors)
        hint = (
            " A priors file carries search knobs beside the weights: pass its path to "
            "rewrite.search, or read it with read_priors_file (a PriorsFile)."
            if isinstance(priors, str | os.PathLike)
            else ""
        )
        raise PriorsError(
            f"rule priors must be a RulePriors, a dict of rule name to weight or None, but got "
            f"{type(priors).__name__}: {priors!r}.{hint}"
        )

    # ------------------------------------------------------------------ access
    @property
    def names(self) -> list[str]:
        """Rules named explicitly, in insertion order."""
        return list(self._w)

    def as_dict(self) -> dict[str, float]:
        """Rule name to normalized weight (a copy)."""
        return dict(self._w)

    def __getitem__(self, name: str) -> float:
        return self._w[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._w)

    def __len__(self) -> int:
        return len(self._w)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RulePriors) and self._w == other._w

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v:.4g}" for k, v in self._w.items())
        return f"RulePriors({{{inner}}})"

    def resolve(self, rule_names: Sequence[str]) -> np.ndarray:
        """Probabilities aligned to ``rule_names``, summing to 1.

        A rule of ``rule_names`` these priors leave out gets ``1 / len(rule_names)`` (see
        `MISSING_DEFAULT`) before renormalizing.

        Args:
            rule_names: The ``n`` rules the search runs with, distinct.

        Returns:
            ``n``-dim float64 array of probabilities.

        Raises:
            PriorsError: If these priors name a rule outside ``rule_names``, or all the weights
                on ``rule_names`` are zero.
        """
        names = list(rule_names)
        if not names:
            raise PriorsError("resolve needs at least one rule name, but got none.")
        unknown = sorted(set(self._w) - set(names))
        if unknown:
            raise PriorsError(
                f"Rule priors name unknown rules {unknown}; the search's rules are "
                f"{sorted(names)}. Remove them or register those rules."
            )
        default = 1.0 / len(names)
        p = np.array([self._w.get(n, default) for n in names], dtype=np.float64)
        total = p.sum()
        if not total > 0:
            raise PriorsError(
                f"Rule priors give zero weight to every rule in {names}; give one rule a "
                "positive weight."
            )
        return p / total


PriorsLike = PriorsFile | RulePriors | Mapping[str, float] | str | os.PathLike | None
"""What `rewrite.search` takes as ``priors``: a tuned search (a document, or the path of its
file), rule weights, or None (uniform)."""


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} (NaN and infinity are not allowed)")


def _finite_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _normalized(weights: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(weights, Mapping):
        raise PriorsError(f"Rule priors must be a dict of rule name to weight, got {weights!r}.")
    for k, v in weights.items():
        if not isinstance(k, str) or not k:
            raise PriorsError(f"Rule names must be non-empty strings, but got {k!r}.")
        if not _finite_number(v) and not isinstance(v, np.floating | np.integer):
            raise PriorsError(f"Rule prior of {k!r} must be a finite number, but got {v!r}.")
        if not math.isfinite(float(v)) or float(v) < 0:
            raise PriorsError(f"Rule prior of {k!r} must be finite and >= 0, but got {v!r}.")
    total = math.fsum(float(v) for v in weights.values())
    if weights and not total > 0:
        raise PriorsError(
            f"Rule priors must have a positive sum, but all are zero: {dict(weights)}."
        )
    return {k: float(v) / total for k, v in weights.items()}


def validate_document(doc: Any, where: str) -> None:
    """Check a rule-priors document (format version, kind, priors summing to 1, finite numbers).

    Args:
        doc: The parsed JSON document.
        where: What to call it in error messages (a path, or a trial).

    Raises:
        PriorsError: Naming the first rule the document breaks.
    """
    if not isinstance(doc, Mapping):
        raise PriorsError(f"{where} must hold a JSON object, got {type(doc).__name__}.")
    version = doc.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PriorsError(f"{where} needs an integer format_version >= 1, got {version!r}.")
    if version > FORMAT_VERSION:
        raise PriorsError(
            f"{where} has format_version {version}, but this rewrite-tuner reads versions up "
            f"to {FORMAT_VERSION}. Upgrade rewrite-tuner (pip install -U rewrite-tuner)."
        )
    if doc.get("kind") != KIND:
        raise PriorsError(f"{where} has kind {doc.get('kind')!r}; expected {KIND!r}.")
    priors = doc.get("priors")
    if not isinstance(priors, Mapping):
        raise PriorsError(
            f"{where}: 'priors' must be an object of rule -> number ({{}} for uniform), but got "
            f"{priors!r}."
        )
    bad = {k: v for k, v in priors.items() if not _finite_number(v) or v < 0}
    if bad:
        raise PriorsError(
            f"{where}: rule priors must be finite non-negative numbers (>= 0); invalid: {bad}."
        )
    total = math.fsum(priors.values())
    if priors and abs(total - 1.0) > _SUM_TOL:
        raise PriorsError(
            f"{where}: rule priors must sum to 1 (within {_SUM_TOL}), but sum to {total!r}."
        )
    for key in ("search_config", "provenance"):
        value = doc.get(key, {})
        if not isinstance(value, Mapping):
            raise PriorsError(f"{where}: {key!r} must be a JSON object, got {value!r}.")
        bad_path = _first_non_finite(value, key)
        if bad_path is not None:
            raise PriorsError(f"{where}: {bad_path} is not a finite number.")


def _first_non_finite(obj: Any, path: str) -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return path
    if isinstance(obj, Mapping):
        items: Any = obj.items()
    elif isinstance(obj, list | tuple):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _first_non_finite(v, f"{path}.{k}" if isinstance(obj, Mapping) else f"{path}[{k}]")
        if found:
            return found
    return None
