#!/usr/bin/env python3
"""A whole campaign against the replay model: wall time and peak memory.

Runs `pdl-swe run --agent builtin` on the bundled suite (18 tasks) with K samples
per task against `pdl-swe model serve`. Each scripted episode runs the public tests
in the sandbox, then finishes; the final workspace is graded. In-campaign
calibration (gold, do-nothing, every rung) is part of the measured time.

    python3 bench/campaign_replay.py [--binary target/release/pdl-swe] [--samples 20] [-j 2]

Reports wall time, episodes per second and the peak resident memory of the
harness process (from getrusage of the waited child; the replay model runs as a
separate process and is measured separately).
"""

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SCRIPT = {
    "conversations": [
        {
            "replies": [
                {"tool_calls": [{"name": "run_shell", "arguments": {"command": "python -m pytest -q -p no:cacheprovider tests/public | tail -3"}}]},
                {"tool_calls": [{"name": "finish", "arguments": {"summary": "benchmark episode"}}]},
            ]
        }
    ]
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="target/release/pdl-swe")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    scratch = tempfile.mkdtemp(prefix="pdl-campaign-bench-")
    try:
        script = os.path.join(scratch, "script.json")
        with open(script, "w") as f:
            json.dump(SCRIPT, f)
        port = free_port()
        model = subprocess.Popen([binary, "model", "serve", "--script", script, "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        run_dir = os.path.join(scratch, "run")
        started = time.perf_counter()
        harness = subprocess.Popen([binary, "run", "--agent", "builtin", "--model", "replay", "--api", "openai",
                                    "--base-url", f"http://127.0.0.1:{port}/v1", "--samples", str(args.samples),
                                    "-j", str(args.jobs), "--out", run_dir, "--format", "json"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(harness.pid, 0)
        wall = time.perf_counter() - started
        model.terminate()
        model.wait()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"the campaign failed with {os.waitstatus_to_exitcode(status)}")
        records = [json.loads(line) for line in open(os.path.join(run_dir, "results.jsonl"))]
        episodes = [r for r in records if r["kind"] == "episode"]
        result = {
            "tasks": len({r["instance_id"] for r in episodes}),
            "samples": args.samples,
            "episodes": len(episodes),
            "calibration_gradings": len(records) - len(episodes),
            "jobs": args.jobs,
            "wall_s": wall,
            "episodes_per_s": len(episodes) / wall,
            "harness_peak_rss_mib": usage.ru_maxrss / 1024,
            "harness_errors": sum(r["verdict"] == "harness_error" for r in records),
            "mean_reward": sum(r["reward"] for r in episodes) / max(1, len(episodes)),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
