"""Side-by-side speed, memory and quality of tokswap's co-occurrence counting + GloVe vs the Stanford C tool.

Both sides run on the SAME token-id corpus (a real corpus tokenized with a real tokenizer, written
for the C tool as whitespace-separated integer ids, one document per line), with the same window,
min count, dimension, iterations and threads. Every step runs in its own subprocess under
`/usr/bin/time` so that peak memories are separate.

tokswap counts with `skip_rare_in_window=True`, which reproduces the C tool's `cooccur` exactly;
the script checks that both sides produce the same pairs, so the GloVe comparison is on identical
co-occurrences.

The Stanford tool is cloned from `--glove-repo` (default `$GLOVE_REPO`, else GitHub) into a temporary folder
outside the repository and built with `make`; it is never committed.

Usage:
    python bench/bench_glove.py --tokens 5000000 --iterations 3
    python bench/bench_glove.py --quick
    python bench/bench_glove.py --summarize RUN1.md RUN2.md ... --results SUMMARY.md   # mean ± std over runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# Where the Stanford GloVe C tool is cloned from: $GLOVE_REPO (e.g. a local mirror on an offline machine), else
# GitHub itself.
DEFAULT_GLOVE_REPO = os.environ.get("GLOVE_REPO") or "https://github.com/stanfordnlp/GloVe"


# --------------------------------------------------------------------------- corpus
def tokenizer_file(name: str) -> Path:
    """A tokenizer.json: a file path, or a tokswap tokenizer asset name (fetched and cached by tokswap.offline.assets)."""
    if os.path.isfile(name):
        return Path(name)
    from tokswap.offline.assets import tokenizer_path

    return tokenizer_path(name) / "tokenizer.json"


def corpus_texts():
    """Python standard library sources (always present): real, varied text, tens of MB."""
    import glob
    import sysconfig

    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True)):
        try:
            with open(path, encoding="utf-8") as handle:
                yield handle.read()
        except (UnicodeDecodeError, OSError):
            continue


def tokenized_corpus(tokenizer: str, num_tokens: int, cache: Path):
    """Token-id documents totalling about `num_tokens` tokens (cached)."""
    from tokenizers import Tokenizer

    cache_file = cache / f"corpus_{Path(tokenizer).stem}_{num_tokens}.npz"
    if cache_file.exists():
        data = np.load(cache_file)
        return np.split(data["ids"], np.cumsum(data["lengths"])[:-1]), int(data["vocab_size"])
    tok = Tokenizer.from_file(str(tokenizer_file(tokenizer)))
    documents, total, batch = [], 0, []
    texts = corpus_texts()
    while total < num_tokens:
        batch = [text for _, text in zip(range(64), texts)]
        if not batch:
            break
        for encoding in tok.encode_batch(batch, add_special_tokens=False):
            ids = np.asarray(encoding.ids, dtype=np.int32)
            if ids.size:
                documents.append(ids[: num_tokens - total])
                total += documents[-1].size
            if total >= num_tokens:
                break
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    np.savez(cache_file, ids=np.concatenate(documents), lengths=[d.size for d in documents], vocab_size=vocab_size)
    return documents, vocab_size


# --------------------------------------------------------------------------- processes
def timed(command, *, env=None, stdin=None, stdout=None, on_line=None, cwd=None):
    """Run `command` under /usr/bin/time; returns (seconds, peak RSS in MB, stderr lines)."""
    full = ["/usr/bin/time", "-f", "__TIME__ %e %M", *command]
    started = time.monotonic()
    process = subprocess.Popen(full, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    lines = []
    for line in process.stderr:
        lines.append(line.rstrip("\n"))
        if on_line:
            on_line(line, time.monotonic() - started)
    if process.wait() != 0:
        raise RuntimeError(f"{command[0]} failed:\n" + "\n".join(lines[-20:]))
    marker = [line for line in lines if line.startswith("__TIME__")][-1].split()
    return float(marker[1]), int(marker[2]) / 1024.0, lines


def build_stanford_glove(repo: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="stanford_glove_"))
    subprocess.run(["git", "clone", "-q", repo, str(folder / "GloVe")], check=True)
    subprocess.run(["make"], cwd=folder / "GloVe", check=True, capture_output=True)
    return folder / "GloVe" / "build"


OURS_COUNT = r"""
import json, sys, time, numpy as np
from tokswap.align.cooccurrence import count_cooccurrences
corpus, out, window, min_count, skip = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
data = np.load(corpus)
docs = np.split(data["ids"], np.cumsum(data["lengths"])[:-1])
start = time.perf_counter()
cooc = count_cooccurrences(docs, int(data["vocab_size"]), window=window, min_count=min_count,
                           skip_rare_in_window=skip, progress=False)
