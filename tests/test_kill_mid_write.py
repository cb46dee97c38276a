"""Killed mid-write: a child process is stopped (`os._exit`) right after it wrote its first file.

Each test runs the real write path (alignment save, swapped-model save, training checkpoints, distillation) in a
child Python on tiny inputs, kills it in the middle, then checks that what is left is never taken for a finished
output, and that running again succeeds.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tokswap.alignment import AlignmentError, TokenAlignment
from tokswap.utils import check_output_dir

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

KILLED = 86  # the child's exit status when the hook fired

# Shared by every child: tiny tokenizer and model builders, and `kill_after(module, name)`, which makes
# `module.name` exit the process right after its first call returns (the file it wrote is on disk).
PRELUDE = textwrap.dedent(f"""
    import json, os, sys
    import numpy as np

    KILLED = {KILLED}
    TEXTS = [f"Document {{i}}: the quick brown fox number {{i}} jumps over {{i * 7}} lazy dogs by the river."
             for i in range(24)]

    def kill_after(owner, name, when=lambda *a, **k: True):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            if when(*args, **kwargs):
                sys.stdout.flush()
                os._exit(KILLED)
            return result

        setattr(owner, name, wrapper)

    def tiny_tokenizer():
        from tokenizers import ByteLevelBPETokenizer
        from transformers import PreTrainedTokenizerFast

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>"],
                                show_progress=False)
        return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")

    def tiny_model(seed=0):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1))

    def tiny_alignment(value):
        from tokswap.alignment import TokenAlignment

        fingerprint = {{"name_or_path": "tiny", "vocab_size": 300, "vocab_hash": "a" * 64}}
        return TokenAlignment(target_to_source=np.full(300, value), config={{
            "source_tokenizer": fingerprint, "target_tokenizer": fingerprint}})
""")


def run_child(body: str, expect_killed: bool, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TOKSWAP_NO_PREBUILT_ALIGNMENTS="1",
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    code = PRELUDE + "\nOUT = " + repr(str(tmp_path)) + "\n" + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    if expect_killed:
        assert proc.returncode == KILLED, f"the child was not killed mid-write:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    else:
        assert proc.returncode == 0, f"the re-run failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------------------------------- alignment save
ALIGN_SAVE = """
    import safetensors.numpy
    from tokswap.utils import io
    {hook}
    tiny_alignment({value}).save_pretrained(os.path.join(OUT, "al"), overwrite=True)
"""


def test_alignment_save_killed_after_the_weights_keeps_the_old_alignment(tmp_path):
    run_child(ALIGN_SAVE.format(hook="", value=3), expect_killed=False, tmp_path=tmp_path)
    old_config = (tmp_path / "al" / "alignment_config.json").read_text()
    # killed after the new alignment.safetensors was written, before its config
    run_child(ALIGN_SAVE.format(hook='kill_after(safetensors.numpy, "save_file")', value=5), True, tmp_path)
    assert (tmp_path / "al" / "alignment_config.json").read_text() == old_config
    loaded = TokenAlignment.from_pretrained(tmp_path / "al")  # the old one, whole and verified
    assert set(loaded.target_to_source.tolist()) == {3}
    partial = [tmp_path / name for name in leftovers(tmp_path)]
    assert partial and all((p / "alignment.safetensors").is_file() for p in partial)
    for folder in partial:  # the half-written one is not an alignment
        with pytest.raises(AlignmentError, match="not an alignment folder"):
            TokenAlignment.from_pretrained(folder)
    run_child(ALIGN_SAVE.format(hook="", value=5), expect_killed=False, tmp_path=tmp_path)
    assert set(TokenAlignment.from_pretrained(tmp_path / "al").target_to_source.tolist()) == {5}


def test_alignment_save_killed_between_the_renames_leaves_nothing_half_new(tmp_path):
    run_child(ALIGN_SAVE.format(hook="", value=3), expect_killed=False, tmp_path=tmp_path)
    # killed after the old folder was moved aside, before the new one was renamed into place
    run_child(ALIGN_SAVE.format(hook='kill_after(io.os, "replace")', value=5), True, tmp_path)
    final = tmp_path / "al"
    assert not final.exists()  # no output at all rather than a mix of old and new files
    check_output_dir(final)
    aside = {name.split("-")[0]: tmp_path / name for name in leftovers(tmp_path)}
    assert sorted(aside) == [".al.old", ".al.tmp"]
    # both hidden copies are whole alignments that verify: the old one and the new one, never a mix
    assert set(TokenAlignment.from_pretrained(aside[".al.old"]).target_to_source.tolist()) == {3}
    assert set(TokenAlignment.from_pretrained(aside[".al.tmp"]).target_to_source.tolist()) == {5}
    run_child(ALIGN_SAVE.format(hook="", value=5), expect_killed=False, tmp_path=tmp_path)
    assert set(TokenAlignment.from_pretrained(final).target_to_source.tolist()) == {5}


# ---------------------------------------------------------------------------------------- swapped-model save
SWAP_SAVE = """
    import safetensors.torch
    from tokswap.swapper import TokenizerSwapper
    {hook}
    swapper = TokenizerSwapper(tiny_model(), tiny_tokenizer(), tiny_alignment(2), "tiny-source",
                               swap_record={{"source_model": "tiny-source", "training": []}})
    swapper.save_pretrained(os.path.join(OUT, "swapped"))
    print("saved")
