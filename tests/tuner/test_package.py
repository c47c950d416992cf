"""`import tuner` stays light: the CLI and studies' records import `tuner.TrialState` without
loading torch and BoTorch; the heavy names load on first use."""

from __future__ import annotations

import subprocess
import sys


def test_import_tuner_loads_no_botorch_until_a_heavy_name_is_used() -> None:
    code = (
        "import sys, tuner, studies.records\n"
        "assert 'botorch' not in sys.modules and 'torch' not in sys.modules, 'eager import'\n"
        "from tuner import Tuner, FlatSurrogate\n"
        "assert 'botorch' in sys.modules and Tuner.__module__ == 'tuner.tuner'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