seconds = time.perf_counter() - start
cooc.save(out)
print(json.dumps({"seconds": seconds, "nnz": cooc.nnz, "kept": int(cooc.kept_tokens.sum())}))
"""

OURS_TRAIN = r"""
import json, sys, time, numpy as np, torch
from tokswap.align.cooccurrence import CooccurrenceMatrix
from tokswap.align import glove
cooc_path, out, dim, iterations, threads, batch, seed = sys.argv[1:8]
cooc = CooccurrenceMatrix.load(cooc_path)
import resource
loaded_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # interpreter + torch + the counts
config = glove.GloveConfig(dim=int(dim), iterations=int(iterations), num_threads=int(threads),
                           batch_size=int(batch), seed=int(seed), device="cpu")
# Time each iteration by wrapping the tqdm bar's postfix update, which happens once per iteration.
marks = []
import tqdm.auto
original = tqdm.auto.tqdm.set_postfix
def mark(self, *a, **k):
    marks.append(time.perf_counter()); return original(self, *a, **k)
tqdm.auto.tqdm.set_postfix = mark
start = time.perf_counter()
vectors = glove.train_glove(cooc, config, progress=True)
total = time.perf_counter() - start
vectors.save(out)
print(json.dumps({"total": total, "marks": [m - start for m in marks], "costs": vectors.costs, "loaded_mb": loaded_mb}))
"""


def run_ours_count(corpus_npz, out, args, skip_rare):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    seconds, peak, _ = timed(
        [sys.executable, "-c", OURS_COUNT, str(corpus_npz), str(out), str(args.window), str(args.min_count),
         "1" if skip_rare else "0"],
        env=env, stdout=subprocess.PIPE,
    )
    return seconds, peak


def run_ours_train(cooc_path, out, args, threads, iterations, seed=0):
    result_file = Path(str(out) + ".json")
    with open(result_file, "w") as handle:
        seconds, peak, _ = timed(
            [sys.executable, "-c", OURS_TRAIN, str(cooc_path), str(out), str(args.dim), str(iterations),
             str(threads), str(args.batch_size), str(seed)],
            stdout=handle,
        )
    info = json.loads(result_file.read_text().strip().splitlines()[-1])
    marks = [0.0] + info["marks"]
    info["iteration_seconds"] = [b - a for a, b in zip(marks, marks[1:])]
    info["process_seconds"], info["peak_mb"] = seconds, peak
    return info


def run_c_tool(build: Path, corpus_txt: Path, work: Path, args, iterations):
    out = {}
    vocab = work / "vocab.txt"
    with open(corpus_txt) as src, open(vocab, "w") as dst:
        s, m, _ = timed([str(build / "vocab_count"), "-min-count", str(args.min_count), "-verbose", "0"],
                        stdin=src, stdout=dst)
    out["vocab_count"] = (s, m)
    with open(corpus_txt) as src, open(work / "cooc.bin", "w") as dst:
        s, m, _ = timed([str(build / "cooccur"), "-memory", str(args.c_memory), "-vocab-file", str(vocab),
                         "-verbose", "0", "-window-size", str(args.window), "-overflow-file", str(work / "overflow")],
                        stdin=src, stdout=dst, cwd=work)
    out["cooccur"] = (s, m)
    with open(work / "cooc.bin") as src, open(work / "cooc.shuf.bin", "w") as dst:
        s, m, _ = timed([str(build / "shuffle"), "-memory", str(args.c_memory), "-verbose", "0",
                         "-temp-file", str(work / "shuftmp"), "-seed", str(getattr(args, "c_seed", 1))],
                        stdin=src, stdout=dst, cwd=work)
    out["shuffle"] = (s, m)
    iteration_marks, costs = [], []

    def on_line(line, elapsed):
        found = re.search(r"iter: (\d+), cost: ([0-9.eE+-]+)", line)
        if found:
            iteration_marks.append(elapsed)
            costs.append(float(found.group(2)))

    s, m, _ = timed([str(build / "glove"), "-input-file", str(work / "cooc.shuf.bin"), "-vocab-file", str(vocab),
                     "-save-file", str(work / "vectors"), "-threads", str(args.threads), "-iter", str(iterations),
                     "-vector-size", str(args.dim), "-x-max", "10", "-alpha", "0.75", "-eta", "0.05",
                     "-binary", "0", "-model", "2", "-write-header", "0", "-verbose", "2", "-seed", str(getattr(args, "c_seed", 1))],
                    on_line=on_line, cwd=work)
    marks = [0.0] + iteration_marks
    out["glove"] = (s, m)
    out["iteration_seconds"] = [b - a for a, b in zip(marks, marks[1:])]
    out["costs"] = costs
    return out


def read_c_cooccurrences(path: Path, vocab_file: Path, vocab_size: int):
    """The C tool's binary co-occurrences as a CSR over token ids (its words are the ids)."""
    import scipy.sparse as sp

    words = [int(line.split()[0]) for line in open(vocab_file)]
    rank_to_id = np.asarray(words, dtype=np.int64)
    records = np.fromfile(path, dtype=[("w1", "<i4"), ("w2", "<i4"), ("value", "<f8")])
    matrix = sp.coo_matrix(
        (records["value"], (rank_to_id[records["w1"] - 1], rank_to_id[records["w2"] - 1])), shape=(vocab_size, vocab_size)
    ).tocsr()
    matrix.sum_duplicates()
    return matrix


