"""Alignments and swapped models on the Hub, end to end over HTTP against the loopback Hub.

Everything goes through the real, unmodified clients (huggingface_hub, transformers). The models are
tiny (built from a config) and the tokenizers are small byte-level BPEs trained here, so the whole
file runs in well under a minute.
"""

import inspect
import json
import logging
import os
import time

import numpy as np
import pytest
from conftest import tiny_llama

from tokswap import hub as tokswap_hub
from tokswap.alignment import AlignmentError, RowSource, TokenAlignment, tokenizer_fingerprint

pytestmark = [pytest.mark.usefixtures("hub"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# ---------------------------------------------------------------------------------------- fixtures
def _corpus() -> list:
    """Deterministic English + code text: the docstrings and sources of a few stdlib modules."""
    import argparse
    import json as json_module
    import textwrap as textwrap_module

    texts = []
    for module in (textwrap_module, json_module, argparse):
        source = inspect.getsource(module)
        texts.extend(chunk for chunk in source.split("\n\n") if chunk.strip())
    return texts


def _train_tokenizer(texts, vocab_size, folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<pad>"
    )
    fast.save_pretrained(folder)
    return folder


def simple_alignment(source_tokenizer, target_tokenizer) -> TokenAlignment:
    """Identical tokens map to themselves; every other target token to the source pieces of its text.

    Enough for testing the Hub plumbing (the real matching is tested in test_aligner.py).
    """
    source_vocab = source_tokenizer.get_vocab()
    target_vocab = target_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    row_sources = np.full(n, RowSource.IDENTICAL, dtype=np.int8)
    indptr, indices = [0], []
    for token, tid in sorted(target_vocab.items(), key=lambda item: item[1]):
        if token in source_vocab:
            target_to_source[tid] = source_vocab[token]
        else:
            pieces = source_tokenizer.encode(
                target_tokenizer.convert_tokens_to_string([token]), add_special_tokens=False
            )
            pieces = pieces or [source_tokenizer.eos_token_id]
            target_to_source[tid] = pieces[0]
            row_sources[tid] = RowSource.FALLBACK
            indices.extend(pieces)
        indptr.append(len(indices))
    return TokenAlignment(
        target_to_source=target_to_source,
        scores=(row_sources == RowSource.IDENTICAL).astype(np.float32),
        row_sources=row_sources,
        fallback_indptr=np.asarray(indptr),
        fallback_indices=np.asarray(indices, dtype=np.int64),
        config={
            "source_tokenizer": tokenizer_fingerprint(source_tokenizer),
            "target_tokenizer": tokenizer_fingerprint(target_tokenizer),
            "metrics": {"bleu1": 0.5, "coverage_trained_target": 0.9},
            "method": "test-identical-then-pieces",
        },
    )


@pytest.fixture(scope="module")
def namespace():
    """A fresh alignment namespace (and so a fresh index) for this module's tests."""
    import uuid

    name = f"tokswap-alignments-{uuid.uuid4().hex[:8]}"
    previous = os.environ.get(tokswap_hub.ALIGNMENT_NAMESPACE_ENV)
    os.environ[tokswap_hub.ALIGNMENT_NAMESPACE_ENV] = name
    yield name
    if previous is None:
        os.environ.pop(tokswap_hub.ALIGNMENT_NAMESPACE_ENV, None)
    else:
        os.environ[tokswap_hub.ALIGNMENT_NAMESPACE_ENV] = previous


@pytest.fixture(scope="module")
def assets(hub, hub_user, tmp_path_factory):
    """Two small real BPE tokenizers and a tiny Llama using the first, seeded on the loopback Hub."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("hub-assets")
    texts = _corpus()
    source_dir = _train_tokenizer(texts, 420, root / "source-tokenizer")
    target_dir = _train_tokenizer(texts, 640, root / "target-tokenizer")
    other_dir = _train_tokenizer(texts[::2], 500, root / "other-tokenizer")
    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)
    source_tokenizer.name_or_path = f"{hub_user}/tiny-llama-src"  # as the swapper will see it

    model_dir = root / "tiny-model"
    tiny_llama(len(source_tokenizer), tokenizer=source_tokenizer, tied=True, max_positions=256).save_pretrained(
        model_dir
    )
    source_tokenizer.save_pretrained(model_dir)
    (model_dir / "README.md").write_text(
        "---\nlicense: mit\nlanguage:\n- en\ntags:\n- tiny\n---\n\n# A tiny test model\n", encoding="utf-8"
    )
    ids = {
        "model": f"{hub_user}/tiny-llama-src",
        "target": f"{hub_user}/tiny-bpe-640",
        "other": f"{hub_user}/tiny-bpe-500",
    }
    hub.seed_folder(ids["model"], model_dir)
    hub.seed_folder(ids["target"], target_dir)
    hub.seed_folder(ids["other"], other_dir)
    return {
        "ids": ids,
        "source": source_tokenizer,
        "target": AutoTokenizer.from_pretrained(ids["target"]),
        "other": AutoTokenizer.from_pretrained(ids["other"]),
    }


@pytest.fixture
def tokswap_logs(caplog):
    """caplog sees the `tokswap` logger too (it does not propagate to the root logger)."""
    library_logger = logging.getLogger("tokswap")
    library_logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="tokswap")
    yield caplog
    library_logger.removeHandler(caplog.handler)


def _no_recompute(monkeypatch):
    """Make computing an alignment fail loudly: the tests below must download, never compute."""

    def refuse(*args, **kwargs):
        raise AssertionError("align_tokenizers was called: the prebuilt alignment was not used")

    import tokswap.align.pipeline

    monkeypatch.setattr(tokswap.align.pipeline, "align_tokenizers", refuse)


def _files_containing(folder, secret: str) -> list:
    hits = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                if secret.encode() in handle.read():
                    hits.append(path)
    return hits


# ---------------------------------------------------------------------------------------- naming
def test_repo_naming_convention():
    assert tokswap_hub.tokenizer_slug("Qwen/Qwen2.5-0.5B") == "qwen2.5-0.5b"
    assert tokswap_hub.tokenizer_slug("/home/me/.cache/tokswap/tokenizers/smollm2/") == "smollm2"
    assert tokswap_hub.tokenizer_slug({"name_or_path": "meta-llama/Llama-3.2-1B"}) == "llama-3.2-1b"
    assert tokswap_hub.tokenizer_slug("") == "tokenizer"
    repo = tokswap_hub.alignment_repo_id("HuggingFaceTB/SmolLM2-135M", "google/gemma-3-270m", namespace="ns")
    assert repo == "ns/smollm2-135m_to_gemma-3-270m"
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(repo)  # no "--" or "..": the Hub accepts it
    long = tokswap_hub.alignment_repo_id("a" * 200, "b--c..d" * 30, namespace="ns")
    validate_repo_id(long)
    assert len(long.split("/")[1]) <= 96


# ---------------------------------------------------------------------------------------- end to end
def test_push_find_swap_push_load_generate(
    assets, namespace, hub_token, hub_user, fresh_hf_cache, monkeypatch, tokswap_logs, tmp_path, capsys
):
    from huggingface_hub import ModelCard, snapshot_download
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokswap.swapper import TokenizerSwapper

    source, target = assets["source"], assets["target"]
    alignment = simple_alignment(source, target)

    # 1. push the alignment: one repo named after the pair, and an index entry
    info = alignment.push_to_hub()
    repo_id = tokswap_hub.alignment_repo_id(source, target)
    assert repo_id.startswith(namespace + "/")
    index = tokswap_hub.load_alignment_index()
    entry = index["alignments"][
        tokswap_hub.pair_key(alignment.source_fingerprint["vocab_hash"], alignment.target_fingerprint["vocab_hash"])
    ]
    assert entry["repo_id"] == repo_id and entry["revision"] == info.oid

    # 2. with an empty cache, the swapper downloads it instead of computing one
    cache_folder = fresh_hf_cache / ("models--" + repo_id.replace("/", "--"))
    assert not cache_folder.exists()
    _no_recompute(monkeypatch)
    swapper = TokenizerSwapper.from_pretrained(assets["ids"]["model"], assets["ids"]["target"])
    assert swapper.alignment.config["hub"]["repo_id"] == repo_id
    assert swapper.alignment.config["hub"]["revision"] == info.oid
    np.testing.assert_array_equal(swapper.alignment.target_to_source, alignment.target_to_source)
    assert swapper.swap_record["alignment"]["origin"] == "prebuilt"
    assert cache_folder.is_dir(), "the alignment did not go through huggingface_hub's cache"
    assert f"Using the prebuilt alignment {repo_id}" in tokswap_logs.text
    assert swapper.model.get_input_embeddings().weight.shape[0] >= len(target)

    # 3. push the swapped model
    pushed = f"{hub_user}/tiny-llama-swapped"
    commit = swapper.push_to_hub(pushed, commit_message="tiny swapped model")
    assert commit.oid

    # 4. plain transformers loads it from the Hub and generates
    tokenizer = AutoTokenizer.from_pretrained(pushed)
    model = AutoModelForCausalLM.from_pretrained(pushed)
    assert len(tokenizer) == len(target) and tokenizer.get_vocab() == target.get_vocab()
    inputs = tokenizer("def parse(self, text):", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert output.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(tokenizer.decode(output[0]), str)

    # 5. the card parses and says the right things
    card = ModelCard.load(pushed)
    meta = card.data.to_dict()
    assert meta["base_model"] == assets["ids"]["model"]
    assert meta["base_model_relation"] == "finetune"
    assert meta["library_name"] == "transformers"
    assert meta["license"] == "mit" and meta["language"] == ["en"]  # carried from the source card
    assert {"tokswap", "tokalign", "tokenizer-transfer"} <= set(meta["tags"])
    assert meta["tokswap"]["alignment_repo"] == repo_id
    assert assets["ids"]["target"] in card.text and repo_id in card.text
    assert "| BLEU-1 | 0.5 |" in card.text

    # 6. what was pushed: one commit with everything, and no token anywhere
    local = snapshot_download(pushed)
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokswap_config.json",
        "README.md",
        "alignment/alignment.safetensors",
        "alignment/alignment_config.json",
    ):
        assert os.path.isfile(os.path.join(local, name)), name
    from huggingface_hub import HfApi

    commits = HfApi().list_repo_commits(pushed)
    assert [c.title for c in commits][0] == "tiny swapped model" and len(commits) <= 2  # (+ the initial commit)
    assert _files_containing(local, hub_token) == []
    swapper.save_pretrained(tmp_path / "saved")
    assert _files_containing(tmp_path / "saved", hub_token) == []
    captured = capsys.readouterr()
    assert hub_token not in tokswap_logs.text and hub_token not in captured.out + captured.err


def test_offline_from_cache_and_unreachable_hub(assets, namespace, fresh_hf_cache, monkeypatch, tokswap_logs):
    import huggingface_hub.constants as hf_constants

    source, target = assets["source"], assets["target"]
    alignment = simple_alignment(source, target)
    repo_id = tokswap_hub.alignment_repo_id(source, target)
    if not tokswap_hub.load_alignment_index()["alignments"]:
        alignment.push_to_hub()

    # nothing cached + offline: quietly None, so the caller computes
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    started = time.perf_counter()
    assert tokswap_hub.find_prebuilt_alignment(source, target) is None
    assert time.perf_counter() - started < 10, "waited for huggingface_hub's retries"
    assert "No Hub reachable" in tokswap_logs.text

    # online once, then offline from the cache
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    assert tokswap_hub.find_prebuilt_alignment(source, target) is not None
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    found = tokswap_hub.find_prebuilt_alignment(source, target)
    assert found is not None and found.config["hub"]["repo_id"] == repo_id
    pinned = found.config["hub"]["revision"]
    assert TokenAlignment.from_pretrained(repo_id, revision=pinned).num_target_rows == len(target)
    # a branch name needs one online resolution first, then it is served from the cache too
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    TokenAlignment.from_pretrained(repo_id)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert TokenAlignment.from_pretrained(repo_id).num_target_rows == len(target)

    # a Hub that does not answer at all: the cache still serves what was downloaded before...
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv(tokswap_hub.ALIGNMENT_ENDPOINT_ENV, "http://127.0.0.1:9")
    started = time.perf_counter()
    assert tokswap_hub.find_prebuilt_alignment(source, target) is not None
    assert time.perf_counter() - started < 10, "waited for huggingface_hub's retries"
    # ...and without a cache it is None, quickly, with no traceback
    import shutil

    for child in list(fresh_hf_cache.iterdir()):
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    started = time.perf_counter()
    assert tokswap_hub.find_prebuilt_alignment(source, target) is None
    assert time.perf_counter() - started < 10, "waited for huggingface_hub's retries"


def test_mismatched_alignment_is_refused_or_recomputed(assets, namespace, tokswap_logs, monkeypatch):
    from tokswap.swapper import TokenizerSwapper

    source, target, other = assets["source"], assets["target"], assets["other"]
    wrong = simple_alignment(source, target)  # built for `target`...
    wrong_repo = tokswap_hub.alignment_repo_id(source, other)  # ...pushed where `other`'s alignment belongs
    wrong.push_to_hub(wrong_repo, update_index=False)

    with pytest.raises(AlignmentError) as excinfo:
        tokswap_hub.find_prebuilt_alignment(source, other)
    message = str(excinfo.value)
    assert wrong_repo in message and "target tokenizer" in message and "on_mismatch='compute'" in message

    assert tokswap_hub.find_prebuilt_alignment(source, other, on_mismatch="compute") is None
    assert "Computing a fresh alignment instead" in tokswap_logs.text

    # through the swapper the refusal surfaces as the same clear error, before anything is computed
    _no_recompute(monkeypatch)
    with pytest.raises(AlignmentError, match="cannot be used"):
        TokenizerSwapper.from_pretrained(assets["ids"]["model"], assets["ids"]["other"])


def test_tampered_alignment_is_refused(assets, namespace, hub_api, hub_token):
    from huggingface_hub import hf_hub_download

    source, target = assets["source"], assets["target"]
    repo_id = f"{namespace}/tampered-example"
    info = simple_alignment(source, target).push_to_hub(repo_id, update_index=False)

    # someone replaces the arrays outside tokswap (new commit on main, card untouched)
    path = hf_hub_download(repo_id, "alignment.safetensors")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(path)
    tensors["target_to_source"] = np.roll(tensors["target_to_source"], 1)
    forged = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "forged.safetensors")
    save_file(tensors, forged, metadata={"format": "np"})
    hub_api.upload_file(path_or_fileobj=forged, path_in_repo="alignment.safetensors", repo_id=repo_id)

    with pytest.raises(AlignmentError, match="changed outside tokswap"):
        TokenAlignment.from_pretrained(repo_id)
    # the revision tokswap pushed is still fine (that is what the index pins)
    assert TokenAlignment.from_pretrained(repo_id, revision=info.oid).num_target_rows == len(target)

    # an index entry whose checksum does not match what it points to is refused as well
    index_repo = tokswap_hub.alignment_index_repo_id()
    tokswap_hub.update_alignment_index(
        {
            "repo_id": repo_id,
            "revision": "main",
            "alignment_sha256": "0" * 64,
            "source_tokenizer": tokenizer_fingerprint(source),
            "target_tokenizer": tokenizer_fingerprint(target),
        }
    )
    with pytest.raises(AlignmentError, match="tampered"):
        tokswap_hub.find_prebuilt_alignment(source, target)
    assert tokswap_hub.find_prebuilt_alignment(source, target, on_mismatch="compute") is None
    assert hub_api.list_repo_files(index_repo) == [
        ".gitattributes",
        "index.json",
    ] or "index.json" in hub_api.list_repo_files(index_repo)
    # repair, for the other tests
    simple_alignment(source, target).push_to_hub()


def test_private_alignment_without_token_is_the_hubs_error(assets, namespace, hub_user, fresh_hf_cache):
    from huggingface_hub.errors import RepositoryNotFoundError

    source, target = assets["source"], assets["target"]
    repo_id = f"{hub_user}/private-alignment"
    simple_alignment(source, target).push_to_hub(repo_id, private=True, update_index=False)
    with pytest.raises(RepositoryNotFoundError) as excinfo:
        TokenAlignment.from_pretrained(repo_id, token=False)
    assert excinfo.traceback[-1].path.as_posix().split("/site-packages/")[-1].startswith("huggingface_hub/")
    assert TokenAlignment.from_pretrained(repo_id).num_target_rows == len(target)  # with the token: fine


def test_alignments_on_another_host_get_no_hub_token_end_to_end(
    assets, namespace, hub_token, fresh_hf_cache, monkeypatch
):
    """Push to, and find on, a $TOKSWAP_ALIGNMENT_ENDPOINT on another port: HF_TOKEN never reaches it."""
    from tokswap.testing import LoopbackHub
    from tokswap.testing.hub_server import HubRequestHandler

    seen = []
    authenticate = HubRequestHandler._authenticate

    def recording(self):
        seen.append((self.server.server_address[1], self.headers.get("Authorization")))
        return authenticate(self)

    monkeypatch.setattr(HubRequestHandler, "_authenticate", recording)
    monkeypatch.delenv(tokswap_hub.ALIGNMENT_TOKEN_ENV, raising=False)
    source, target = assets["source"], assets["target"]
    assert os.environ.get("HF_TOKEN") == hub_token  # what huggingface_hub would send by default
    with LoopbackHub(tokens={"mirror-token": "mirror-bot"}) as mirror:
        monkeypatch.setenv(tokswap_hub.ALIGNMENT_ENDPOINT_ENV, mirror.endpoint)

        def mirror_auth():
            return [auth for port, auth in seen if port == mirror.port]

        # a push without a token for that host is refused before any request, naming the fix
        with pytest.raises(tokswap_hub.HubPushError, match=tokswap_hub.ALIGNMENT_TOKEN_ENV):
            tokswap_hub.push_alignment(simple_alignment(source, target))
        assert mirror_auth() == []
        monkeypatch.setenv(tokswap_hub.ALIGNMENT_TOKEN_ENV, "mirror-token")
        tokswap_hub.push_alignment(simple_alignment(source, target))
        assert "Bearer mirror-token" in mirror_auth()
        assert set(mirror_auth()) <= {"Bearer mirror-token", None}  # LFS uploads carry no header at all

        # reading needs no token: the index and the alignment come without any Authorization header
        monkeypatch.delenv(tokswap_hub.ALIGNMENT_TOKEN_ENV)
        seen.clear()
        found = tokswap_hub.find_prebuilt_alignment(source, target)
        assert found is not None and found.config["hub"]["found_by"].startswith("listed in")
        assert mirror_auth() and set(mirror_auth()) == {None}
    assert not any(auth and hub_token in auth for _, auth in seen)


def test_push_refuses_a_folder_holding_the_token(assets, namespace, hub_token, hub_user, tmp_path):
    alignment = simple_alignment(assets["source"], assets["target"])
    alignment.config["notes"] = f"pushed with {hub_token}"  # a user put the token somewhere it does not belong
    with pytest.raises(tokswap_hub.HubPushError) as excinfo:
        alignment.push_to_hub(f"{hub_user}/leaky", update_index=False)
    assert hub_token not in str(excinfo.value) and "alignment_config.json" in str(excinfo.value)


def test_cli_push_model_and_alignment(assets, namespace, hub_user, hub_api, tmp_path, monkeypatch, capsys):
    from huggingface_hub import ModelCard

    from tokswap.cli import main
    from tokswap.swapper import TokenizerSwapper

    _no_recompute(monkeypatch)
    alignment = simple_alignment(assets["source"], assets["target"])
    swapper = TokenizerSwapper.from_pretrained(assets["ids"]["model"], assets["ids"]["target"], alignment=alignment)
    folder = swapper.save_pretrained(tmp_path / "swapped")
    # what `tokswap train --output` leaves beside the final model: none of it goes up
    for leftover in ("stage1/checkpoint-2/optimizer.pt", "checkpoint-3/optimizer.pt", "runs/events.out"):
        (folder / leftover).parent.mkdir(parents=True, exist_ok=True)
        (folder / leftover).write_bytes(b"optimizer state")
    (folder / "tokswap_run.json").write_text("{}")

    assert main(["push", str(folder), f"{hub_user}/cli-model", "--private"]) == 0
    assert hub_api.model_info(f"{hub_user}/cli-model").private
    pushed = hub_api.list_repo_files(f"{hub_user}/cli-model")
    assert "model.safetensors" in pushed and "tokswap_config.json" in pushed
    assert not [name for name in pushed if name.split("/")[0] in ("stage1", "checkpoint-3", "runs", "tokswap_run.json")]
    assert ModelCard.load(f"{hub_user}/cli-model").data.base_model == assets["ids"]["model"]

    assert main(["push", str(folder), f"{namespace}/cli-alignment", "--alignment-only", "--no-index"]) == 0
    assert TokenAlignment.from_pretrained(f"{namespace}/cli-alignment").num_target_rows == alignment.num_target_rows
    # a bare name goes to the alignment namespace
    assert TokenAlignment.from_pretrained("cli-alignment").num_target_rows == alignment.num_target_rows

    (tmp_path / "empty").mkdir()
    assert main(["push", str(tmp_path / "empty"), f"{hub_user}/nothing"]) == 2
    assert "not a saved model" in capsys.readouterr().err


def test_push_to_a_branch_and_load_that_revision(assets, namespace, hub_api):
    source, target = assets["source"], assets["target"]
    repo_id = f"{namespace}/branch-example"
    first = simple_alignment(source, target)
    first.push_to_hub(repo_id, update_index=False)
    second = simple_alignment(source, target)
    second.target_to_source = np.roll(second.target_to_source, 3)
    info = second.push_to_hub(repo_id, revision="v2", update_index=False, commit_message="second version")
    assert "v2" in [branch.name for branch in hub_api.list_repo_refs(repo_id).branches]
    np.testing.assert_array_equal(
        TokenAlignment.from_pretrained(repo_id, revision="v2").target_to_source, second.target_to_source
    )
    np.testing.assert_array_equal(TokenAlignment.from_pretrained(repo_id).target_to_source, first.target_to_source)
    assert hub_api.list_repo_commits(repo_id, revision="v2")[0].commit_id == info.oid


def test_local_paths_are_not_published(assets, namespace, hub_user):
    from huggingface_hub import hf_hub_download

    alignment = simple_alignment(assets["source"], assets["target"])
    alignment.config["source_tokenizer"]["name_or_path"] = "/home/alice/private/tokenizers/my-tok"
    repo_id = f"{hub_user}/paths-example"
    alignment.push_to_hub(repo_id, update_index=False)
    config = json.loads(open(hf_hub_download(repo_id, "alignment_config.json"), encoding="utf-8").read())
    assert config["source_tokenizer"]["name_or_path"] == "my-tok"
    card = open(hf_hub_download(repo_id, "README.md"), encoding="utf-8").read()
    assert "/home/alice" not in card and "my-tok" in card
    # the local object is untouched
    assert alignment.config["source_tokenizer"]["name_or_path"] == "/home/alice/private/tokenizers/my-tok"


# ---------------------------------------------------------------------------------------- integrity (no card needed)
def _forge_weights(path, out, edit):
    """A copy of the alignment file at `path` with `edit(target_to_source)` applied, written to `out`."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(path))
    tensors["target_to_source"] = edit(tensors["target_to_source"].copy())
    save_file(tensors, str(out), metadata={"format": "np"})
    return out


def _one_id_changed(ids):
    ids[7] = ids[7] + 1
    return ids


def _all_zero(ids):
    return np.zeros_like(ids)


def test_saved_alignment_records_checksums(assets, tmp_path):
    from tokswap.alignment import INTEGRITY_KEY, config_digest
    from tokswap.utils import sha256_file

    folder = simple_alignment(assets["source"], assets["target"]).save_pretrained(tmp_path / "al")
    config = json.loads((folder / "alignment_config.json").read_text())
    record = config[INTEGRITY_KEY]
    assert record["weights_sha256"] == sha256_file(folder / "alignment.safetensors")
    assert record["config_sha256"] == config_digest(config)
    assert config["source_tokenizer"]["vocab_hash"] and config["target_tokenizer"]["vocab_hash"]
    loaded = TokenAlignment.from_pretrained(folder)
    # saving a loaded alignment again records fresh checksums that verify
    again = loaded.save_pretrained(tmp_path / "again")
    assert TokenAlignment.from_pretrained(again).num_target_rows == loaded.num_target_rows


@pytest.mark.parametrize("edit", ["one-id", "all-zero", "config", "old-format", "no-vocab-hash", "swapped"])
def test_edited_local_alignment_is_refused_unless_trusted(assets, tmp_path, tokswap_logs, edit):
    from tokswap.alignment import INTEGRITY_KEY, UnverifiedAlignmentError, config_digest

    folder = simple_alignment(assets["source"], assets["target"]).save_pretrained(tmp_path / "al")
    weights, config_file = folder / "alignment.safetensors", folder / "alignment_config.json"
    config = json.loads(config_file.read_text())
    expected = {
        "one-id": "changed outside tokswap",
        "all-zero": "changed outside tokswap",
        "config": "was edited",
        "old-format": "records no checksums",
        "no-vocab-hash": "no source tokenizer vocabulary hash",
        "swapped": "changed outside tokswap",
    }[edit]
    if edit in ("one-id", "all-zero"):
        _forge_weights(weights, tmp_path / "forged.safetensors", _one_id_changed if edit == "one-id" else _all_zero)
        os.replace(tmp_path / "forged.safetensors", weights)
    elif edit == "config":
        config["target_tokenizer"]["vocab_hash"] = "0" * 64  # e.g. relabelled for another tokenizer
        config_file.write_text(json.dumps(config, indent=2))
    elif edit == "old-format":
        del config[INTEGRITY_KEY]  # what tokswap wrote before checksums
        config_file.write_text(json.dumps(config, indent=2))
    elif edit == "no-vocab-hash":  # consistent checksums, but nothing to check the tokenizers against
        del config["source_tokenizer"]["vocab_hash"]
        config[INTEGRITY_KEY]["config_sha256"] = config_digest(config)
        config_file.write_text(json.dumps(config, indent=2))
    else:  # the weights of another alignment folder (another tokenizer pair) beside this config
        other = simple_alignment(assets["source"], assets["other"]).save_pretrained(tmp_path / "other")
        os.replace(other / "alignment.safetensors", weights)
    with pytest.raises(UnverifiedAlignmentError) as excinfo:
        TokenAlignment.from_pretrained(folder)
    message = str(excinfo.value)
    assert expected in message and "trust_unverified=True" in message and "tokswap align" in message
    assert isinstance(excinfo.value, AlignmentError)
    if edit == "swapped":  # trusting the files does not make arrays of another size fit this config
        with pytest.raises(AlignmentError, match="disagree on the number of target rows"):
            TokenAlignment.from_pretrained(folder, trust_unverified=True)
    else:
        assert TokenAlignment.from_pretrained(folder, trust_unverified=True).num_target_rows > 0  # explicit opt-in
    assert "Using it anyway (trust_unverified=True)" in tokswap_logs.text


def _tamper_on_hub(hub_api, repo_id, tmp_path, edit=_one_id_changed):
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(repo_id, "alignment.safetensors")
    forged = _forge_weights(path, tmp_path / "forged.safetensors", edit)
    hub_api.upload_file(path_or_fileobj=str(forged), path_in_repo="alignment.safetensors", repo_id=repo_id)


def test_hub_alignment_without_card_is_still_checked(assets, namespace, hub_api, tmp_path):
    from tokswap.alignment import UnverifiedAlignmentError

    repo_id = f"{namespace}/no-card"
    simple_alignment(assets["source"], assets["target"]).push_to_hub(repo_id, update_index=False)
    hub_api.delete_file("README.md", repo_id=repo_id)
    assert TokenAlignment.from_pretrained(repo_id).num_target_rows == len(assets["target"])  # intact: fine
    _tamper_on_hub(hub_api, repo_id, tmp_path, _all_zero)
    with pytest.raises(UnverifiedAlignmentError, match="changed outside tokswap"):
        TokenAlignment.from_pretrained(repo_id)
    assert TokenAlignment.from_pretrained(repo_id, trust_unverified=True).target_to_source.max() == 0


def test_hub_alignment_with_broken_card_is_still_checked(assets, namespace, hub_api, tmp_path, tokswap_logs):
    from tokswap.alignment import UnverifiedAlignmentError

    repo_id = f"{namespace}/broken-card"
    simple_alignment(assets["source"], assets["target"]).push_to_hub(repo_id, update_index=False)
    # the Hub refuses to store a card with broken YAML, so break the copy huggingface_hub cached
    from huggingface_hub import hf_hub_download

    card = os.path.realpath(hf_hub_download(repo_id, "README.md"))
    with open(card, "w", encoding="utf-8") as handle:
        handle.write("---\ntokswap: [unclosed\n  : :\n---\n")
    _tamper_on_hub(hub_api, repo_id, tmp_path)
    with pytest.raises(UnverifiedAlignmentError, match="changed outside tokswap"):
        TokenAlignment.from_pretrained(repo_id)
    assert "Could not read the card" in tokswap_logs.text


def test_files_swapped_between_hub_repos_are_refused(assets, namespace, hub_api, tmp_path):
    from huggingface_hub import hf_hub_download

    from tokswap.alignment import UnverifiedAlignmentError

    first, second = f"{namespace}/swap-first", f"{namespace}/swap-second"
    simple_alignment(assets["source"], assets["target"]).push_to_hub(first, update_index=False)
    simple_alignment(assets["source"], assets["other"]).push_to_hub(second, update_index=False)
    hub_api.delete_file("README.md", repo_id=second)  # no card to catch it
    weights = hf_hub_download(first, "alignment.safetensors")
    hub_api.upload_file(path_or_fileobj=weights, path_in_repo="alignment.safetensors", repo_id=second)
    with pytest.raises(UnverifiedAlignmentError, match="taken from another alignment"):
        TokenAlignment.from_pretrained(second)
    # the config of one beside the weights of the other, the other way round
    config = hf_hub_download(second, "alignment_config.json")
    hub_api.delete_file("README.md", repo_id=first)
    hub_api.upload_file(path_or_fileobj=config, path_in_repo="alignment_config.json", repo_id=first)
    with pytest.raises(UnverifiedAlignmentError):
        TokenAlignment.from_pretrained(first)


def test_index_pins_the_config_checksum(assets, namespace, hub_api, hub_user):
    source, target = assets["source"], assets["target"]
    simple_alignment(source, target).push_to_hub()
    entry = tokswap_hub.load_alignment_index()["alignments"][
        tokswap_hub.pair_key(tokenizer_fingerprint(source)["vocab_hash"], tokenizer_fingerprint(target)["vocab_hash"])
    ]
    assert len(entry["config_sha256"]) == 64 and len(entry["alignment_sha256"]) == 64
    # an index entry pinning another config checksum than the one the repo holds is refused
    tokswap_hub.update_alignment_index({**entry, "config_sha256": "1" * 64})
    with pytest.raises(AlignmentError, match="alignment_config.json in .*tampered"):
        tokswap_hub.find_prebuilt_alignment(source, target)
    simple_alignment(source, target).push_to_hub()  # repair, for the other tests
    assert tokswap_hub.find_prebuilt_alignment(source, target) is not None


def test_cli_refuses_an_unverified_alignment_in_one_line(assets, namespace, tmp_path, capsys):
    from tokswap.alignment import INTEGRITY_KEY
    from tokswap.cli import main

    folder = simple_alignment(assets["source"], assets["target"]).save_pretrained(tmp_path / "al")
    config = json.loads((folder / "alignment_config.json").read_text())
    del config[INTEGRITY_KEY]
    (folder / "alignment_config.json").write_text(json.dumps(config))
    repo_id = f"{namespace}/cli-unverified"
    assert main(["push", str(folder), repo_id, "--alignment-only", "--no-index"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-unverified" in err and "Traceback" not in err
    assert main(["push", str(folder), repo_id, "--alignment-only", "--no-index", "--trust-unverified"]) == 0
    # what was pushed was re-saved with fresh checksums: it loads without the flag
    assert TokenAlignment.from_pretrained(repo_id).num_target_rows == len(assets["target"])
    swap = ["swap", assets["ids"]["model"], assets["ids"]["target"], "--alignment", str(folder)]
    assert main(swap + ["--output", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "records no checksums" in err and "--trust-unverified" in err
    assert not (tmp_path / "refused").exists()
    assert main(swap + ["--output", str(tmp_path / "swapped"), "--trust-unverified"]) == 0
    assert TokenAlignment.from_pretrained(tmp_path / "swapped" / "alignment").num_target_rows >= len(assets["target"])
