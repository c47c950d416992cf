"""Exception classes of the rewrite application (`rewrite_tuner`).

They derive from `studies.errors.StudyError`, so code (and the command line) that handles the
study framework's errors handles these too.
"""

from __future__ import annotations

from studies.errors import StudyError

__all__ = ["PriorsFileError"]


class PriorsFileError(StudyError, ValueError):
    """A rule-priors file is malformed, from a newer version, or holds non-finite numbers.

    Raised by `rewrite_tuner.read_priors_file` with the message of the format's one reader,
    `rewrite.read_priors_file` (which raises `rewrite.errors.PriorsError`)."""
