"""platform/setup.sh names every missing system prerequisite at once, in seconds, before it builds anything."""

import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "env", "sed", "head", "cat", "sha256sum", "cut", "dirname", "rm", "touch")


def test_setup_names_a_missing_python_and_java_before_building(tmp_path):
    for tool in TOOLS:  # a PATH with the shell's tools but neither Java nor the Python asked for
        os.symlink(shutil.which(tool), tmp_path / tool)
    started = time.monotonic()
    done = subprocess.run([str(tmp_path / "bash"), str(REPO / "platform" / "setup.sh")], capture_output=True,
                          text=True, env={"PATH": str(tmp_path), "PYTHON": "python3.99"}, timeout=60)
    assert done.returncode == 1
    assert "python3.99 not found" in done.stderr and "Java 17 or 21" in done.stderr
    assert "openjdk-17-jre-headless" in done.stderr
    assert time.monotonic() - started < 10
