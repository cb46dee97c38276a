"""Test session setup: every Hub call goes to a loopback Hub, every Hub cache to a throw-away folder.

The Hub client settings are read when huggingface_hub is imported, so they are put in the
environment here, at import time, before any test module imports huggingface_hub, transformers or
datasets. `TOKSWAP_CACHE` is left alone: real assets persist in the user's tokswap cache.

Fixtures:
    hub             the session's `LoopbackHub` (endpoint = $HF_ENDPOINT), running for every test
    hub_token       the token the clients send ($HF_TOKEN), authenticating as `hub_user`
    hub_user        "tokswap-tester"
    hub_api         an `HfApi` bound to the loopback Hub and token
    new_repo_id     factory: new_repo_id("name") -> "tokswap-tester/name-<random>" (never taken)
    fresh_hf_cache  an empty Hugging Face cache for one test (huggingface_hub, transformers, datasets)
    lb              bench/bench_leaderboard.py, imported as a module (the bench's helpers under test)
    hub_asset       factory: hub_asset("smollm2-135m") publishes a real tokswap asset under the id of
                    the Hub repository it stands for ("HuggingFaceTB/SmolLM2-135M-Instruct") and
                    returns that id, so tests call from_pretrained("<org>/<name>") like users do
"""

import atexit
import importlib
import importlib.util
import os
import secrets
import shutil
import socket
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest

HUB_USER = "tokswap-tester"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if "huggingface_hub" in sys.modules:
    warnings.warn(
        "huggingface_hub was imported before tests/conftest.py: it will not see the loopback Hub.", stacklevel=1
    )

_HUB_PORT = _free_port()
_HUB_ENDPOINT = f"http://127.0.0.1:{_HUB_PORT}"
_HUB_TOKEN = f"hf_loopback_{secrets.token_hex(16)}"
_HF_HOME = tempfile.mkdtemp(prefix="tokswap-test-hf-home-")
atexit.register(shutil.rmtree, _HF_HOME, ignore_errors=True)

