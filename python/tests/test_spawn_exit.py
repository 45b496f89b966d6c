"""DDP under torch.multiprocessing.spawn exits cleanly, run after run, on a loaded machine (issue 24, part 5).

Each worker exits with its sessions still alive (python/tests/spawn_worker.py).
hyperoffload closes live sessions at interpreter exit (an atexit handler in
hyperoffload/session.py) so that nothing of a session is torn down during
finalization, when a thread that must take the GIL aborts the process
("terminate called without an active exception"). RUNS runs of the spawn case,
each beside a process that keeps a core busy: every one must exit 0 with no
abort in its output.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

RUNS = 3
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spawn_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("variant, run", [("mlp", run) for run in range(RUNS)] + [("gpt2", 0)])
def test_a_spawned_ddp_run_with_sessions_alive_at_exit_exits_cleanly(variant, run):
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = subprocess.run([sys.executable, WORKER, str(free_port()), variant], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    finally:
        burner.kill()
        burner.wait()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "spawn ok" in done.stdout
    assert "terminate called" not in output, output[-4000:]
