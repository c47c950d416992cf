"""What runs inside a worker process: one call of the user's evaluate function, made safe.

`run_evaluate` never raises: an exception, a timeout, or a malformed return value comes back as
``{"ok": False, "error": "..."}``, so a worker process survives every bad trial and the driving
process decides what to record. The function is a module-level callable so every
`concurrent.futures.Executor` (process pools, Dask) can ship it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["TrialTimeout", "WithContext", "exit_with_parent", "run_evaluate"]


class WithContext:
    """``evaluate`` bound to a study's context: calling it with a configuration calls
    ``evaluate(config, context)``.

    What `studies.Study.optimize` hands the driver for a study that has a context, so the
    driver and `run_evaluate` keep one shape of function (config -> dict) and the context is
    written once with the study, not into every trial's configuration. It pickles as the
    function's reference and the context (module-level functions only, like any evaluate).
    """

    __slots__ = ("context", "evaluate")

    def __init__(
        self, evaluate: Callable[..., Mapping[str, Any]], context: Mapping[str, Any]
    ) -> None:
        self.evaluate = evaluate
        self.context = context

    def __call__(self, config: dict[str, Any]) -> Mapping[str, Any]:
        return self.evaluate(config, self.context)

    def __getstate__(self) -> tuple[Any, Any]:
        return self.evaluate, self.context

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        self.evaluate, self.context = state

    def __repr__(self) -> str:  # the context may be large: name the function only
        name = getattr(self.evaluate, "__qualname__", repr(self.evaluate))
        return f"WithContext({name}, <context of {len(self.context)} keys>)"


class TrialTimeout(Exception):
    """Raised inside a worker when a trial runs past its timeout."""


# True while this process runs a trial; read only by `_on_interrupt` (pool workers' SIGINT handler)
_in_trial = False


def _on_interrupt(signum: int, frame: Any) -> None:
    """SIGINT in a pool worker: stop the running trial, ignore it while idle."""
    if _in_trial:
        raise KeyboardInterrupt


def exit_with_parent(interval: float = 0.5) -> None:
    """Process-pool initializer: quiet on Ctrl-C, and end this worker when its parent dies.

    Ctrl-C in a terminal sends SIGINT to the whole process group. The driving process handles it
    (re-queues the trials in flight and stops); a worker ignores it while idle, so no
    ``KeyboardInterrupt`` traceback is printed from its task queue, and stops the trial it runs
    (the outcome goes back to the driver as data, not printed), so the driver can exit at once.

    A worker blocked on its task queue never sees the driving process die from SIGKILL (its
    sibling workers keep the queue open), so a daemon thread polls the parent id and exits.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_interrupt)
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _on_alarm(signum: int, frame: Any) -> None:
    raise TrialTimeout("trial exceeded its timeout")


def run_evaluate(
    evaluate: Callable[[dict[str, Any]], Mapping[str, Any]],
    config: dict[str, Any],
    timeout: float | None = None,
) -> dict[str, Any]:
    """Call ``evaluate(config)`` and report the outcome as plain data.

    Args:
        evaluate: The user's function; returns a dict of objective values and metrics.
        config: The configuration to evaluate.
        timeout: Seconds the call may take. Enforced here with ``SIGALRM`` when running in a
            process's main thread (process pools); the driving process enforces it otherwise.

    Returns:
        ``{"ok": True, "result": {name: float}, "seconds": s}`` or
        ``{"ok": False, "error": "Type: message", "seconds": s}``.
    """
    global _in_trial
    start = time.monotonic()
    use_alarm = (
        timeout is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    previous = signal.signal(signal.SIGALRM, _on_alarm) if use_alarm else None
    try:
        _in_trial = True
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, float(timeout))  # type: ignore[arg-type]
        result = evaluate(config)
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
        out = {"ok": True, "result": _numbers(result)}
    except TrialTimeout:
        out = {"ok": False, "error": f"TimeoutError: trial exceeded its timeout of {timeout:g} s"}
    except Exception as err:  # every evaluate failure becomes data, never a crash
        tb = traceback.extract_tb(err.__traceback__)
        where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        out = {"ok": False, "error": f"{type(err).__name__}: {err}{where}"}
    finally:
        _in_trial = False
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)
    out["seconds"] = time.monotonic() - start
    return out


def _numbers(result: Any) -> dict[str, float]:
    if not isinstance(result, Mapping):
        raise TypeError(
            f"evaluate must return a dict of objective values and metrics, but returned "
            f"{type(result).__name__}: {result!r}"
        )
    out: dict[str, float] = {}
    for k, v in result.items():
        if not isinstance(k, str):
            raise TypeError(f"evaluate returned a non-string key {k!r}")
        if hasattr(v, "item") and callable(v.item):  # numpy / torch scalars
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TypeError(f"evaluate returned {k}={v!r}; every value must be a real number")
        out[k] = float(v)
    return out