# The essentials go in before `tokswap` is imported at all, in case its package __init__ ever
# imports transformers; hub_client_env() below then adds the rest.
os.environ.update(
    {
        "HF_ENDPOINT": _HUB_ENDPOINT,
        "HF_HOME": _HF_HOME,
        "HF_HUB_CACHE": os.path.join(_HF_HOME, "hub"),
        "HF_TOKEN": _HUB_TOKEN,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
)

from tokswap.testing import LoopbackHub, hub_client_env  # noqa: E402

os.environ.update(hub_client_env(_HUB_ENDPOINT, _HF_HOME, _HUB_TOKEN))
_SESSION_DATASETS_CACHE = Path(os.environ["HF_DATASETS_CACHE"])
os.environ.update(
    {
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_VERBOSITY": "error",
        "DATASETS_VERBOSITY": "error",
        "HF_HUB_VERBOSITY": "error",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_SYMLINKS_WARNING": "1",
        "HF_HUB_DISABLE_EXPERIMENTAL_WARNING": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    }
)


@pytest.fixture(scope="session")
def hub_token() -> str:
    return _HUB_TOKEN


@pytest.fixture(scope="session")
def hub_user() -> str:
    return HUB_USER


@pytest.fixture(scope="session")
def hub(hub_token):
    """The loopback Hub every client in this session talks to (started on $HF_ENDPOINT's port)."""
    server = LoopbackHub(port=_HUB_PORT, tokens={hub_token: HUB_USER}).start()
    yield server
    server.stop()


# No autouse: pure unit tests never start the loopback Hub. Test files that talk to the Hub, directly or through
# tokswap's prebuilt-alignment lookup, say so with `pytestmark = pytest.mark.usefixtures("hub")`; anywhere else a
# Hub call meets a closed port on $HF_ENDPOINT.


@pytest.fixture(scope="session")
def hub_asset(hub):
    """Factory publishing real tokswap assets on the loopback Hub (each at most once per session)."""
    try:
        assets = importlib.import_module("tokswap.offline.assets")
    except ImportError:
        pytest.skip("tokswap.offline.assets is not available")
    seeded = {}

    def publish(name: str) -> str:
        if name not in seeded:
            if name == "minilm":
                folder = assets.minilm_path()
            elif name.lower() in assets.MODEL_NAMES:
                folder = assets.model_path(name)
            else:
                folder = assets.tokenizer_path(name)
            repo_id = assets.ASSET_HUB_IDS[name]
            hub.seed_folder(repo_id, folder, commit_message=f"Publish the tokswap asset {name!r}")
            seeded[name] = repo_id
        return seeded[name]

    return publish


@pytest.fixture(scope="session")
def hub_api(hub, hub_token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.endpoint, token=hub_token)


@pytest.fixture
def new_repo_id(hub_user):
    """Factory for repo ids no other test uses: `new_repo_id("tiny-llama")`."""

    def make(name: str = "repo", namespace: str = HUB_USER) -> str:
        return f"{namespace}/{name}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def fresh_hf_cache(tmp_path, monkeypatch):
    """Point the Hugging Face caches at empty folders for one test and yield the hub cache folder.

    huggingface_hub copies its cache paths into `huggingface_hub.constants` at import; downloads
    (hf_hub_download, snapshot_download, transformers' from_pretrained) read them from there at
    call time, so patching the constants (and the environment, for libraries imported later or
    subprocesses) is enough.
    """
    import huggingface_hub.constants as hf_constants

    hub_cache = tmp_path / "hf-cache" / "hub"
    datasets_cache = tmp_path / "hf-cache" / "datasets"
    hub_cache.mkdir(parents=True)
    datasets_cache.mkdir(parents=True)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.setattr(hf_constants, name, str(hub_cache))
    monkeypatch.setattr(hf_constants, "HF_ASSETS_CACHE", str(tmp_path / "hf-cache" / "assets"))
    monkeypatch.setattr(hf_constants, "HF_XET_CACHE", str(tmp_path / "hf-cache" / "xet"))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_ASSETS_CACHE", str(tmp_path / "hf-cache" / "assets"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(datasets_cache))
    datasets_was_imported = "datasets" in sys.modules
    if datasets_was_imported:
        _point_datasets_cache(datasets_cache, monkeypatch.setattr)
    yield hub_cache
    if not datasets_was_imported and "datasets" in sys.modules:
        # datasets was first imported inside the test and froze the per-test folder: restore the session's.
        _point_datasets_cache(_SESSION_DATASETS_CACHE, setattr)


def _point_datasets_cache(folder: Path, set_attribute) -> None:
    """datasets derives its cache and download folders once, at import."""
    datasets_config = sys.modules["datasets"].config
    set_attribute(datasets_config, "HF_DATASETS_CACHE", folder)
    set_attribute(datasets_config, "DOWNLOADED_DATASETS_PATH", folder / "downloads")
    set_attribute(datasets_config, "EXTRACTED_DATASETS_PATH", folder / "downloads" / "extracted")


@pytest.fixture(scope="session")
def train_bpe_tokenizer():
    """Factory: train_bpe_tokenizer(texts, vocab_size) -> a small byte-level BPE fast tokenizer (<s>, </s>)."""

    def train(texts, vocab_size):
        from tokenizers import ByteLevelBPETokenizer
        from transformers import PreTrainedTokenizerFast

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            texts, vocab_size=vocab_size, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False
        )
        return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")

    return train


def tiny_llama(vocab_size: int, *, tokenizer=None, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, tied: bool = False, max_positions=None, dtype=None, ids=("bos", "eos", "pad")):  # fmt: skip
    """A randomly initialized Llama small enough for any test (the builder every test file shares).

    With `tokenizer`, the config takes its special token ids (those named in `ids`). `seed` seeds the weights; `tied` ties the input
    embeddings and the head; `max_positions` sets `max_position_embeddings` (transformers' default otherwise).
    Import it with `from conftest import tiny_llama`.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    special = {}
    if tokenizer is not None:
        special = {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ids}
    extra = {} if max_positions is None else {"max_position_embeddings": max_positions}
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tied,
        **special,
        **extra,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    return model if dtype is None else model.to(dtype)


@pytest.fixture(scope="session")
def lb():
    """bench/bench_leaderboard.py as a module: the tests of the bench's own helpers import it by path."""
    path = Path(__file__).resolve().parents[1] / "bench" / "bench_leaderboard.py"
    spec = importlib.util.spec_from_file_location("bench_leaderboard", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def identical_rows_alignment(source_tokenizer, target_tokenizer):
    """A `TokenAlignment` where only identical token strings are shared; every other row is left to the init
    method (GLOVE code, with no match recorded)."""
    import numpy as np

    from tokswap.alignment import RowSource, TokenAlignment, tokenizer_fingerprint

    source_vocab = source_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.GLOVE, dtype=np.int8)
    for token, target_id in target_tokenizer.get_vocab().items():
        if token in source_vocab and target_id < n:
            target_to_source[target_id], codes[target_id] = source_vocab[token], RowSource.IDENTICAL
    return TokenAlignment(
        target_to_source=target_to_source,
        row_sources=codes,
        config={
            "source_tokenizer": tokenizer_fingerprint(source_tokenizer),
            "target_tokenizer": tokenizer_fingerprint(target_tokenizer),
        },
    )