"""


@pytest.mark.slow
def test_swap_save_killed_after_the_weights_leaves_no_model(tmp_path):
    from tokswap.swapper import SwapperError, TokenizerSwapper

    run_child(SWAP_SAVE.format(hook='kill_after(safetensors.torch, "save_file")'), True, tmp_path)
    out = tmp_path / "swapped"
    assert not out.exists(), "a half-written swapped model sits at the output path"
    check_output_dir(out)  # the re-run is not refused as "already holds an output"
    partial = [tmp_path / name for name in leftovers(tmp_path)]
    assert partial and all((p / "model.safetensors").is_file() for p in partial)
    for folder in partial:
        with pytest.raises(SwapperError, match="tokswap_config.json"):
            TokenizerSwapper.load(folder)
    assert "saved" in run_child(SWAP_SAVE.format(hook=""), expect_killed=False, tmp_path=tmp_path).stdout
    reloaded = TokenizerSwapper.load(out)
    assert reloaded.alignment.num_target_rows == 300


# ---------------------------------------------------------------------------------------- training checkpoints
TRAIN = """
    import transformers
    from datasets import Dataset
    from tokswap.training import VocabAdaptationConfig, adapt_vocabulary
    {hook}
    config = VocabAdaptationConfig(
        output_dir=os.path.join(OUT, "run"), stage1_max_steps=3, stage2_max_steps=0, stage1_learning_rate=1e-2,
        max_length=32, per_device_train_batch_size=2, logging_steps=1, save_steps=1, save_final_model=False,
        warmup_ratio=0.0, resume_from_checkpoint={resume})
    result = adapt_vocabulary(tiny_model(), tiny_tokenizer(), Dataset.from_dict({{"text": TEXTS}}), config)
    print("global_step", result.global_steps[1])
"""
# the weights of checkpoint-2 are written, then the process dies before the optimizer and trainer_state.json
KILL_AT_CHECKPOINT_2 = (
    'kill_after(transformers.Trainer, "save_model", '
    'lambda self, output_dir=None, **k: str(output_dir).endswith("checkpoint-2"))'
)


@pytest.mark.slow
def test_training_killed_while_checkpointing_resumes_from_the_last_complete_checkpoint(tmp_path):
    from tokswap.training import checkpoint_problem, latest_checkpoint

    run_child(TRAIN.format(hook=KILL_AT_CHECKPOINT_2, resume=None), True, tmp_path)
    stage1 = tmp_path / "run" / "stage1"
    assert checkpoint_problem(stage1 / "checkpoint-2") == "no trainer_state.json"
    assert latest_checkpoint(stage1) == str(stage1 / "checkpoint-1")  # the torn one is skipped
    proc = run_child(TRAIN.format(hook="", resume=True), expect_killed=False, tmp_path=tmp_path)
    assert "Skipping the incomplete checkpoint" in proc.stderr and "global_step 3" in proc.stdout
    state = json.loads((stage1 / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3]


# ---------------------------------------------------------------------------------------- distillation
DISTILL = """
    import transformers
    from datasets import Dataset
    from tokswap.distillation import TokenDistillationConfig, distill
    {hook}
    config = TokenDistillationConfig(
        output_dir=os.path.join(OUT, "distill"), max_steps=3, per_device_train_batch_size=2, max_length=32,
        packing=True, learning_rate=1e-2, logging_steps=1, save_steps=1, report_to="none",
        activation_checkpointing=False, distill_chunk_size=16, resume_from_checkpoint={resume})
    trainer = distill(tiny_model(0), tiny_tokenizer(), tiny_model(1), Dataset.from_dict({{"text": TEXTS}}), config)
    print("global_step", trainer.state.global_step)
"""


@pytest.mark.slow
def test_distillation_killed_while_checkpointing_resumes_from_the_last_complete_checkpoint(tmp_path):
    from tokswap.training import checkpoint_problem

    run_child(DISTILL.format(hook=KILL_AT_CHECKPOINT_2, resume=None), True, tmp_path)
    out = tmp_path / "distill"
    assert checkpoint_problem(out / "checkpoint-2") is not None
    assert checkpoint_problem(out / "checkpoint-1") is None
    proc = run_child(DISTILL.format(hook="", resume=True), expect_killed=False, tmp_path=tmp_path)
    assert "Skipping the incomplete checkpoint" in proc.stderr and "global_step 3" in proc.stdout
    assert checkpoint_problem(out / "checkpoint-3") is None


@pytest.mark.slow
def test_distillation_resume_with_nothing_to_resume_is_an_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PRELUDE + "\nOUT = " + repr(str(tmp_path)) + "\n" + textwrap.dedent(DISTILL.format(hook="", resume=True)),
        ],
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src")),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0 and "DistillationError" in proc.stderr and "nothing to resume" in proc.stderr
    assert not any(p.name.startswith("checkpoint-") for p in (tmp_path / "distill").glob("*"))


def test_killed_children_left_no_alignment_that_loads_wrong(tmp_path):
    """A forged 'finished' alignment next to a torn one: the checksums tell them apart (no card, no Hub)."""
    run_child(ALIGN_SAVE.format(hook="", value=3), expect_killed=False, tmp_path=tmp_path)
    run_child(ALIGN_SAVE.format(hook='kill_after(safetensors.numpy, "save_file")', value=5), True, tmp_path)
    partial = tmp_path / leftovers(tmp_path)[0]
    # someone "completes" the torn folder by copying the old config beside the new weights
    (partial / "alignment_config.json").write_text((tmp_path / "al" / "alignment_config.json").read_text())
    from tokswap.alignment import UnverifiedAlignmentError

    with pytest.raises(UnverifiedAlignmentError, match="changed outside tokswap"):
        TokenAlignment.from_pretrained(partial)
    assert np.all(TokenAlignment.from_pretrained(tmp_path / "al").target_to_source == 3)
