"""Benchmark (not a test): the Stream page under a steady load of decisions.

Starts `countersign serve` (the Python client's test support), opens the
Stream page in headless Chromium as an on-call key, submits RATE proposals a
second for SECONDS through gRPC (each rejected at once: no SOP covers its
action), and measures for every decision the page shows how long after its
`decided_at` (set just before its commit) the row was painted (the next
animation frame after the row is inserted), and the tab's JS heap and DOM
node count as the run goes. Prints p50/p99/max and the memory samples.

    tests/console/run-bench.sh [--rate 200] [--seconds 60]
"""

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import countersign  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from conftest import CHROMIUM  # noqa: E402
from support import Server, unique  # noqa: E402

# Wraps the page's notification handler: after the row is inserted, the next
# frame records (now - decided_at) in ms.
RECORDER = """
window.__latencies = [];
const add = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, listener, options) {
  if (type !== "notification") return add.call(this, type, listener, options);
  return add.call(this, type, (event) => {
    listener(event);
    const note = JSON.parse(event.data);
    const decision = note.proposal && note.proposal.decision;
    if (!decision || !decision.decided_at) return;
    const decided = Date.parse(decision.decided_at);
    requestAnimationFrame(() => window.__latencies.push(Date.now() - decided));
  }, options);
};
"""


SUBMITTERS = 16


def load(server: Server, key: str, rate: float, seconds: int, sent: list) -> None:
    """Submits `rate` proposals a second for `seconds`, paced per tick."""
    mine = 0
    tick = 0.05
    per_tick = rate * tick
    owed = 0.0
    start = time.monotonic()
    with countersign.Client(server.endpoint, key) as client:
        while time.monotonic() - start < seconds:
            owed += per_tick
            while owed >= 1:
                owed -= 1
                spec = countersign.Spec(
                    action="bench_unknown", target=unique("bench"), blast_radius="single_device", reason="bench"
                )
                client.submit(spec)
                sent.append(time.monotonic())
                mine += 1
            behind = start + mine / rate - time.monotonic()
            time.sleep(max(0.0, min(tick, behind)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="countersign-console-bench-") as data:
        server = Server(Path(data))
        try:
            server.seed()
            oncall = server.key("oncall")
            coordinators = [server.key("coordinator") for _ in range(SUBMITTERS)]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync"],
                )
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                context.add_init_script(RECORDER)
                page = context.new_page()
                page.goto(server.console_url + "/stream")
                page.fill("#signin-key", oncall)
                page.keyboard.press("Enter")
                page.wait_for_selector("#stream-status.live")
                cdp = context.new_cdp_session(page)
                cdp.send("Performance.enable")

                def memory() -> tuple:
                    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                    return metrics["JSHeapUsedSize"] / 2**20, int(metrics["Nodes"])

                sent: list = []
                # Submitters in parallel, each its share of the rate, each its own key.
                threads = [
                    threading.Thread(target=load, args=(server, key, args.rate / SUBMITTERS, args.seconds, sent))
                    for key in coordinators
                ]
                samples = []
                for thread in threads:
                    thread.start()
                started = time.monotonic()
                while any(t.is_alive() for t in threads):
                    time.sleep(5)
                    heap, nodes = memory()
                    samples.append((round(time.monotonic() - started), round(heap, 1), nodes))
                for thread in threads:
                    thread.join()
                time.sleep(3)
                latencies = page.evaluate("window.__latencies")
                rows = page.evaluate("document.querySelectorAll('#stream-list li').length")
                browser.close()
        finally:
            server.stop()
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    elapsed = sent[-1] - sent[0] if len(sent) > 1 else 0
    print(f"submitted {len(sent)} in {elapsed:.1f}s ({len(sent) / max(elapsed, 1e-9):.0f}/s); shown {len(latencies)}; rows kept {rows}")
    print(f"decided_at -> painted (ms): p50 {p(0.5)} p99 {p(0.99)} max {latencies[-1]} mean {statistics.mean(latencies):.0f}")
    print("t(s)  JS heap (MiB)  DOM nodes")
    for t, heap, nodes in samples:
        print(f"{t:>4}  {heap:>13}  {nodes:>9}")


if __name__ == "__main__":
    main()
