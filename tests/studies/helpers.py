"""Evaluate functions and settings shared by the studies tests (module-level: picklable)."""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

from studies.examples import toy_evaluate
from studies.settings import StudySettings

#: Cheap tuner: tiny acquisition budget, capped GP fit; short heartbeats for stale detection.
FAST_TUNER = {
    "num_restarts": 1,
    "raw_samples": 16,
    "maxiter": 5,
    "mc_samples": 16,
    "fit_maxiter": 5,
}


def fast_settings(n_initial: int = 4, **kwargs: Any) -> StudySettings:
    """Settings for tests: small Sobol design, cheap tuner, 0.2 s heartbeats, 1 s grace."""
    base = {"heartbeat_interval": 0.2, "grace_period": 1.0, "n_initial": n_initial}
    base.update(kwargs)
    return StudySettings(tuner_options=FAST_TUNER, **base)


class FakeClock:
    """A clock for `Storage(url, clock=...)` that moves only when told: ``clock.advance(1.2)``
    ages every heartbeat by 1.2 s without sleeping. Starts at the real time, so stored times
    stay plausible."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += seconds


def flaky_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """Fails in different ways depending on the population (4..64)."""
    pop = config["population"]
    out = toy_evaluate(config)
    if pop % 5 == 0:
        raise RuntimeError(f"boom at population {pop}")
    if pop % 5 == 1:
        out["latency"] = math.nan
    elif pop % 5 == 2:
        out["search_seconds"] = math.inf
    elif pop % 5 == 3:
        out["steps"] = math.nan  # a non-finite tracking metric is dropped, the trial completes
    return out


def missing_objective(config: dict[str, Any]) -> dict[str, float]:
    """Returns only one of the two objectives."""
    return {"latency": 1.0}


def not_a_dict(config: dict[str, Any]) -> Any:
    """Returns a list instead of a dict."""
    return [1.0, 2.0]


def sleepy_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """Sleeps 3 s when the population is even (to hit timeouts), else evaluates at once."""
    if config["population"] % 2 == 0:
        time.sleep(3)
    return toy_evaluate(config)


def crashing_worker(config: dict[str, Any]) -> dict[str, float]:
    """Kills its own worker process for small populations (a segfault stand-in)."""
    if config["population"] < 10:
        os._exit(13)
    return toy_evaluate(config)


def slow_toy(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem taking ~50 ms, so kills land while trials run."""
    time.sleep(0.05)
    return toy_evaluate(config)


def constrained_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem plus a constraint metric ``memory``."""
    out = toy_evaluate(config)
    out["memory"] = float(config["population"]) / 8.0
    return out


def int_objective(config: dict[str, Any]) -> dict[str, float]:
    """``f = (k - 1)^2`` for a space with one integer ``k``."""
    return {"f": float((config["k"] - 1) ** 2)}


def always_fails(config: dict[str, Any]) -> dict[str, float]:
    """Raises on every configuration (a broken evaluate)."""
    raise RuntimeError(f"cannot reach the benchmark server (population {config['population']})")


def huge_objective(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem, with ``latency=1e308`` (a sentinel no model can use) when the population
    is odd."""
    out = toy_evaluate(config)
    if config["population"] % 2 == 1:
        out["latency"] = 1e308
    return out


def odd_metrics(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem with a NaN tracking metric ``steps`` and a huge one ``bytes``."""
    return {**toy_evaluate(config), "steps": math.nan, "bytes": 1e300}


def blocks_alarm(config: dict[str, Any]) -> dict[str, float]:
    """Blocks SIGALRM (as some C extensions do), then hangs: the worker-side timeout never fires."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(10**6)
    return toy_evaluate(config)


def ignores_signals(config: dict[str, Any]) -> dict[str, float]:
    """Replaces the SIGALRM and SIGTERM handlers, then hangs: only SIGKILL stops it."""
    import signal

    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(10**6)
    return toy_evaluate(config)


class Concurrency:
    """How many `first_trial_hangs` calls run at once in this process (for thread executors)."""

    lock = threading.Lock()
    now = 0
    peak = 0
    calls = 0


def first_trial_hangs(config: dict[str, Any]) -> dict[str, float]:
    """The first call sleeps 1.5 s (past a short timeout), later ones return at once; counts the
    calls running at once in `Concurrency`."""
    with Concurrency.lock:
        Concurrency.calls += 1
        first = Concurrency.calls == 1
        Concurrency.now += 1
        Concurrency.peak = max(Concurrency.peak, Concurrency.now)
    try:
        if first:
            time.sleep(1.5)
        else:
            time.sleep(0.05)
        return toy_evaluate(config)
    finally:
        with Concurrency.lock:
            Concurrency.now -= 1


def fourth_trial_sleeps(config: dict[str, Any]) -> dict[str, float]:
    """The fourth call sleeps 1.5 s, the others 0.05 s (a trial far past the others)."""
    with Concurrency.lock:
        Concurrency.calls += 1
        fourth = Concurrency.calls == 4
    time.sleep(1.5 if fourth else 0.05)
    return toy_evaluate(config)
