"""Real multi-process runs on this CPU: `torchrun --nproc_per_node 2 -m tokswap.cli train|distill`.

Without `use_cpu=True` transformers never joins CPU processes into a process group: each would train alone on all
the data, with a single process's losses, and all would write the same folder. These runs check that the two
processes share each step (twice the tokens per optimizer step) and that the outputs are written once, complete.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_llama
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from tokswap.training import launched_on_cpus

pytestmark = pytest.mark.slow

TEXTS = [f"Document {i}: the quick brown fox number {i} jumps over {i * 7} lazy dogs, then rests." for i in range(64)]
BATCH, LENGTH = 2, 32


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    tiny_llama(320).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    (root / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return root


def run(args, nproc: int, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if nproc == 1:
        command = [sys.executable, "-m", "tokswap.cli", *args]
    else:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        command = [torchrun, "--standalone", f"--nproc_per_node={nproc}", "-m", "tokswap.cli", *args]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def logged_tokens(state_file: Path) -> list:
    return [entry["num_tokens"] for entry in json.loads(state_file.read_text())["log_history"] if "num_tokens" in entry]


def test_launched_on_cpus_reads_the_launcher(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not launched_on_cpus()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_on_cpus()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not launched_on_cpus()


def test_two_process_train_shares_each_step(tiny_run):
    common = [
        "--dataset",
        "data.jsonl",
        "--stage1-steps",
        "3",
        "--stage2-steps",
        "1",
        "--max-length",
        str(LENGTH),
        "--batch-size",
        str(BATCH),
        "--logging-steps",
        "1",
    ]
    single = run(["train", "model", "--output", "one", *common], 1, tiny_run)
    double = run(["train", "model", "--output", "two", *common], 2, tiny_run)
    one, two = (
        logged_tokens(tiny_run / "one/stage1/trainer_state.json"),
        logged_tokens(tiny_run / "two/stage1/trainer_state.json"),
    )
    # num_tokens is summed over processes: two processes see twice the tokens per optimizer step
    # (a packed batch may end with a shorter sequence, hence the tolerance after the first step)
    assert len(one) == len(two) == 3
    assert one[0] == BATCH * LENGTH
    assert all(1.9 * a <= b <= 2.1 * a for a, b in zip(one, two)), (one, two)
    # rank 0 alone writes and reports
    assert double.stdout.count("saved the adapted model to two") == 1 and "to None" not in double.stdout
    assert single.stdout.count("saved the adapted model to one") == 1
    reloaded = LlamaForCausalLM.from_pretrained(tiny_run / "two")
    assert all(torch.isfinite(p).all() for p in reloaded.parameters())
    assert (tiny_run / "two/tokenizer.json").is_file()


def logged_losses(state_file: Path) -> list:
    return [entry["loss"] for entry in json.loads(state_file.read_text())["log_history"] if "loss" in entry]


def test_two_processes_match_one_with_the_same_global_batch_and_resume(tiny_run):
    common = [
        "--dataset",
        "data.jsonl",
        "--stage2-steps",
        "0",
        "--max-length",
        str(LENGTH),
        "--logging-steps",
        "1",
        "--save-steps",
        "2",
    ]
    run(
        ["train", "model", "--output", "one-4", "--stage1-steps", "2", "--batch-size", str(2 * BATCH), *common],
        1,
        tiny_run,
    )
    run(
        ["train", "model", "--output", "two-2", "--stage1-steps", "2", "--batch-size", str(BATCH), *common], 2, tiny_run
    )
    one = logged_losses(tiny_run / "one-4/stage1/trainer_state.json")
    two = logged_losses(tiny_run / "two-2/stage1/trainer_state.json")
    # the same global batch size (other documents: the sampler shards differently), so nearly the same loss
    assert len(one) == len(two) == 2
    assert all(abs(a - b) < 0.05 for a, b in zip(one, two)), (one, two)
    # a two-process run resumes from its own checkpoint and goes on to the new step count
    run(
        ["train", "model", "--output", "two-2", "--stage1-steps", "4", "--batch-size", str(BATCH), "--resume", *common],
        2,
        tiny_run,
    )
    state = json.loads((tiny_run / "two-2/stage1/trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [e["step"] for e in state["log_history"] if "loss" in e][-2:] == [3, 4]


def test_two_process_distill_shares_each_step(tiny_run):
    def distill(output, nproc):
        return run(
            [
                "distill",
                "model",
                "--teacher",
                "model",
                "--dataset",
                "data.jsonl",
                "--output",
                output,
                "--max-steps",
                "2",
                "--max-length",
                str(LENGTH),
                "--batch-size",
                str(BATCH),
                "--logging-steps",
                "1",
            ],
            nproc,
            tiny_run,
        )

    distill("distilled-one", 1)
    double = distill("distilled-two", 2)

    def epochs(output):
        state = json.loads((tiny_run / output / "checkpoint-2/trainer_state.json").read_text())
        return [entry["epoch"] for entry in state["log_history"] if "loss" in entry]

    # each optimizer step covers twice the data when two processes share it
    assert epochs("distilled-two") == pytest.approx([2 * e for e in epochs("distilled-one")])
    assert double.stdout.count("saved the distilled student to distilled-two") == 1
    assert (tiny_run / "distilled-two/model.safetensors").is_file()
