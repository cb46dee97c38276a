"""`tokswap demo` (the README's main command) as a benchmark: its printed numbers, wall time and peak memory.

Runs `tokswap demo --output <temporary folder> --no-progress` in a child process, then writes the demo's
`results.json` (machine paths replaced, see bench/portable.py) with the wall time and the child's peak RSS to
bench/results/demo_run.json, and its before / after-swap / after-training table to bench/results/demo_run.md.

    python bench/bench_demo.py                 # the demo's defaults (about 15 minutes on 2 cores, warm caches)
    python bench/bench_demo.py --quick         # `tokswap demo --quick`: every step, tiny budgets
"""

import argparse
import json
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable import portable

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick to the demo")
    parser.add_argument("--seed", type=int, default=None, help="pass --seed to the demo (its swap and training seed)")
    parser.add_argument("--output", default=str(REPO / "bench/results/demo_run.json"))
    args = parser.parse_args(argv)

    from tokswap.cli.demo import _summary_table

    with tempfile.TemporaryDirectory(prefix="tokswap-bench-demo-") as tmp:
        demo_argv = ["tokswap", "demo", "--output", str(Path(tmp) / "demo"), "--no-progress"] + (
            ["--quick"] if args.quick else []) + (["--seed", str(args.seed)] if args.seed is not None else [])
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tokswap.cli", *demo_argv[1:]], check=True)
        wall = time.perf_counter() - started
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # Linux: KiB
        # the run's temporary folder is no one's path: name it, don't record it
        text = (Path(tmp) / "demo" / "results.json").read_text(encoding="utf-8")
        results = json.loads(text.replace(json.dumps(str(Path(tmp)))[1:-1], "<temporary folder>"))
    results = portable({k: v for k, v in results.items() if k not in ("output", "plot", "heldout_file", "verify_command")})
    command = shlex.join(["python", "bench/bench_demo.py", *argv])
    record = {"command": command, "demo_command": shlex.join(demo_argv[:2] + demo_argv[5:]),
              "wall_seconds": round(wall, 1), "peak_rss_gib": round(peak_gib, 2), **results}
    output = Path(args.output)
    output.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tasks = list((results["evaluations"].get("before") or {}).get("tasks") or {})
    seconds = ", ".join(f"{k} {v:.0f} s" for k, v in results["seconds"].items() if k != "total")
    alignment = results.get("alignment", {})
    md = [
        "# `tokswap demo`, run by bench/bench_demo.py", "",
        f"`{record['demo_command']}` in a child process, warm asset caches: wall {wall / 60:.1f} min, peak RSS "
        f"{peak_gib:.2f} GiB. Steps: {seconds}.", "",
        f"Alignment: {json.dumps(alignment.get('row_source_counts'))}; metrics "
        f"{json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in (alignment.get('metrics') or {}).items() if k in ('bleu1', 'semantic_similarity', 'self_check_precision_at_1', 'max_in_degree')})}.",
        "", _summary_table(results["evaluations"], tasks), "",
        "Zero-shot rows use the demo's small question counts (see `settings.limit` in the JSON): noise.", "",
        "Command:", "", f"    {command}", "",
    ]
    output.with_suffix(".md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