# --------------------------------------------------------------------------- quality
def neighbour_overlap(a: np.ndarray, b: np.ndarray, queries: np.ndarray, candidates: np.ndarray, k: int = 10):
    """Mean |top-k(a) ∩ top-k(b)| / k of cosine neighbours of `queries` among `candidates`."""

    def top(vectors):
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        sims = unit[queries] @ unit[candidates].T
        sims[queries[:, None] == candidates[None, :]] = -np.inf
        return candidates[np.argsort(-sims, axis=1)[:, :k]]

    ta, tb = top(a), top(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(ta, tb)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=5_000_000, help="corpus size in tokens")
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--window", type=int, default=15)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3, help="GloVe iterations run on each side")
    parser.add_argument("--batch-size", type=int, default=1 << 16)
    parser.add_argument("--tokenizer", default="qwen3", help="tokswap asset name or a tokenizer.json")
    parser.add_argument("--c-memory", type=float, default=4.0, help="the C tool's -memory (GB)")
    parser.add_argument("--glove-repo", default=DEFAULT_GLOVE_REPO, help="git URL/path of stanfordnlp/GloVe")
    parser.add_argument("--c-output", default=None,
                        help="where to keep the C tool's vectors (default: <TOKSWAP_CACHE>/bench/glove_c)")
    parser.add_argument("--results", default=str(REPO_ROOT / "bench" / "results" / "glove.md"))
    parser.add_argument("--quick", action="store_true", help="1M tokens, 64 dims, 2 iterations")
    parser.add_argument("--summarize", nargs="+", default=None, metavar="RUN.md",
                        help="average runs' reports (grouped by command) into --results instead of running")
    args = parser.parse_args()
    if args.summarize:
        from report_average import average_report_groups

        text = average_report_groups(args.summarize, "python bench/bench_glove.py " + " ".join(sys.argv[1:]))
        Path(args.results).write_text(text)
        print(text)
        return
    if args.quick:
        args.tokens, args.dim, args.iterations = 1_000_000, 64, 2
    wall = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench_glove_"))
    build = None
    try:
        cache = Path(os.environ.get("TOKSWAP_CACHE", Path.home() / ".cache" / "tokswap")) / "bench"
        cache.mkdir(parents=True, exist_ok=True)
        print(f"[bench] tokenizing corpus ({args.tokens} tokens)...", flush=True)
        documents, vocab_size = tokenized_corpus(args.tokenizer, args.tokens, cache)
        num_tokens = sum(d.size for d in documents)
        corpus_npz = work / "corpus.npz"
        np.savez(corpus_npz, ids=np.concatenate(documents), lengths=[d.size for d in documents], vocab_size=vocab_size)
        corpus_txt = work / "corpus.txt"
        with open(corpus_txt, "w") as handle:
            for doc in documents:
                handle.write(" ".join(map(str, doc.tolist())) + "\n")
        print(f"[bench] {num_tokens} tokens, {len(documents)} documents, vocab {vocab_size}", flush=True)

        build = build_stanford_glove(args.glove_repo)
        print("[bench] C tool: counting...", flush=True)
        c = run_c_tool(build, corpus_txt, work, args, args.iterations)
        print(f"[bench] C tool: {c}", flush=True)

        print("[bench] tokswap: counting...", flush=True)
        ours_exact = run_ours_count(corpus_npz, work / "cooc_exact.npz", args, skip_rare=True)
        ours_onepass = run_ours_count(corpus_npz, work / "cooc_onepass.npz", args, skip_rare=False)
        from tokswap.align.cooccurrence import CooccurrenceMatrix

        ours_cooc = CooccurrenceMatrix.load(work / "cooc_exact.npz")
        c_matrix = read_c_cooccurrences(work / "cooc.bin", work / "vocab.txt", vocab_size)
        difference = abs(ours_cooc.matrix.astype(np.float64) - c_matrix)
        same_pattern = (ours_cooc.matrix != 0).astype(int) - (c_matrix != 0).astype(int)
        counts_match = {
            "ours_nnz": ours_cooc.nnz, "c_nnz": int(c_matrix.nnz),
            "pattern_differences": int(abs(same_pattern).sum()),
            "max_abs_difference": float(difference.max()) if difference.nnz else 0.0,
        }
        print(f"[bench] counts: {counts_match}", flush=True)

        print("[bench] tokswap: training...", flush=True)
        ours = run_ours_train(work / "cooc_exact.npz", work / "ours.npz", args, args.threads, args.iterations)
        ours_1t = run_ours_train(work / "cooc_exact.npz", work / "ours_1t.npz", args, 1, 1)
        print(f"[bench] ours: {ours}\n[bench] ours 1 thread: {ours_1t}", flush=True)

        from tokswap.align.glove import GloveVectors, load_stanford_vectors

        ours_vectors = GloveVectors.load(work / "ours.npz")
        c_vectors = load_stanford_vectors(work / "vectors.txt", vocab_size, dim=args.dim)
        both = np.flatnonzero(ours_vectors.trained & c_vectors.trained)
        frequent = both[np.argsort(-ours_cooc.token_counts[both])]
        queries = frequent[:300]
        overlap = neighbour_overlap(ours_vectors.vectors, c_vectors.vectors, queries, frequent[:5000])

        # Keep the C tool's outputs for the alignment helper.
        out_dir = Path(args.c_output) if args.c_output else cache / "glove_c"
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("vectors.txt", "vocab.txt"):
            shutil.copy(work / name, out_dir / name)
        shutil.copy(work / "cooc_exact.npz", out_dir / "cooccurrence.npz")
        shutil.copy(work / "ours.npz", out_dir / "tokswap_glove.npz")
        shutil.copy(corpus_npz, out_dir / "corpus_ids.npz")
        for path in out_dir.iterdir():
            path.chmod(0o644)  # temp-file-then-rename outputs are created 0600
        (out_dir / "README.md").write_text(
            f"Stanford GloVe C tool vs tokswap on the same corpus ({num_tokens} tokens of Python stdlib, "
            f"tokenizer {args.tokenizer}, vocab {vocab_size}), window {args.window}, min count {args.min_count}, "
            f"dim {args.dim}, {args.iterations} iterations, {args.threads} threads.\n"
            "- vectors.txt: C tool output (-model 2: word+context), words are token ids; read with "
            "tokswap.align.glove.load_stanford_vectors(path, vocab_size).\n"
            "- tokswap_glove.npz: tokswap vectors (GloveVectors.load); cooccurrence.npz: the shared counts "
            "(CooccurrenceMatrix.load); corpus_ids.npz: ids/lengths/vocab_size.\n"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if build is not None:
            shutil.rmtree(build.parents[1], ignore_errors=True)  # the temporary clone of the C tool

    elapsed = time.monotonic() - wall
    c_count = c["vocab_count"][0] + c["cooccur"][0]
    c_count_mem = max(c["vocab_count"][1], c["cooccur"][1])
    c_iter = c["iteration_seconds"][0]
    our_iter = ours["iteration_seconds"][0]
    pairs = ours_cooc.nnz
    rows = [
        ("co-occurrence counting (C: vocab_count+cooccur; ours: exact two-pass)", f"{c_count:.1f} s", f"{ours_exact[0]:.1f} s",
         f"{ours_exact[0] / c_count:.2f}"),
        ("  tokens/s", f"{num_tokens / c_count / 1e6:.2f} M", f"{num_tokens / ours_exact[0] / 1e6:.2f} M", ""),
        ("  peak memory", f"{c_count_mem:.0f} MB", f"{ours_exact[1]:.0f} MB", f"{ours_exact[1] / c_count_mem:.2f}"),
        ("counting, ours one-pass (post-hoc min count)", "", f"{ours_onepass[0]:.1f} s / {ours_onepass[1]:.0f} MB", ""),
        ("C shuffle step (needed before glove)", f"{c['shuffle'][0]:.1f} s / {c['shuffle'][1]:.0f} MB", "-", ""),
        (f"GloVe iteration 1 ({args.threads} threads)", f"{c_iter:.1f} s", f"{our_iter:.1f} s", f"{our_iter / c_iter:.2f}"),
        ("  pairs/s", f"{pairs / c_iter / 1e3:.0f} k", f"{pairs / our_iter / 1e3:.0f} k", ""),
        ("  mean iteration (all)", f"{np.mean(c['iteration_seconds']):.1f} s",
         f"{np.mean(ours['iteration_seconds']):.1f} s", f"{np.mean(ours['iteration_seconds']) / np.mean(c['iteration_seconds']):.2f}"),
        ("  GloVe process peak memory", f"{c['glove'][1]:.0f} MB", f"{ours['peak_mb']:.0f} MB", f"{ours['peak_mb'] / c['glove'][1]:.2f}"),
        ("  of which interpreter + torch + loaded counts", "", f"{ours['loaded_mb']:.0f} MB", ""),
        ("  training memory above that", f"{c['glove'][1]:.0f} MB", f"{ours['peak_mb'] - ours['loaded_mb']:.0f} MB",
         f"{(ours['peak_mb'] - ours['loaded_mb']) / c['glove'][1]:.2f}"),
        ("GloVe iteration, ours 1 thread", "", f"{ours_1t['iteration_seconds'][0]:.1f} s", f"{ours_1t['iteration_seconds'][0] / c_iter:.2f}"),
        ("cost per iteration", " ".join(f"{x:.4f}" for x in c["costs"]), " ".join(f"{x:.4f}" for x in ours["costs"]), ""),
    ]
    command = "python bench/bench_glove.py " + " ".join(sys.argv[1:])
    load = os.getloadavg()
    lines = [
        "# GloVe: tokswap vs Stanford GloVe C tool",
        "",
        f"Command: `{command}` (took {elapsed / 60:.1f} min; load average at the end {load[0]:.1f} on "
        f"{os.cpu_count()} cores; absolute times depend on the load, the ratios are measured side by side).",
        "",
        f"Corpus: {num_tokens:,} tokens ({len(documents)} documents of Python stdlib source) tokenized with "
        f"{args.tokenizer} (vocab {vocab_size:,}); window {args.window}, min count {args.min_count}, "
        f"dim {args.dim}, {args.iterations} iterations, {args.threads} threads, batch {args.batch_size}; "
        f"{pairs:,} non-zero pairs, {int(ours_cooc.kept_tokens.sum()):,} tokens kept.",
        "",
        "| measure | Stanford C | tokswap | ours / C |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c_} | {d} |" for a, b, c_, d in rows],
        "",
        f"Counts identical to the C tool's: {counts_match}.",
        f"Nearest-neighbour agreement (top-10 cosine neighbours of the 300 most frequent tokens among the "
        f"5000 most frequent, ours vs C after {args.iterations} iterations): {overlap:.2f}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(text)


if __name__ == "__main__":
    main()
