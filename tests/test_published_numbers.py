"""The published numbers stay traced: README.md and bench/RESULTS.md against bench/results/ (no model runs)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command",
    [["bench/check_published.py"], ["bench/check_published.py", "--cited"], ["bench/bench_derived.py", "--check"]],
)
def test_published_numbers_are_traced_to_results(command):
    done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
