"""examples/restart_service.py against the real server, as its docstring runs it."""

import os
import subprocess
import sys
from pathlib import Path


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "restart_service.py"


def run_example(server, key, host):
    env = dict(os.environ)
    env.update(
        COUNTERSIGN_ENDPOINT=server.endpoint,
        COUNTERSIGN_API_KEY=key,
        COUNTERSIGN_PUBLIC_KEY=server.public_key,
        PYTHONPATH=str(EXAMPLE.parents[1] / "src"),
    )
    return subprocess.run([sys.executable, str(EXAMPLE), host, "nginx"], env=env, capture_output=True, text=True)


def test_the_example_restarts_only_with_the_second_signature(server, coordinator):
    server.put_sop("SOP-EXAMPLE", "host_restart_service", selector={"env": "pytest"})
    approved = run_example(server, coordinator, server.target())
    assert approved.returncode == 0, approved.stderr
    assert "restarting nginx" in approved.stdout and "restarted" in approved.stdout
    refused = run_example(server, coordinator, "no-such-host")
    assert refused.returncode == 3, refused.stderr
    assert "not restarted" in refused.stderr and "restarting" not in refused.stdout
