"""The MCP round trip on the embedded default: a real ``engram mcp`` process driven by the MCP SDK's stdio client;
times ``add_memory`` then ``search`` until the added text is among the hits, for ``--n`` notes after one warm-up
(the first call loads the models). Prints the wall times (median, max) and the load average. Not a test.

    python bench/mcp_roundtrip.py --n 5 [--data-dir DIR]
    python bench/mcp_roundtrip.py --n 5 --api http://engram:8000 --api-key KEY   # through the HTTP API

With ``--api`` the server is ``engram mcp --api URL`` (its tools call the API through the SDK; a worker must
serve the API's queues), so the times are add → stored → searchable through the whole distributed path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]


async def run(data_dir: Path, n: int, api: str | None = None, api_key: str | None = None) -> dict[str, list[float]]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    via = ["--api", api] if api else []
    if api_key:
        env["ENGRAM_API_KEY"] = api_key  # not on the command line
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        env=env,
        args=["-m", "engram.api.cli", "mcp", "--data-dir", str(data_dir), "--user", "bench", *via],
    )
    times: dict[str, list[float]] = {"add": [], "search": [], "round_trip": [], "first_round_trip": []}
    async with Client(params, read_timeout_seconds=900) as client:
        for i in range(n + 1):
            text = f"Note {i}: the parcel locker code for building {i} is {4000 + i}"
            t0 = time.perf_counter()
            added = await client.call_tool("add_memory", {"text": text, "id": f"bench-{time.time_ns()}"})
            t1 = time.perf_counter()
            assert not added.is_error, added.content[0].text
            found = await client.call_tool(
                "search", {"query": f"parcel locker code building {i}", "user_id": "bench", "limit": 5}
            )
            t2 = time.perf_counter()
            assert text in found.content[0].text, found.content[0].text[:500]
            if i == 0:
                times["first_round_trip"].append(t2 - t0)
                continue
            times["add"].append(t1 - t0)
            times["search"].append(t2 - t1)
            times["round_trip"].append(t2 - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="Notes timed after the warm-up.")
    ap.add_argument("--data-dir", type=Path, default=None, help="Store to use (default: a fresh temporary one).")
    ap.add_argument("--api", default=None, help="Through this engram HTTP API (engram mcp --api) instead.")
    ap.add_argument("--api-key", default=os.environ.get("ENGRAM_API_KEY"), help="Its API key (or ENGRAM_API_KEY).")
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="engram-mcp-bench-"))
    times = anyio.run(run, data_dir, args.n, args.api, args.api_key)
    print("through the API at " + args.api if args.api else "embedded at " + str(data_dir))
    print(f"first round trip (models loading): {times['first_round_trip'][0]:.2f} s")
    for name in ("add", "search", "round_trip"):
        xs = times[name]
        print(f"{name}: median {statistics.median(xs):.2f} s, max {max(xs):.2f} s over {len(xs)}")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
