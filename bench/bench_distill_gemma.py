"""Token-level distillation on this CPU: SmolLM2-135M swapped to the Gemma-3 tokenizer, trained from
Gemma-3-270M's distribution (CE + KL) against the same budget of plain cross-entropy.

Both arms start from the same swapped model, run the same `TokenDistillationTrainer` for the same
steps on the same batches (whole model trained, as in the paper's stage after adaptation); only
`alpha` differs: 1.0 = plain CE (the teacher is still run so that its KL is logged), 0.5 = CE + KL.

    python bench/bench_distill_gemma.py --steps 16 --out bench/results

Reported, before and after each arm, on held-out text never trained on: bits per byte
(`tokswap.evaluation.bits_per_byte`) and the per-token KL(teacher || student) in nats.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from portable import portable  # noqa: E402  (bench/portable.py)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def heldout_kl(student, teacher, tokenizer, texts, max_length: int) -> float:
    """Mean over held-out positions of KL(teacher || student), in nats, full logits (texts are short)."""
    import torch

    total, count = 0.0, 0
    student.eval()
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")["input_ids"]
            s_logits, t_logits = student(ids).logits[0, :-1], teacher(ids).logits[0, :-1]
            # both heads may be padded past the tokenizer: compare the real vocabulary only
            vocab = min(len(tokenizer), s_logits.shape[-1], t_logits.shape[-1])
            s = torch.log_softmax(s_logits[:, :vocab].float(), -1)
            t = torch.log_softmax(t_logits[:, :vocab].float(), -1)
            total += float((t.exp() * (t - s)).sum())
            count += ids.shape[1] - 1
    return total / max(count, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alignment", default=None,
                        help="saved SmolLM2 -> Gemma-3 TokenAlignment (else computed on the training corpus)")
    parser.add_argument("--glove-dim", type=int, default=100, help="GloVe size when the alignment is computed")
    parser.add_argument("--glove-iterations", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000)
    parser.add_argument("--heldout-texts", type=int, default=16)
    parser.add_argument("--alphas", default="1.0,0.5", help="comma-separated alphas; 1.0 = plain CE")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--seed", type=int, default=0,
                        help="training seed (batch order, trainer); seed N > 0 writes distill_gemma_seedN.json")
    args = parser.parse_args(argv)

    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    from tokswap.offline.assets import model_path

    from tokswap.loading import load_tokenizer
    from tokswap.offline.corpus import build_corpus
    from tokswap.distillation import TokenDistillationConfig, distill
    from tokswap.evaluation import bits_per_byte
    from tokswap.swapper import TokenizerSwapper

    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tokswap-bench-distill-"))
    corpus = build_corpus(total_bytes=args.corpus_bytes, seed=0)
    train = corpus["train"].select_columns(["text"]).shuffle(seed=args.seed)
    heldout = [t for t in corpus["test"]["text"] if len(t) > 200][: args.heldout_texts]

    tokenizer = load_tokenizer("gemma3")
    log("loading the teacher (Gemma-3-270M)")
    teacher = AutoModelForCausalLM.from_pretrained(model_path("gemma3-270m"), dtype=torch.float32).eval()

    def bpb(model):
        model.eval()
        value = bits_per_byte(model, tokenizer, heldout, batch_size=4, max_length=args.max_length, progress=False)
        return float(getattr(value, "bits_per_byte", value))

    alignment = args.alignment
    if alignment is None:
        from tokswap.align.pipeline import AlignmentConfig, align_tokenizers

        log(f"alignment smollm2 -> gemma3 (GloVe {args.glove_dim} dims, {args.glove_iterations} iterations)")
        config = AlignmentConfig(dim=args.glove_dim, iterations=args.glove_iterations)
        alignment = align_tokenizers("smollm2", tokenizer, corpus=list(train["text"]), config=config, progress=False)
    results = {"settings": portable(vars(args)), "teacher_heldout_bpb": bpb(teacher), "runs": {}}
    log(f"teacher held-out bpb {results['teacher_heldout_bpb']:.3f}")
    for alpha in [float(a) for a in args.alphas.split(",")]:
        label = "plain CE" if alpha == 1.0 else f"CE + KL (alpha {alpha})"
        log(f"swap SmolLM2-135M -> gemma3 ({label})")
        swapper = TokenizerSwapper.from_pretrained(
            str(model_path("smollm2-135m")), tokenizer, alignment=alignment, source_tokenizer="smollm2",
            dtype=torch.float32,
        )
        student = swapper.model
        run = {"alpha": alpha, "before": {"bpb": bpb(student), "kl": heldout_kl(student, teacher, tokenizer, heldout, args.max_length)}}
        log(f"before: {run['before']}")
        config = TokenDistillationConfig(
            output_dir=str(workdir / f"alpha{alpha}"), alpha=alpha, max_steps=args.steps,
            learning_rate=args.learning_rate, lr_scheduler_type="cosine", warmup_steps=0.03, weight_decay=0.01,
            per_device_train_batch_size=args.batch_size, max_length=args.max_length, packing=True,
            logging_steps=1, save_strategy="no", report_to=[], seed=args.seed, dataset_num_proc=None,
        )
        started = time.perf_counter()
        trainer = distill(student, tokenizer, teacher, train, config, teacher_tokenizer=tokenizer)
        run["train_seconds"] = round(time.perf_counter() - started, 1)
        student = trainer.model
        run["after"] = {"bpb": bpb(student), "kl": heldout_kl(student, teacher, tokenizer, heldout, args.max_length)}
        run["log"] = [
            {k: e[k] for k in ("step", "loss", "ce_loss", "forward_kl") if k in e}
            for e in trainer.state.log_history if "loss" in e
        ]
        log(f"after {args.steps} steps ({run['train_seconds']} s): {run['after']}")
        results["runs"][label] = run
        del swapper, student, trainer

    name = "distill_gemma.json" if args.seed == 0 else f"distill_gemma_seed{args.seed}.json"
    with open(out / name, "w") as handle:
        json.dump(results, handle, indent=2)
    print(f"teacher (Gemma-3-270M) held-out bits per byte: {results['teacher_heldout_bpb']:.3f}")
    print("| arm | bpb before | bpb after | KL before (nats/token) | KL after | train CE last 5 | train KL last 5 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, run in results["runs"].items():
        tail = run["log"][-5:]
        ce = sum(e.get("ce_loss", math.nan) for e in tail) / max(len(tail), 1)
        kl = sum(e.get("forward_kl", math.nan) for e in tail) / max(len(tail), 1)
        print(f"| {label} | {run['before']['bpb']:.3f} | {run['after']['bpb']:.3f} | {run['before']['kl']:.3f} | "
              f"{run['after']['kl']:.3f} | {ce:.3f} | {kl:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
