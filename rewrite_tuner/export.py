"""Export a chosen trial's rule priors and search config as a versioned JSON file, and read it back.

File format (``format_version`` 1, owned by `rewrite.optimize.priors`: `PriorsFile` is the
document and `read_priors_file` here is its one reader, `rewrite.read_priors_file`)::

    {
      "format_version": 1,
      "kind": "rewrite-tuner/rule-priors",
      "priors": {"fuse": 0.5, "merge": 0.3, "shard": 0.2},     # the Simplex parameter, sums to 1
      "search_config": {"population": 32, "tau": 0.5, ...},    # every other parameter
      "provenance": {"study": ..., "trial": 7, "values": {...}, "date": "2026-...Z",
                     "package_version": "0.1.0", "pick": "...", "simplex": "priors"}
    }

Numbers are finite (the writer refuses NaN and infinity and writes nothing); the file is written to
a temporary file in the same directory, fsync'ed and moved into place with `os.replace`, so a crash
leaves the old file or the new one, never a torn one; it gets the permissions a plain ``open()``
would give it (the umask). An existing file is replaced only if it is a rule-priors file (its
``"kind"`` header says so), or with ``force=True`` an empty file or another priors file (a JSON
object with a ``"priors"`` entry); a SQLite database (the study's own or another) or any other file
is never replaced. Reading never executes code from
the file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from rewrite.errors import PriorsError
from rewrite.optimize.priors import (  # the format's one owner
    FORMAT_VERSION,
    KIND,
    PriorsFile,
    validate_document,
)
from rewrite.optimize.priors import read_priors_file as _read_priors_file
from rewrite_tuner.errors import PriorsFileError
from studies.errors import ExportError
from studies.pareto import PickRule, choose_trial
from studies.records import TrialRecord
from studies.simplex import simplex_names, simplex_weights

__all__ = [
    "FORMAT_VERSION",
    "KIND",
    "PriorsFile",
    "export_priors",
    "priors_from_trial",
    "priors_to_plot",
    "read_priors_file",
    "simplex_names",
]


def priors_from_trial(
    space: Any, trial: TrialRecord, simplex: str | None = None
) -> tuple[str, dict[str, float], dict[str, Any]]:
    """Split a trial's config into (simplex name, priors, search config).

    The search config holds the other tuned parameters and every search knob the trial ran
    with, fixed ones included (such as the step budget ``max_steps``: `rewrite.search` merges
    them into its config); other `Fixed` parameters (the context every trial shared, such as a
    study's workload suite) are left out (`export_priors` records them in the provenance).

    Raises:
        ExportError: If the space has no Simplex parameter, or several and ``simplex`` does not
            name one of them.
    """
    from rewrite.optimize.config import knob_names
    from rewrite_tuner.knobs import PRIOR_MODEL, priors_from_params

    if PRIOR_MODEL in trial.config and simplex is None:
        # a `rewrite_tuner.space.search_space` over an informed prior family: its member's rule
        # priors, and every search knob the configuration names (tuned or fixed, such as the step budget)
        family_priors = priors_from_params(trial.config)
        assert family_priors is not None
        knobs = set(knob_names())
        return PRIOR_MODEL, family_priors, {k: v for k, v in trial.config.items() if k in knobs}
    simplex, priors = simplex_weights(space, trial, simplex)
    from spaces import Fixed

    knobs = set(knob_names())  # a fixed search knob (the step budget) travels with the priors
    rest = {
        k: v
        for k, v in trial.config.items()
        if k != simplex and (k in knobs or not isinstance(space.params.get(k), Fixed))
    }
    return simplex, priors, rest


def priors_to_plot(
    space: Any, trial: TrialRecord, simplex: str | None = None
) -> tuple[str, dict[str, float]] | None:
    """The rule priors `studies.plots.plot_study` draws for ``trial`` (its ``priors_of``, as
    `tuner plot` passes it): a title and the priors of its Simplex or of its informed prior
    family; None for a space with neither.

    Raises:
        ExportError: As `priors_from_trial`.
    """
    from rewrite_tuner.knobs import PRIOR_MODEL

    if not simplex_names(space) and PRIOR_MODEL not in space.params:
        return None
    name, priors, _ = priors_from_trial(space, trial, simplex)
    return ("rule priors (tuned prior family)" if name == PRIOR_MODEL else name), priors


def export_priors(
    study: Any,
    path: str | os.PathLike[str],
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    force: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> PriorsFile:
    """Write the rule priors and search config of the trial ``pick`` chooses.

    Args:
        study: A `studies.Study`.
        path: Destination file, written atomically. An existing file is replaced only if it is a
            rule-priors file (a previous export) or ``force`` is true.
        pick: The pick rule (see `studies.pareto.choose_trial`): ``None`` (equal weights over
            normalized objectives on the Pareto set), a dict of weights, `Weighted`,
            `Constrained`, or a trial number.
        simplex: Which Simplex parameter holds the priors, when the space has several.
        force: Also replace an existing empty file, or a priors file of another kind or version
            (a JSON object with a ``"priors"`` entry). A SQLite database (the study's own or
            another) or any other file is never replaced.
        extra: More provenance (JSON-able, finite numbers), e.g. the gains measured against the
            defaults.

    Returns:
        What was written.

    Raises:
        ExportError: If no trial qualifies, the space has no (or an ambiguous) simplex, the
            chosen trial holds NaN or infinite numbers, or ``path`` cannot or may not be written
            (missing folder, a directory, the study's database, another kind of file without
            ``force``). Nothing is written then.
    """
    from studies import __version__
    from tuner.trial import split_run_metric

    trial, rule = choose_trial(study.trials, study.objectives, study.constraints, pick)
    name, priors, search_config = priors_from_trial(study.space, trial, simplex)
    provenance = {
        "study": study.name,
        "trial": trial.number,
        "values": dict(trial.values or {}),
        # per-run values (`RUN_METRICS`, about 100 per run) stay in the study
        "metrics": {k: v for k, v in trial.metrics.items() if split_run_metric(k) is None},
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "package_version": __version__,
        "pick": rule,
        "simplex": name,
        "fixed": {k: v for k, v in trial.config.items() if k != name and k not in search_config},
        **dict(extra or {}),
    }
    doc = PriorsFile(priors, search_config, provenance)
    try:
        validate_document(doc.to_dict(), where=f"trial {trial.number} of {study.name!r}")
    except PriorsError as err:
        raise ExportError(f"Refusing to export: {err} Nothing was written.") from None
    _check_destination(Path(path), study, force)
    try:
        doc.save(path)
    except OSError as err:
        raise ExportError(
            f"Cannot write the priors to {str(path)!r}: {err.strerror or err}. Nothing was "
            "written; choose another --out path."
        ) from err
    return doc


#: A file larger than this is never a rule-priors export (those are a few kilobytes).
_MAX_PRIORS_BYTES = 1 << 20


def _check_destination(path: Path, study: Any, force: bool) -> None:
    """Refuse, before anything is written, a destination that cannot be written or must not be
    replaced (see `export_priors`)."""
    shown = str(path)
    parent = path.parent
    if not parent.is_dir():
        raise ExportError(
            f"Cannot write the priors to {shown!r}: the folder {str(parent)!r} does not exist. "
            "Create it first, or choose another --out path."
        )
    if path.is_dir():
        raise ExportError(
            f"Cannot write the priors to {shown!r}: it is a directory. Give a file name, e.g. "
            f"{str(path / 'priors.json')!r}."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(
            f"Cannot write the priors to {shown!r}: the folder {str(parent)!r} is not writable. "
            "Choose another --out path."
        )
    database = _database_file(study)
    if database is not None and _same_file(path, database):
        raise ExportError(
            f"Refusing to write the priors to {shown!r}: it is the study's own database "
            f"({study.storage.url}) or one of its journal files, and replacing it would lose the "
            "trials (even with force). Nothing was written; choose another --out path, e.g. "
            "'priors.json'."
        )
    if not path.exists():
        return
    if not path.is_file():
        raise ExportError(
            f"Refusing to write the priors to {shown!r}: it is not a regular file. Nothing was "
            "written; choose another --out path."
        )
    why = _not_priors_file(path)
    if why is None:
        return
    if force:
        never = _never_replaced(path)
        if never is None:
            return
        raise ExportError(
            f"Refusing to replace {shown!r} even with force: it {never}. force (`--force`) "
            'replaces only an empty file or a priors file (JSON with a "priors" entry) of '
            "another kind or version, never a database or any other file. Nothing was written; "
            "choose another --out path, or move that file away yourself."
        )
    raise ExportError(
        f"Refusing to replace {shown!r}: it {why}, and only a rule-priors file `tuner export` "
        "wrote in this version is replaced. Nothing was written; choose another --out path, or "
        "pass force=True "
        "(`--force` for `tuner export` and `tuner demo`) to replace an empty file or a priors "
        'file of another kind or version (JSON with a "priors" entry).'
    )


def _database_file(study: Any) -> Path | None:
    """The SQLite file behind ``study`` (``None`` for PostgreSQL, in-memory or a stand-in)."""
    storage = getattr(study, "storage", None)
    engine = getattr(storage, "engine", None)
    if engine is None or engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    return Path(database) if database not in (None, "", ":memory:") else None


def _same_file(path: Path, database: Path) -> bool:
    """Whether ``path`` is the database file or one of its ``-wal`` / ``-shm`` / ``-journal``
    companions."""
    candidates = [database] + [database.with_name(database.name + s) for s in _SQLITE_SIDECARS]
    target = path.resolve()
    for candidate in candidates:
        if target == candidate.resolve():
            return True
        with contextlib.suppress(OSError):  # a hard link or another name of the same file
            if os.path.samefile(path, candidate):
                return True
    return False


_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def _not_priors_file(path: Path) -> str | None:
    """Why ``path`` is not a rule-priors file of the version this export writes (``None`` if it
    is one: a previous export)."""
    try:
        if path.stat().st_size > _MAX_PRIORS_BYTES:
            return f"is larger than {_MAX_PRIORS_BYTES} bytes"
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "is not a text file"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    try:
        doc = json.loads(text)
    except ValueError:
        return "is not JSON"
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return f'has no "kind": "{KIND}" header'
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        return (
            f"is a rule-priors file of format_version {version!r} (this export writes "
            f"{FORMAT_VERSION}), which a reader of that version may still need"
        )
    return None


_SQLITE_HEADER = b"SQLite format 3\x00"


def _never_replaced(path: Path) -> str | None:
    """Why ``force`` may not replace ``path`` either (``None``: an empty file, or a JSON object
    with a ``"priors"`` entry: a priors file of another kind or version, or written by hand)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return None
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if head == _SQLITE_HEADER:
        return "is a SQLite database (a study storage, perhaps another study's)"
    if size > _MAX_PRIORS_BYTES:
        return f"is larger than {_MAX_PRIORS_BYTES} bytes"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "is not a JSON file"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if not isinstance(doc, dict) or "priors" not in doc:
        return 'is a JSON file without a "priors" entry, so not a priors file'
    return None


def read_priors_file(
    path: str | os.PathLike[str], known_rules: Collection[str] | None = None
) -> PriorsFile:
    """Read and validate a rule-priors file with the format's one reader,
    `rewrite.read_priors_file`; its `rewrite.errors.PriorsError` comes as `PriorsFileError` (a
    `StudyError`), with the same message.

    Args:
        path: The file.
        known_rules: If given, every rule in the file must be one of these.

    Raises:
        PriorsFileError: If the file is missing, not JSON, of another kind, from a newer
            ``format_version``, names unknown rules, or holds non-finite, negative or non-summing
            probabilities.
    """
    try:
        return _read_priors_file(path, known_rules)
    except PriorsError as err:
        raise PriorsFileError(str(err)) from err
