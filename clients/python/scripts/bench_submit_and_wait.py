"""Benchmark: the Python client's `submit_and_wait` on approved proposals
against the Rust bench client's figure in the same run.

    python scripts/bench_submit_and_wait.py \
        --countersign target/release/countersign --bench target/release/countersign-bench

Each measures the same thing the same way: a closed loop of 32 clients, each
waiting for its decision before it submits the next, every proposal built to
be approved, against an embedded server (SQLite and the embedded queue)
started for it on a fresh data directory, after a warm-up that is not counted. First `countersign-bench submit-decide
--reject-ratio 0 --via submit-wait` ("submit → decision": one Submit that waits for its
decision, as `submit_and_wait` makes it), then 32 Python threads sharing one
`countersign.Client` (as an application shares it), then 32 asyncio tasks
sharing one `countersign.AsyncClient`, then 32 threads sharing one bare grpcio
channel making the same Submit from the generated messages (no countersign
code: what any client on grpcio pays for this call), then the floor: 32 threads
sharing one bare grpcio channel, each calling the health check (empty request
and answer, no countersign code, nothing decided); `--rounds` times,
interleaved. It prints the median round's p50s and their difference to Rust's
(the goal: the Python client adds at most 1 ms at p50), and the client CPU per
call, the floor's being what grpcio alone costs per unary call.

Run it from the venv of run-tests.sh (or any with grpcio and protobuf), with
release binaries (`cargo build --release -p countersign -p countersign-bench`).
It is not part of the tests.

With `--split-cores` every server runs on CPU 0 and every client (the Rust
bench, and this process with grpcio's threads) on CPU 1, as when client and
server are on machines of their own: on cores they share, a client's CPU is
CPU the server does not get, and the p50s then compare how much of the
machine each client takes as well as what it adds to a call.
"""

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))
# It starts servers while gRPC threads run (see tests/conftest.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import countersign  # noqa: E402


