"""The notebooks in templates/notebooks run to the end (nbclient, a real kernel) against the loopback Hub.

Each notebook keeps its settings in one cell tagged `parameters`; the test runs a cell right after
it that swaps in tiny settings (a tiny Llama built from a config, small BPE tokenizers, a few
training steps), exactly as a reader would override them. The kernel gets the test session's Hub
environment (loopback endpoint, token, an empty Hugging Face cache) and `TOKSWAP_SKIP_INSTALL=1`.
"""

import importlib.util
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
import nbformat  # noqa: E402
from conftest import tiny_llama
from nbclient import NotebookClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "templates" / "notebooks"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("hub"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def _helpers():
    """The tiny-tokenizer and alignment helpers of test_hub.py (loaded by path: tests/ is no package)."""
    spec = importlib.util.spec_from_file_location("_tokswap_test_hub_helpers", Path(__file__).with_name("test_hub.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_llama(tokenizer, folder, seed):

    tiny_llama(len(tokenizer), tokenizer=tokenizer, seed=seed, tied=True, max_positions=256).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (Path(folder) / "README.md").write_text(
        "---\nlicense: apache-2.0\nlanguage:\n- en\n---\n\n# tiny\n", encoding="utf-8"
    )
    return folder


@pytest.fixture(scope="module")
def world(hub, hub_user, tmp_path_factory):
    """Tiny models, tokenizers, data and a prebuilt alignment on the loopback Hub."""
    from transformers import AutoTokenizer

    from tokswap import hub as tokswap_hub

    helpers = _helpers()
    root = tmp_path_factory.mktemp("notebooks")
    texts = helpers._corpus()
    source_tokenizer = AutoTokenizer.from_pretrained(helpers._train_tokenizer(texts, 420, root / "src-tok"))
    target_tokenizer = AutoTokenizer.from_pretrained(helpers._train_tokenizer(texts, 640, root / "tgt-tok"))
    tag = uuid.uuid4().hex[:6]
    ids = {
        "model": f"{hub_user}/nb-tiny-src-{tag}",
        "target": f"{hub_user}/nb-tiny-tgt-{tag}",
        "teacher": f"{hub_user}/nb-tiny-teacher-{tag}",
    }
    hub.seed_folder(ids["model"], _tiny_llama(source_tokenizer, root / "model", seed=0))
    hub.seed_folder(ids["teacher"], _tiny_llama(target_tokenizer, root / "teacher", seed=1))
    target_tokenizer.save_pretrained(root / "tgt-tok-seed")
    hub.seed_folder(ids["target"], root / "tgt-tok-seed")

    namespace = f"nb-alignments-{tag}"
    source_tokenizer.name_or_path = ids["model"]
    previous = os.environ.get(tokswap_hub.ALIGNMENT_NAMESPACE_ENV)
    os.environ[tokswap_hub.ALIGNMENT_NAMESPACE_ENV] = namespace
    try:
        alignment = helpers.simple_alignment(source_tokenizer, target_tokenizer)
        alignment.push_to_hub()
    finally:
        if previous is None:
            os.environ.pop(tokswap_hub.ALIGNMENT_NAMESPACE_ENV, None)
        else:
            os.environ[tokswap_hub.ALIGNMENT_NAMESPACE_ENV] = previous

    data = root / "train.jsonl"
    with open(data, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}) + "\n")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(texts), encoding="utf-8")
    return {
        "ids": ids,
        "namespace": namespace,
        "data": str(data),
        "corpus": str(corpus),
        "root": root,
        "alignment_repo": tokswap_hub.alignment_repo_id(source_tokenizer, target_tokenizer, namespace),
    }


