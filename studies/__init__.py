"""Studies: the user-facing API, crash-safe storage, resume, export and the `tuner` command."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rewrite-tuner")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
