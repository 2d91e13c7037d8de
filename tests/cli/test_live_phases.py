"""On a terminal, `planner plan` shows its phases live on stderr and leaves no trace."""

from __future__ import annotations

import os
import subprocess
import sys


def test_plan_on_a_terminal_shows_each_phase_then_clears_the_line() -> None:
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "planner", "plan", "softmax"],
                                stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        out, _ = proc.communicate(timeout=120)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    tty = b"".join(chunks).decode()
    assert proc.returncode == 0
    frames = [f.strip() for f in tty.split("\r") if f.strip()]
    assert frames[0] == "build…"
    for done in ("build", "proofs", "model", "solve"):
        assert any(f.startswith("build ") and f" {done} " in f" {f} " for f in frames), frames
    assert any(f.endswith("evaluate…") for f in frames), frames
    assert tty.endswith("\r")  # the status line is erased before the table prints
    assert "status optimal" in out and "…" not in out
