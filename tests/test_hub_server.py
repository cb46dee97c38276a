"""The loopback Hub, exercised over HTTP by the real huggingface_hub / transformers / datasets clients."""

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import warnings

import pytest

from tokswap.testing import LoopbackHub, hub_client_env

hf = pytest.importorskip("huggingface_hub")
from conftest import tiny_llama
from huggingface_hub import (  # noqa: E402
    CommitOperationAdd,
    CommitOperationDelete,
    ModelCard,
    ModelCardData,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

# httpx2 warns about `data=<file>` on LFS PUTs made by huggingface_hub itself.
pytestmark = [pytest.mark.usefixtures("hub"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _tiny_tokenizer():
    """A 160-token byte-level BPE tokenizer trained in memory (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ["The quick brown fox jumps over the lazy dog.", "Hello world, hello tokenizers!"] * 20
    backend.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _tiny_llama(vocab_size: int):

    return tiny_llama(vocab_size, hidden=16, heads=2, kv_heads=1, max_positions=64)


def _get(url: str, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


# --------------------------------------------------------------------------- models and tokenizers
def test_push_model_and_tokenizer_then_load_back(hub, hub_api, new_repo_id, fresh_hf_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = _tiny_tokenizer()
    model = _tiny_llama(len(tokenizer))
    repo_id = new_repo_id("tiny-llama")
    hub_api.create_repo(repo_id)
    model.push_to_hub(repo_id)
    tokenizer.push_to_hub(repo_id)

    files = set(hub_api.list_repo_files(repo_id))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    siblings = {s.rfilename: s for s in hub_api.model_info(repo_id, files_metadata=True).siblings}
    assert siblings["model.safetensors"].lfs is not None  # weights went through the LFS upload
    assert siblings["config.json"].lfs is None

    loaded = AutoModelForCausalLM.from_pretrained(repo_id)
    loaded_tokenizer = AutoTokenizer.from_pretrained(repo_id)
    expected = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    text = "Hello world, the lazy fox!"
    assert loaded_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded_tokenizer.eos_token == "</s>"
    # The downloads landed in the per-test cache.
    assert any(fresh_hf_cache.glob("models--*tiny-llama*/snapshots/*/model.safetensors"))


def test_real_tokenizer_published_and_pushed(hub_asset, new_repo_id, fresh_hf_cache):
    from transformers import AutoTokenizer

    repo_id = hub_asset("gpt-neox")  # the GPT-NeoX tokenizer of tokswap.offline.assets, under its Hub id
    original = AutoTokenizer.from_pretrained(repo_id)
    assert original("Hello world", add_special_tokens=False)["input_ids"] == [12092, 1533]

    pushed = new_repo_id("gpt-neox-tokenizer")
    original.push_to_hub(pushed)
    loaded = AutoTokenizer.from_pretrained(pushed)
    text = "Hello world, déjà vu: 你好"
    assert loaded(text)["input_ids"] == original(text)["input_ids"]
    assert len(loaded) == len(original)


def test_seeded_folder_is_served_like_a_hub_repo(hub, fresh_hf_cache, tmp_path):
    from transformers import AutoModelForCausalLM

    model = _tiny_llama(64)
    folder = tmp_path / "seed"
    model.save_pretrained(folder)
    sha = hub.seed_folder("SeedOrg/tiny-seeded", folder, commit_message="seed it")
    assert hub.seed_folder("SeedOrg/tiny-seeded", folder) == sha  # same content: no new commit

    path = hf_hub_download("SeedOrg/tiny-seeded", "config.json")
    assert json.loads(open(path).read())["vocab_size"] == 64
    assert f"/snapshots/{sha}/" in path
    loaded = AutoModelForCausalLM.from_pretrained("SeedOrg/tiny-seeded")
    assert loaded.config.hidden_size == 16


def test_upload_folder_commit_operations_and_no_op_commit(hub_api, new_repo_id, tmp_path):
    repo_id = new_repo_id("ops")
    hub_api.create_repo(repo_id)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "sub" / "b.txt").write_text("beta")
    (tmp_path / "sub" / "c.bin").write_bytes(bytes(range(256)) * 8)  # binary -> LFS
    first = hub_api.upload_folder(repo_id=repo_id, folder_path=tmp_path)

    tree = {item.path: item for item in hub_api.list_repo_tree(repo_id, recursive=True)}
    assert set(tree) == {".gitattributes", "a.txt", "sub", "sub/b.txt", "sub/c.bin"}
    assert tree["sub/c.bin"].lfs is not None and tree["sub/c.bin"].size == 2048
    assert [i.path for i in hub_api.list_repo_tree(repo_id, path_in_repo="sub")] == ["sub/b.txt", "sub/c.bin"]
    infos = hub_api.get_paths_info(repo_id, ["a.txt", "sub", "missing.txt"])
    assert sorted(i.path for i in infos) == ["a.txt", "sub"]

    # Re-uploading identical files is a no-op, as on the Hub (preupload returns the remote oids).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = hub_api.upload_folder(repo_id=repo_id, folder_path=tmp_path)
    assert again.oid == first.oid

    hub_api.create_commit(
        repo_id,
        operations=[
            CommitOperationDelete("sub/"),
            CommitOperationAdd("new/d.txt", b"delta"),
        ],
        commit_message="reshuffle",
    )
    assert sorted(hub_api.list_repo_files(repo_id)) == [".gitattributes", "a.txt", "new/d.txt"]
    with pytest.raises(EntryNotFoundError):
        hub_api.delete_file("nothing-here.txt", repo_id)
    commits = hub_api.list_repo_commits(repo_id)
    assert [c.title for c in commits][:2] == ["reshuffle", "Upload folder using huggingface_hub"]
    assert commits[-1].title == "initial commit"


# --------------------------------------------------------------------------------------- datasets
def test_dataset_push_snapshot_and_load(hub_api, new_repo_id, fresh_hf_cache):
    from datasets import Dataset, load_dataset

    repo_id = new_repo_id("tiny-dataset")
    data = {"text": [f"line {i}" for i in range(50)], "label": list(range(50))}
    Dataset.from_dict(data).push_to_hub(repo_id)

    folder = snapshot_download(repo_id, repo_type="dataset")
    files = {os.path.relpath(os.path.join(root, f), folder) for root, _, names in os.walk(folder) for f in names}
    assert "README.md" in files
    assert any(f.startswith("data/train-") and f.endswith(".parquet") for f in files)
    info = hub_api.dataset_info(repo_id)
    assert info.card_data is not None and info.card_data.get("dataset_info") is not None

    loaded = load_dataset(repo_id, split="train")
    assert loaded.to_dict() == data
    assert any((fresh_hf_cache.parent / "datasets").iterdir())  # datasets wrote into the per-test cache


# ----------------------------------------------------------------------------------------- errors
def test_missing_repo_file_and_revision_raise_the_hub_exceptions(hub_api, new_repo_id):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    repo_id = new_repo_id("errors")
    hub_api.create_repo(repo_id)
    hub_api.upload_file(path_or_fileobj=b"hello", path_in_repo="present.txt", repo_id=repo_id)

    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("tokswap-tester/does-not-exist", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        hub_api.model_info("tokswap-tester/does-not-exist")
    with pytest.raises(RepositoryNotFoundError):
        hub_api.dataset_info(repo_id)  # exists as a model, not as a dataset
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(repo_id, "absent.txt")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo_id, "present.txt", revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        hub_api.list_repo_tree(repo_id, path_in_repo="no/such/folder").__iter__().__next__()
    with pytest.raises(OSError, match="does-not-exist"):
        AutoModelForCausalLM.from_pretrained("tokswap-tester/does-not-exist")
    with pytest.raises((OSError, ValueError)):  # transformers' own answer for a repo without tokenizer files
        AutoTokenizer.from_pretrained(repo_id)


def test_private_repo_needs_a_valid_token(hub, hub_api, hub_token, new_repo_id):
    from transformers import AutoConfig

    repo_id = new_repo_id("private")
    hub_api.create_repo(repo_id, private=True)
    hub_api.upload_file(path_or_fileobj=b'{"model_type": "llama"}', path_in_repo="config.json", repo_id=repo_id)
    assert hub_api.model_info(repo_id).private is True

    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(repo_id, "config.json", token=False)
    with pytest.raises(RepositoryNotFoundError):
        hub_api.model_info(repo_id, token=False)
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download(repo_id, token=False)
    with pytest.raises(OSError):
        AutoConfig.from_pretrained(repo_id, token=False)
    with pytest.raises(HfHubHTTPError) as invalid:
        hub_api.model_info(repo_id, token="hf_not_a_valid_token")
    assert invalid.value.response.status_code == 401
    assert hf_hub_download(repo_id, "config.json", token=hub_token)

    # Another user of the same server cannot see it when memberships are modelled.
    with LoopbackHub(tokens={"tok-a": "alice", "tok-b": "bob"}, orgs={}) as other:
        other.seed_files("alice/secret", {"x.txt": b"x"}, private=True)
        api = hf.HfApi(endpoint=other.endpoint)
        assert api.model_info("alice/secret", token="tok-a").private
        with pytest.raises(RepositoryNotFoundError):
            api.model_info("alice/secret", token="tok-b")
        with pytest.raises(HfHubHTTPError) as forbidden:
            api.create_repo("alice/intruder", token="tok-b")
        assert forbidden.value.response.status_code == 403


# -------------------------------------------------------------------------------------- revisions
def test_revisions_by_sha_tag_and_branch(hub_api, new_repo_id, fresh_hf_cache):
    repo_id = new_repo_id("revisions")
    hub_api.create_repo(repo_id)
    first = hub_api.upload_file(path_or_fileobj=b"version 1", path_in_repo="weights.txt", repo_id=repo_id)
    hub_api.create_tag(repo_id, tag="v1")
    hub_api.create_branch(repo_id, branch="stable")
    second = hub_api.upload_file(path_or_fileobj=b"version 2", path_in_repo="weights.txt", repo_id=repo_id)
    assert first.oid != second.oid

    def read(revision=None):
        with open(hf_hub_download(repo_id, "weights.txt", revision=revision), "rb") as handle:
            return handle.read()

    assert read() == b"version 2"
    assert read(first.oid) == b"version 1"
    assert read("v1") == b"version 1"
    assert read("stable") == b"version 1"
    snapshot = snapshot_download(repo_id, revision=first.oid)
    assert snapshot.endswith(first.oid)
    refs = hub_api.list_repo_refs(repo_id)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": second.oid, "stable": first.oid}
    assert [t.name for t in refs.tags] == ["v1"]
    assert hub_api.model_info(repo_id, revision="v1").sha == first.oid
    hub_api.upload_file(path_or_fileobj=b"branch only", path_in_repo="extra.txt", repo_id=repo_id, revision="stable")
    assert "extra.txt" in hub_api.list_repo_files(repo_id, revision="stable")
    assert "extra.txt" not in hub_api.list_repo_files(repo_id)
    hub_api.create_branch(repo_id, branch="release/v1", revision=first.oid)  # a slash travels URL-quoted
    assert read("release/v1") == b"version 1"
    with pytest.raises(RevisionNotFoundError):
        hub_api.list_repo_files(repo_id, revision="no-such-branch")


def test_offline_mode_reads_the_cache(hub_api, new_repo_id, fresh_hf_cache, tmp_path):
    repo_id = new_repo_id("offline")
    hub_api.create_repo(repo_id)
    hub_api.upload_file(path_or_fileobj=b"cached bytes", path_in_repo="file.txt", repo_id=repo_id)
    online_path = hf_hub_download(repo_id, "file.txt")
    snapshot_download(repo_id)

    script = textwrap.dedent(
        f"""
        from huggingface_hub import hf_hub_download, snapshot_download
        path = hf_hub_download({repo_id!r}, "file.txt")
        assert open(path, "rb").read() == b"cached bytes", path
        assert snapshot_download({repo_id!r}) == {os.path.dirname(online_path)!r}
        try:
            hf_hub_download({repo_id!r}, "never-downloaded.txt")
        except Exception as error:
            print("missing:", type(error).__name__)
        print("ok")
        """
    )
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(fresh_hf_cache), HF_ENDPOINT="http://127.0.0.1:9"
    )  # nothing listens there: any request would fail
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
    assert "missing: LocalEntryNotFoundError" in result.stdout


# ------------------------------------------------------------------------------ cards and metadata
def test_model_card_round_trip_and_yaml_validation(hub_api, new_repo_id):
    repo_id = new_repo_id("card")
    hub_api.create_repo(repo_id)
    data = ModelCardData(
        base_model="HuggingFaceTB/SmolLM2-135M",
        library_name="transformers",
        tags=["tokswap", "tokalign"],
        license="apache-2.0",
    )
    card = ModelCard.from_template(data, model_description="A model whose tokenizer was swapped.")
    card.push_to_hub(repo_id)

    loaded = ModelCard.load(repo_id)
    assert loaded.data.base_model == "HuggingFaceTB/SmolLM2-135M"
    assert set(loaded.data.tags) == {"tokswap", "tokalign"}
    info = hub_api.model_info(repo_id)
    assert info.card_data.license == "apache-2.0"
    assert "tokswap" in info.tags and info.library_name == "transformers"

    with pytest.raises(ValueError, match="Invalid metadata"):
        hub_api.upload_file(
            path_or_fileobj=b"---\nkey: [unclosed\n---\nbody\n", path_in_repo="README.md", repo_id=repo_id
        )


def test_whoami_and_create_repo_conflicts(hub_api, hub_user, new_repo_id):
    assert hub_api.whoami()["name"] == hub_user
    repo_id = new_repo_id("conflict")
    url = hub_api.create_repo(repo_id, repo_type="dataset")
    assert url.repo_id == repo_id and url.repo_type == "dataset"
    assert hub_api.create_repo(repo_id, repo_type="dataset", exist_ok=True).repo_id == repo_id
    with pytest.raises(HfHubHTTPError) as conflict:
        hub_api.create_repo(repo_id, repo_type="dataset")
    assert conflict.value.response.status_code == 409
    assert [d.id for d in hub_api.list_datasets(author=hub_user, search=repo_id.split("/")[1])] == [repo_id]
    assert repo_id not in [m.id for m in hub_api.list_models(author=hub_user)]
    hub_api.delete_repo(repo_id, repo_type="dataset")
    with pytest.raises(RepositoryNotFoundError):
        hub_api.dataset_info(repo_id)


# ------------------------------------------------------------------------------------- raw HTTP
def test_resolve_headers_and_range_requests(hub, hub_api, new_repo_id):
    repo_id = new_repo_id("range")
    hub_api.create_repo(repo_id)
    payload = bytes(range(256)) * 40
    hub_api.upload_file(path_or_fileobj=payload, path_in_repo="blob.bin", repo_id=repo_id)
    head_sha = hub_api.model_info(repo_id).sha
    url = f"{hub.endpoint}/{repo_id}/resolve/main/blob.bin"

    status, headers, body = _get(url)
    assert status == 200 and body == payload
    assert headers["X-Repo-Commit"] == head_sha
    assert headers["X-Linked-Size"] == str(len(payload))
    status, headers, body = _get(url, {"Range": "bytes=100-199"})
    assert status == 206 and body == payload[100:200]
    assert headers["Content-Range"] == f"bytes 100-199/{len(payload)}"
    status, _, body = _get(url, {"Range": "bytes=10000-"})
    assert status == 206 and body == payload[10000:]

    status, headers, _ = _get(f"{hub.endpoint}/{repo_id}/resolve/main/nope.bin")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"
    status, headers, _ = _get(f"{hub.endpoint}/api/models/{repo_id}/revision/{'0' * 40}")
    assert status == 404 and headers["X-Error-Code"] == "RevisionNotFound"
    status, headers, _ = _get(f"{hub.endpoint}/api/models/nobody/nothing")
    assert status == 401 and headers["X-Error-Code"] == "RepoNotFound"  # anonymous caller

    # HfFileSystem reads byte ranges through the same route.
    fs = hf.HfFileSystem(endpoint=hub.endpoint)
    with fs.open(f"{repo_id}/blob.bin", "rb") as handle:
        handle.seek(5000)
        assert handle.read(300) == payload[5000:5300]


def test_tokens_never_reach_the_logs(hub, hub_api, hub_token, new_repo_id, caplog):
    caplog.set_level("DEBUG", logger="tokswap.testing.hub_server")
    repo_id = new_repo_id("quiet")
    hub_api.create_repo(repo_id)
    hub_api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    with pytest.raises(HfHubHTTPError):
        hub_api.whoami(token="hf_wrong_token_value")
    assert caplog.records, "the server logs requests at DEBUG level"
    assert hub_token not in caplog.text and "hf_wrong_token_value" not in caplog.text
    assert hub_token not in repr(hub)


# ----------------------------------------------------------------------------- standalone server
def test_standalone_server_persists_its_storage(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "config.json").write_text('{"model_type": "llama"}')
    storage = tmp_path / "storage"

    def serve(*extra):
        process = subprocess.Popen(
            [sys.executable, "-m", "tokswap.testing.hub_server", "--port", "0", "--storage", str(storage), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, HF_TOKEN="tok-cli"),
        )
        line = process.stdout.readline()
        assert line.startswith("Serving the Hub protocol on "), line + process.stderr.read()
        return process, line.split(" on ")[1].split()[0]

    process, endpoint = serve("--seed", f"CliOrg/seeded={seed}")
    try:
        status, _, body = _get(f"{endpoint}/api/models/CliOrg/seeded")
        assert status == 200 and "config.json" in {s["rfilename"] for s in json.loads(body)["siblings"]}
        status, _, body = _get(f"{endpoint}/api/whoami-v2", {"Authorization": "Bearer tok-cli"})
        assert status == 200 and json.loads(body)["name"] == "tokswap-tester"
    finally:
        process.terminate()
        process.wait(timeout=10)

    process, endpoint = serve()  # restarted on the same storage: the repository is still there
    try:
        status, _, body = _get(f"{endpoint}/CliOrg/seeded/resolve/main/config.json")
        assert status == 200 and json.loads(body) == {"model_type": "llama"}
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_hub_client_env_points_every_client_at_the_endpoint(tmp_path):
    env = hub_client_env("http://127.0.0.1:1234/", tmp_path, token="tok")
    assert env["HF_ENDPOINT"] == "http://127.0.0.1:1234"
    assert env["HF_HUB_DISABLE_XET"] == "1" and env["HF_TOKEN"] == "tok"
    assert env["HF_HUB_CACHE"].startswith(str(tmp_path))
    assert "HF_TOKEN" not in hub_client_env("http://127.0.0.1:1234", tmp_path)


def test_raw_lfs_protocol_with_a_chunked_upload(hub, hub_api, hub_token, new_repo_id):
    """batch -> PUT (chunked body) -> NDJSON commit with an lfsFile -> resolve, without the client library."""
    import base64
    import hashlib
    import http.client

    repo_id = new_repo_id("raw-lfs")
    hub_api.create_repo(repo_id)
    content = os.urandom(70_000)
    oid = hashlib.sha256(content).hexdigest()
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    auth = {"Authorization": f"Bearer {hub_token}"}

    def call(method, path, body=None, headers=None, **kwargs):
        connection.request(method, path, body=body, headers={**auth, **(headers or {})}, **kwargs)
        response = connection.getresponse()
        return response.status, response.read()

    batch = {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(content)}]}
    status, body = call("POST", f"/{repo_id}.git/info/lfs/objects/batch", json.dumps(batch))
    assert status == 200
    href = json.loads(body)["objects"][0]["actions"]["upload"]["href"]
    pieces = (content[i : i + 8192] for i in range(0, len(content), 8192))
    status, _ = call(
        "PUT",
        href.split(str(hub.port), 1)[1],
        body=pieces,
        encode_chunked=True,
        headers={"Transfer-Encoding": "chunked"},
    )
    assert status == 200
    # Once stored, the batch answers without an upload action.
    status, body = call("POST", f"/{repo_id}.git/info/lfs/objects/batch", json.dumps(batch))
    assert "actions" not in json.loads(body)["objects"][0]

    lines = [
        {"key": "header", "value": {"summary": "raw commit", "description": ""}},
        {"key": "lfsFile", "value": {"path": "raw.bin", "algo": "sha256", "oid": oid, "size": len(content)}},
        {
            "key": "file",
            "value": {"path": "note.txt", "content": base64.b64encode(b"note").decode(), "encoding": "base64"},
        },
    ]
    ndjson = "".join(json.dumps(line) + "\n" for line in lines)
    status, body = call(
        "POST", f"/api/models/{repo_id}/commit/main", ndjson, headers={"Content-Type": "application/x-ndjson"}
    )
    assert status == 200, body
    commit_oid = json.loads(body)["commitOid"]
    status, body = call("GET", f"/{repo_id}/resolve/{commit_oid}/raw.bin")
    assert status == 200 and body == content
    # An LFS pointer to an object that was never uploaded is refused.
    missing = [lines[0], {"key": "lfsFile", "value": {"path": "ghost.bin", "algo": "sha256", "oid": "0" * 64}}]
    status, _ = call(
        "POST",
        f"/api/models/{repo_id}/commit/main",
        "".join(json.dumps(x) + "\n" for x in missing),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert status == 422
    traversal = [lines[0], {"key": "lfsFile", "value": {"path": "x.bin", "algo": "sha256", "oid": "../../repos"}}]
    status, _ = call(
        "POST",
        f"/api/models/{repo_id}/commit/main",
        "".join(json.dumps(x) + "\n" for x in traversal),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert status == 422
    connection.close()


def test_store_ids_and_upload_modes(tmp_path):
    from tokswap.testing.hub_store import LFS_SIZE_THRESHOLD, HubStore, git_blob_id

    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`
    store = HubStore(tmp_path)
    repo = store.create_repo("model", "org/modes")
    mode = lambda path, size, sample=b"text": store.upload_mode(repo, "main", path, size, sample)  # noqa: E731
    assert mode("config.json", 100) == "regular"
    assert mode("weights/model.safetensors", 100) == "lfs"  # default .gitattributes pattern
    assert mode("data.custom", 100, b"\x00\x01binary") == "lfs"  # binary sample
    assert mode("big.txt", LFS_SIZE_THRESHOLD) == "lfs"
    assert mode("utf8.txt", 100, "é".encode() * 3 + "é".encode()[:1]) == "regular"  # cut multi-byte char

    first = store.commit(repo, "main", {"a.txt": store.add_bytes(b"a")}, title="add a")
    reopened = HubStore(tmp_path).get_repo("model", "org/modes")  # persisted on disk
    assert reopened.resolve("main").id == first.id
    assert reopened.resolve(first.id[:10]).tree["a.txt"].git_oid == git_blob_id(b"a")
