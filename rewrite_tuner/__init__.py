"""The rewrite application on top of the engine (`rewrite`) and the generic study framework
(`spaces`, `tuner`, `structure`, `studies`): the built-in study that tunes the rewrite search's
knobs and rule priors (`rewrite_study`), its space (`search_space`), transfer validation
(`rewrite_tuner.transfer`), the priors export (`export_priors`) and the ``tuner`` command line
(`rewrite_tuner.cli`, with ``tuner demo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazyimport import lazy_exports

# Public names resolve lazily (PEP 562), so `tuner --help` does not import the engine or torch.
_EXPORTS = {
    "PriorsFile": "rewrite_tuner.export",
    "PriorsFileError": "rewrite_tuner.errors",
    "export_priors": "rewrite_tuner.export",
    "read_priors_file": "rewrite_tuner.export",
    "rewrite_study": "rewrite_tuner.study",
    "search_space": "rewrite_tuner.space",
}

__all__ = [
    "PriorsFileError",
    "PriorsFile",
    "export_priors",
    "read_priors_file",
    "rewrite_study",
    "search_space",
]

if TYPE_CHECKING:
    from rewrite_tuner.errors import PriorsFileError
    from rewrite_tuner.export import PriorsFile, export_priors, read_priors_file
    from rewrite_tuner.space import search_space
    from rewrite_tuner.study import rewrite_study


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
