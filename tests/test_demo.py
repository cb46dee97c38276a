"""`tokswap demo --quick` end to end on the real assets (SmolLM2-135M -> Qwen2.5 tokenizer), then checks
that the saved folder, loaded with plain transformers and evaluated separately, gives the numbers the
demo printed.

The quick settings keep every step of the real demo (assets, corpus, evaluation before, alignment
computed by TokAlign, swap, both training stages, evaluation after, save, plot, results.json) but
shrink the budgets: a 0.3 MB corpus, 16-dim GloVe for 2 epochs, 2 + 2 training steps of 2 x 64 tokens,
1.5 KB of held-out text per domain, 4 ARC-Easy questions.
"""

from __future__ import annotations

import io
import json
import os
import re
import uuid

import pytest

# the whole demo on real assets (slow); it talks to the loopback Hub
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hub")]

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def alignment_namespace():
    """A fresh alignment namespace on the loopback Hub, so no other test's alignment is found as prebuilt."""
    from tokswap.hub import ALIGNMENT_NAMESPACE_ENV

    previous = os.environ.get(ALIGNMENT_NAMESPACE_ENV)
    os.environ[ALIGNMENT_NAMESPACE_ENV] = f"tokswap-demo-alignments-{uuid.uuid4().hex[:8]}"
    yield os.environ[ALIGNMENT_NAMESPACE_ENV]
    if previous is None:
        os.environ.pop(ALIGNMENT_NAMESPACE_ENV, None)
    else:
        os.environ[ALIGNMENT_NAMESPACE_ENV] = previous


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory, alignment_namespace):
    from tokswap.cli.demo import DemoConfig, run_demo

    output = tmp_path_factory.mktemp("demo") / "swapped"
    printed = io.StringIO()
    config = DemoConfig.quick(output=str(output), progress=False)
    results = run_demo(config, stream=printed)
    return output, results, printed.getvalue(), config


def _printed_row(text: str, label: str) -> list:
    """The numbers of one row of the printed summary table, e.g. `| bits/byte all | 1.0 | 2.0 | 3.0 |`."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == label:
            return [float(c) for c in cells[1:]]
    raise AssertionError(f"no row {label!r} in the printed table:\n{text}")


def test_demo_prints_numbered_steps_and_a_table(quick_demo):
    _, results, printed, _ = quick_demo
    numbers = [int(n) for n in re.findall(r"^\[(\d+)/8\]", printed, flags=re.M)]
    assert numbers == list(range(1, 9))
    assert "elapsed" in printed and "done in" in printed
    header = next(line for line in printed.splitlines() if line.startswith("| metric"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == ["before", "after swap", "after training"]
    before, after_swap, after_training = _printed_row(printed, "bits/byte all")
    evaluations = results["evaluations"]
    assert before == pytest.approx(evaluations["before"]["bpb"]["all"]["bits_per_byte"], abs=1e-4)
    assert after_training == pytest.approx(evaluations["after training"]["bpb"]["all"]["bits_per_byte"], abs=1e-4)
    # A real model on real text: the unswapped model is far better than chance (8 bits per byte), and
    # its bits per byte does not depend on the tokenizer being measured in bytes.
    assert 0.3 < before < 3.0
    assert after_swap > before  # the swap costs something before any training


def test_demo_writes_the_model_results_and_plot(quick_demo):
    output, results, _, config = quick_demo
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokswap_config.json",
        "results.json",
        "heldout.json",
        "loss_curve.png",
    ):
        assert (output / name).is_file(), name
    assert (output / "alignment" / "alignment.safetensors").is_file()
    assert (output / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((output / "results.json").read_text())
    assert saved["evaluations"]["after training"]["bpb"] == results["evaluations"]["after training"]["bpb"]
    assert saved["alignment"]["origin"] == "computed"  # the loopback Hub holds no prebuilt alignment
    curve = saved["training_curve"]
    assert [p["stage"] for p in curve] == [1] * config.stage1_steps + [2] * config.stage2_steps
    assert [p["step"] for p in curve] == list(range(1, config.stage1_steps + config.stage2_steps + 1))
    assert all(p["loss"] > 0 for p in curve)
    assert set(saved["evaluations"]) == {"before", "after swap", "after training"}
    assert "arc_easy" in saved["evaluations"]["after training"]["tasks"]
    # compression is measured on the same held-out bytes for both tokenizers
    change = saved["evaluations"]["after swap"]["compression_vs_reference"]["all"]
    assert change["source_tokens"] > 0 and change["target_tokens"] > 0


def test_saved_model_reproduces_the_printed_numbers(quick_demo):
    """Plain transformers loading + `evaluate` on the saved held-out texts = the demo's printed bpb."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokswap.cli.demo import EVAL_BATCH_SIZE, EVAL_MAX_LENGTH
    from tokswap.evaluation import evaluate

    output, results, printed, _ = quick_demo
    model = AutoModelForCausalLM.from_pretrained(str(output), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(output))
    assert len(tokenizer) == 151665  # the Qwen2.5 vocabulary
    heldout = json.loads((output / "heldout.json").read_text())
    again = evaluate(
        model,
        tokenizer,
        tasks=["bpb"],
        heldout=heldout,
        batch_size=EVAL_BATCH_SIZE,
        max_length=EVAL_MAX_LENGTH,
        progress=False,
    )
    printed_after = _printed_row(printed, "bits/byte all")[2]
    assert again["bpb"]["all"]["bits_per_byte"] == pytest.approx(printed_after, abs=1e-4)
    demo_bpb = results["evaluations"]["after training"]["bpb"]
    for domain, values in again["bpb"].items():
        assert values["bits_per_byte"] == pytest.approx(demo_bpb[domain]["bits_per_byte"], abs=1e-5), domain


def test_tokswap_eval_command_reproduces_the_demo(quick_demo, capsys):
    """The command the demo prints for checking, run through the real CLI entry point."""
    import shlex

    from tokswap.cli import main

    output, results, _, _ = quick_demo
    command = shlex.split(results["verify_command"])
    assert command[:2] == ["tokswap", "eval"]
    json_file = output.parent / "verify.json"
    assert main(command[1:] + ["--no-progress", "--output", str(json_file)]) == 0
    verified = json.loads(json_file.read_text())
    expected = results["evaluations"]["after training"]["bpb"]["all"]["bits_per_byte"]
    assert verified["bpb"]["all"]["bits_per_byte"] == pytest.approx(expected, abs=1e-4)


def test_prebuilt_alignment_on_the_hub_is_used(quick_demo, hub):
    """Once the alignment is on the (loopback) Hub, the demo's alignment step takes it instead of computing."""
    from tokswap import TokenAlignment
    from tokswap.cli.demo import DemoConfig, _get_alignment, _Steps
    from tokswap.hub import push_alignment
    from tokswap.loading import load_tokenizer

    output, _, _, config = quick_demo
    alignment = TokenAlignment.from_pretrained(output / "alignment")
    push_alignment(alignment)
    printed = io.StringIO()
    found, origin = _get_alignment(
        load_tokenizer(config.source_tokenizer),
        load_tokenizer(config.target_tokenizer),
        corpus=None,
        config=DemoConfig.quick(progress=False),
        steps=_Steps(1, printed),
    )
    assert origin["origin"] == "prebuilt"
    assert "prebuilt" in printed.getvalue()
    assert (found.target_to_source == alignment.target_to_source).all()


def test_cli_rejects_bad_settings(capsys):
    from tokswap.cli import main

    assert main(["demo", "--quick", "--limit", "0"]) == 2
    assert "limit" in capsys.readouterr().err