def percentile(sorted_ms: List[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


SERVER_CPU, CLIENT_CPU = 0, 1


def pinned_server(server_binary: Path, directory: Path) -> Path:
    """An executable that runs `server_binary` on SERVER_CPU alone, standing in
    for it wherever a server or an admin command is started."""
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("--split-cores needs taskset (util-linux)")
    wrapper = directory / "countersign"
    wrapper.write_text(f'#!/bin/sh\nexec {taskset} -c {SERVER_CPU} "{server_binary}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def rust_figure(bench: Path, server_binary: Path, proposals: int, clients: int, warmup: int, via: str,
                client_cpus: List[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                *client_cpus,
                str(bench),
                "submit-decide",
                "--proposals", str(proposals),
                "--clients", str(clients),
                "--reject-ratio", "0",
                "--via", via,
                "--warmup", str(warmup),
                "--countersign", str(server_binary),
                "--out-dir", out,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (result,) = Path(out).glob("submit-decide-*.json")
        latencies = json.loads(result.read_text())["latencies"]["submit → decision"]
    return {"p50_ms": latencies["p50_ms"], "p90_ms": latencies["p90_ms"], "p99_ms": latencies["p99_ms"]}


def seed(server, pool: int) -> str:
    """What the Rust bench seeds: one SOP, `pool` online targets, no parallel
    window and no breaker; a coordinator key."""
    server.admin("tenant", "set", "default", "--parallel-window", "0s", "--breaker-threshold", "0")
    server.put_sop("SOP-BENCH", "bench_restart")
    for n in range(pool):
        server.put_target(f"bench-{n}", {"cluster": f"c{n % 8}"})
    return server.key("coordinator")


def spec(n: int, pool: int) -> countersign.Spec:
    """The Rust bench's approved proposal number `n`."""
    return countersign.Spec(
        action="bench_restart",
        target=f"bench-{n % pool}",
        blast_radius="single_device",
        reason="benchmark",
        parameters={"n": n},
        operator="bench",
    )


def in_threads(clients: int, loop: Callable, shared: object) -> None:
    """Runs `loop(shared)` in `clients` threads at once, until all return."""
    threads = [threading.Thread(target=loop, args=(shared,)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_threads(endpoint: str, key: str, numbers: Iterator[int], pool: int, clients: int, warmup: int) -> List[float]:
    """`clients` threads sharing one Client, each in a closed loop."""
    latencies: List[float] = []
    lock = threading.Lock()

    def client_loop(client: countersign.Client) -> None:
        for n in numbers:
            started = time.perf_counter()
            proposal = client.submit_and_wait(spec(n, pool), timeout=60)
            elapsed = (time.perf_counter() - started) * 1000
            if proposal.state != "approved":
                raise SystemExit(f"proposal {proposal.id} was {proposal.state}, not approved")
            if n >= warmup:
                with lock:
                    latencies.append(elapsed)

    with countersign.Client(endpoint, key) as client:
        in_threads(clients, client_loop, client)
    return latencies


def run_tasks(endpoint: str, key: str, numbers: Iterator[int], pool: int, clients: int, warmup: int) -> List[float]:
    """`clients` asyncio tasks sharing one AsyncClient, each in a closed loop."""
    latencies: List[float] = []

    async def client_loop(client: countersign.AsyncClient) -> None:
        for n in numbers:
            started = time.perf_counter()
            proposal = await client.submit_and_wait(spec(n, pool), timeout=60)
            elapsed = (time.perf_counter() - started) * 1000
            if proposal.state != "approved":
                raise SystemExit(f"proposal {proposal.id} was {proposal.state}, not approved")
            if n >= warmup:
                latencies.append(elapsed)

    async def run() -> None:
        async with countersign.AsyncClient(endpoint, key) as client:
            await asyncio.gather(*(client_loop(client) for _ in range(clients)))

    asyncio.run(run())
    return latencies


def run_health_checks(endpoint: str, key: str, numbers: Iterator[int], pool: int, clients: int, warmup: int) -> List[float]:
    """The floor: `clients` threads sharing one grpcio channel (the client's
    options), each calling the health check in a closed loop."""
    import grpc

    from countersign import _core

    latencies: List[float] = []
    lock = threading.Lock()
    metadata = _core.metadata(key)

    def client_loop(check: Callable) -> None:
        for n in numbers:
            started = time.perf_counter()
            check(b"", timeout=60, metadata=metadata)
            elapsed = (time.perf_counter() - started) * 1000
            if n >= warmup:
                with lock:
                    latencies.append(elapsed)

    target = _core.parse_endpoint(endpoint).target
    with grpc.insecure_channel(target, options=_core.channel_options()) as channel:
        # No serializers: the empty request goes as its zero bytes, the answer comes back as bytes.
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        in_threads(clients, client_loop, check)
    return latencies


def run_bare_submits(endpoint: str, key: str, numbers: Iterator[int], pool: int, clients: int, warmup: int) -> List[float]:
    """What any client on grpcio pays for this call: `clients` threads sharing
    one grpcio channel (the client's options), each building the same
    SubmitRequest from the generated messages, calling Submit with the same
    wait and parsing the answer, with no countersign code between them."""
    import grpc

    from countersign import _core
    from countersign.v1 import proposal_service_pb2, types_pb2

    latencies: List[float] = []
    lock = threading.Lock()
    metadata = _core.metadata(key)
    approved = types_pb2.PROPOSAL_STATE_APPROVED

    def request(n: int) -> proposal_service_pb2.SubmitRequest:
        wire = types_pb2.ProposalSpec(
            action="bench_restart",
            target=f"bench-{n % pool}",
            reason="benchmark",
            blast_radius=types_pb2.BLAST_RADIUS_SINGLE_DEVICE,
            operator="bench",
        )
        setattr(wire, "class", types_pb2.OPERATION_CLASS_WRITE)
        wire.parameters.update({"n": n})
        submit = proposal_service_pb2.SubmitRequest(spec=wire)
        submit.wait_for_decision.FromSeconds(60)
        return submit

    def client_loop(submit: Callable) -> None:
        for n in numbers:
            started = time.perf_counter()
            proposal = submit(request(n), timeout=60, metadata=metadata).proposal
            elapsed = (time.perf_counter() - started) * 1000
            if proposal.state != approved:
                raise SystemExit(f"proposal {proposal.id} was in state {proposal.state}, not approved")
            if n >= warmup:
                with lock:
                    latencies.append(elapsed)

    target = _core.parse_endpoint(endpoint).target
    with grpc.insecure_channel(target, options=_core.channel_options()) as channel:
        submit = channel.unary_unary(
            "/countersign.v1.ProposalService/Submit",
            request_serializer=proposal_service_pb2.SubmitRequest.SerializeToString,
            response_deserializer=proposal_service_pb2.SubmitResponse.FromString,
        )
        in_threads(clients, client_loop, submit)
    return latencies


def python_figure(server_binary: Path, proposals: int, clients: int, warmup: int, driver: Callable) -> dict:
    os.environ["COUNTERSIGN_BIN"] = str(server_binary)
    from support import Server  # the tests' launcher: serve on a free port, fresh data

    pool = max(clients, min(proposals, 1024))
    with tempfile.TemporaryDirectory() as data:
        server = Server(Path(data))
        try:
            key = seed(server, pool)
            before = resource.getrusage(resource.RUSAGE_SELF)
            latencies = driver(server.endpoint, key, iter(range(warmup + proposals)), pool, clients, warmup)
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            server.stop()
    latencies.sort()
    return {
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p90_ms": round(percentile(latencies, 0.90), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "count": len(latencies),
        # This process's CPU per call: what the client costs the machine it shares with the server.
        "client_cpu_us_per_call": round(
            1e6 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / (warmup + proposals)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--countersign", type=Path, default=REPO / "target" / "release" / "countersign")
    parser.add_argument("--bench", type=Path, default=REPO / "target" / "release" / "countersign-bench")
    parser.add_argument("--proposals", type=int, default=5000, help="measured per client and round (default %(default)s)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of them all, interleaved (default %(default)s)")
    parser.add_argument("--via", default="submit-wait", help="the Rust bench's --via (default %(default)s)")
    parser.add_argument("--split-cores", action="store_true",
                        help=f"servers on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}")
    args = parser.parse_args()
    # The servers run in their data directories: a relative path would not name the binary there.
    args.countersign, args.bench = args.countersign.resolve(), args.bench.resolve()
    for binary in (args.countersign, args.bench):
        if not binary.is_file():
            raise SystemExit(f"no binary at {binary}: cargo build --release -p countersign -p countersign-bench")
    client_cpus: List[str] = []
    if args.split_cores:
        if len(os.sched_getaffinity(0)) < 2:
            raise SystemExit("--split-cores needs two CPUs")
        wrappers = tempfile.TemporaryDirectory()  # kept until the process ends
        args.countersign = pinned_server(args.countersign, Path(wrappers.name))
        client_cpus = ["taskset", "-c", str(CLIENT_CPU)]
        # Before any channel: grpcio's threads inherit this thread's affinity.
        os.sched_setaffinity(0, {CLIENT_CPU})
    floor = "grpcio health check (floor)"
    bare = "bare grpcio Submit, threads"
    drivers = (("Python Client, threads", run_threads), ("Python AsyncClient", run_tasks), (bare, run_bare_submits),
               (floor, run_health_checks))
    rounds: Dict[str, List[dict]] = {name: [] for name in ("Rust bench client", *(name for name, _ in drivers))}
    for _ in range(args.rounds):
        # Interleaved, so that a machine busier in one stretch weighs on all of them.
        rust = rust_figure(args.bench, args.countersign, args.proposals, args.clients, args.warmup, args.via,
                           client_cpus)
        rounds["Rust bench client"].append(rust)
        for name, driver in drivers:
            rounds[name].append(python_figure(args.countersign, args.proposals, args.clients, args.warmup, driver))
    cores = f"servers on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}" if args.split_cores else "cores shared"
    print(f"submit_and_wait on approved proposals: {args.clients} clients, embedded server, Rust --via {args.via}, "
          f"{args.proposals} measured, {args.rounds} rounds, {cores} (each figure: the median round's)")
    print(f"{'':26}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'p50 - Rust':>12}   p50 by round")
    rust = statistics.median(f["p50_ms"] for f in rounds["Rust bench client"])
    for name, figures in rounds.items():
        if name == floor:
            continue
        p50, p90, p99 = (statistics.median(f[q] for f in figures) for q in ("p50_ms", "p90_ms", "p99_ms"))
        by_round = " ".join(f"{f['p50_ms']:.1f}" for f in figures)
        print(f"{name:26}{p50:>10.3f}{p90:>10.3f}{p99:>10.3f}{p50 - rust:>+12.3f}   {by_round}")
    for name, _ in drivers:
        cpu = statistics.median(f["client_cpu_us_per_call"] for f in rounds[name])
        print(f"{name}: {cpu:.0f} µs of client CPU per call")
    p50, p90 = (statistics.median(f[q] for f in rounds[floor]) for q in ("p50_ms", "p90_ms"))
    print(f"{floor}: p50 {p50:.3f} ms, p90 {p90:.3f} ms (a health check decides nothing: only its CPU compares)")
    print("goal: the Python client adds at most 1 ms at p50")
    print(json.dumps(rounds))


if __name__ == "__main__":
    main()