def run_notebook(name, overrides, workdir, namespace, timeout=600):
    """Execute a notebook with `overrides` run right after its parameters cell; return the executed notebook."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    position = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    source = "# injected by tests/test_notebooks.py\n" + "\n".join(f"{k} = {v!r}" for k, v in overrides.items())
    injected = nbformat.v4.new_code_cell(source)
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(position + 1, injected)

    hf_home = Path(workdir) / "hf-home"
    env = dict(os.environ)
    env.update(
        {
            "TOKSWAP_SKIP_INSTALL": "1",
            "TOKSWAP_ALIGNMENT_NAMESPACE": namespace,
            "HF_HUB_CACHE": str(hf_home / "hub"),  # an empty cache: everything comes over HTTP
            "HF_HOME": str(hf_home),
            "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONWARNINGS": "ignore",
            "TOKSWAP_VERBOSITY": "INFO",
        }
    )
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    client.execute(env=env)
    return nb


def outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output and "text/plain" in output["data"]:
                parts.append(output["data"]["text/plain"])
    return "".join(parts)


def test_notebooks_are_generated_from_the_script():
    spec = importlib.util.spec_from_file_location("_make_notebooks", ROOT / "scripts" / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "templates/notebooks is stale: run scripts/make_notebooks.py"
    for name in module.NOTEBOOKS:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
        assert "%pip install" in first_code.source and "TOKSWAP_SKIP_INSTALL" in first_code.source
        assert sum("parameters" in cell.metadata.get("tags", []) for cell in nb.cells) == 1


def test_swap_with_prebuilt_alignment_notebook(world, tmp_path):
    nb = run_notebook(
        "01_swap_with_prebuilt_alignment.ipynb",
        {"SOURCE_MODEL": world["ids"]["model"], "TARGET_TOKENIZER": world["ids"]["target"], "MAX_NEW_TOKENS": 5},
        tmp_path,
        world["namespace"],
    )
    text = outputs_text(nb)
    assert "tokswap is already installed" in text
    assert f"alignment: prebuilt {world['alignment_repo']}" in text
    assert "saved to swapped-model" in text
    assert (tmp_path / "swapped-model" / "tokswap_config.json").is_file()


def test_build_your_own_alignment_notebook(world, tmp_path):
    from tokswap.alignment import TokenAlignment

    push_to = f"{world['namespace']}/nb-built-alignment"
    nb = run_notebook(
        "02_build_your_own_alignment.ipynb",
        {
            "SOURCE_TOKENIZER": world["ids"]["model"],
            "TARGET_TOKENIZER": world["ids"]["target"],
            "CORPUS": world["corpus"],
            "GLOVE_DIM": 16,
            "GLOVE_ITERATIONS": 3,
            "SEMANTIC_SIMILARITY": False,
            "PUSH_TO": push_to,
        },
        tmp_path,
        world["namespace"],
    )
    assert "pushed:" in outputs_text(nb)
    built = TokenAlignment.from_pretrained(push_to)
    assert 0.0 <= built.config["metrics"]["bleu1"] <= 1.0
    assert (tmp_path / "my-alignment" / "alignment.safetensors").is_file()


def test_train_and_distill_notebook(world, tmp_path):
    nb = run_notebook(
        "03_train_and_distill.ipynb",
        {
            "SOURCE_MODEL": world["ids"]["model"],
            "TARGET_TOKENIZER": world["ids"]["target"],
            "TEACHER": world["ids"]["teacher"],
            "DATASET": world["data"],
            "MAX_DOCUMENTS": 120,
            "MAX_LENGTH": 64,
            "BATCH_SIZE": 2,
            "STAGE1_STEPS": 2,
            "STAGE2_STEPS": 2,
            "DISTILL_STEPS": 2,
            "EVAL_DOCUMENTS": 6,
        },
        tmp_path,
        world["namespace"],
    )
    record = json.loads((tmp_path / "swapped-trained" / "tokswap_config.json").read_text())
    assert set(record["evaluation"]) == {"after swap", "after training", "after distillation"}
    assert all(row["bits_per_byte"] > 0 for row in record["evaluation"].values())
    assert [run["kind"] for run in record["training"]] == ["adapt_vocabulary", "distill"]
    assert "after distillation" in outputs_text(nb)


def test_push_notebook(world, tmp_path, hub_api, hub_user):
    from huggingface_hub import ModelCard

    repo_id = f"{hub_user}/nb-pushed-{uuid.uuid4().hex[:6]}"
    nb = run_notebook(
        "04_push_to_hub.ipynb",
        {"SOURCE_MODEL": world["ids"]["model"], "TARGET_TOKENIZER": world["ids"]["target"], "REPO_ID": repo_id},
        tmp_path,
        world["namespace"],
    )
    assert hub_api.model_info(repo_id).private
    card = ModelCard.load(repo_id)
    assert card.data.base_model == world["ids"]["model"] and card.data.license == "apache-2.0"
    assert "tokswap" in card.data.tags
    assert "base_model_relation: finetune" in outputs_text(nb)


def test_make_a_draft_model_notebook(world, tmp_path):
    nb = run_notebook(
        "05_make_a_draft_model.ipynb",
        {
            "SMALL_MODEL": world["ids"]["model"],
            "BIG_MODEL": world["ids"]["teacher"],
            "DATASET": world["data"],
            "TEXT_COLUMN": "text",
            "MAX_DOCUMENTS": 60,
            "MAX_LENGTH": 64,
            "BATCH_SIZE": 2,
            "DISTILL_STEPS": 2,
            "MAX_NEW_TOKENS": 8,
            "NUM_ASSISTANT_TOKENS": 3,
            "FREQUENT_TOKENS": 20,
        },
        tmp_path,
        world["namespace"],
    )
    record = json.loads((tmp_path / "draft-model" / "tokswap_config.json").read_text())
    assert record["draft_for"] == world["ids"]["teacher"]
    measured = record["speculative_decoding"]
    # on a CPU the notebook also times the draft inside small_batch_matmul (against the big model alone, same way),
    # in float32 and in bfloat16
    assert set(measured) == {
        "before distillation",
        "after distillation",
        "head: 20 tokens",
        "small-batch matmul",
        "bfloat16 draft",
    }
    assert all(row["lossless"] and 0 <= row["acceptance_rate"] <= 1 for row in measured.values())
    from tokswap.drafting import load_frequency_ranked_tokens

    assert len(load_frequency_ranked_tokens(tmp_path / "draft-model")) >= 20
    assert "after distillation" in outputs_text(nb)
