"""`tokswap.loading`: every way of naming a model or tokenizer resolves the same way everywhere."""

import pytest

from tokswap.loading import LoadingError, load_model, load_tokenizer, model_tokenizer, resolve
from tokswap.offline import assets
from tokswap.utils import MissingPathError


def test_a_hub_id_resolves_to_itself_without_touching_assets():
    location = resolve("Qwen/Qwen2.5-0.5B")
    assert (location.path, location.kwargs, location.asset) == ("Qwen/Qwen2.5-0.5B", {}, None)


def test_asset_names_resolve_to_their_folders():
    assert resolve("qwen2.5").path == str(assets.tokenizer_path("qwen2.5"))
    assert resolve("pythia").asset == "pythia"  # aliases too
    model = resolve("smollm2-135m")
    assert model.path == str(assets.model_path("smollm2-135m")) and model.asset == "smollm2-135m"


def test_a_gguf_file_resolves_to_its_folder_and_gguf_file(tmp_path):
    gguf = tmp_path / "model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    location = resolve(gguf)
    assert (location.path, location.kwargs) == (str(tmp_path), {"gguf_file": "model.Q4.gguf"})
    assert resolve(tmp_path).kwargs == {"gguf_file": "model.Q4.gguf"}  # a folder holding only a GGUF


def test_a_missing_local_path_is_one_clear_error(tmp_path):
    with pytest.raises(MissingPathError, match="does not exist"):
        resolve(tmp_path / "nope")


def test_a_model_name_gives_its_tokenizer():
    """The model asset's name gives the tokenizer saved with the model, like a Hub model id does."""
    from_model = load_tokenizer("smollm2-135m")
    from_tokenizer_asset = load_tokenizer("smollm2")
    assert from_model.get_vocab() == from_tokenizer_asset.get_vocab()
    assert model_tokenizer("smollm2-135m").get_vocab() == from_model.get_vocab()


def test_a_bare_tokenizer_json_and_objects(tmp_path):
    tokenizer = load_tokenizer("gpt-neox")
    assert load_tokenizer(tokenizer) is tokenizer  # objects pass through
    tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert load_tokenizer(tmp_path / "tokenizer.json").get_vocab() == tokenizer.get_vocab()


def test_a_folder_without_a_tokenizer_says_how_to_fix_it(tmp_path):
    with pytest.raises(LoadingError, match="pass a tokenizer explicitly"):
        model_tokenizer(tmp_path)


@pytest.mark.slow  # loads the real 135M model twice
def test_swap_a_model_onto_its_own_asset_name():
    """`from_pretrained("smollm2-135m", "smollm2-135m")`: the asset names of a model work as a Hub id would."""
    import torch

    from tokswap import TokenizerSwapper

    swapper = TokenizerSwapper.from_pretrained("smollm2-135m", "smollm2-135m", dtype=torch.float32)
    assert swapper.swap_record["alignment"]["origin"] == "identity"
    original = load_model("smollm2-135m", dtype=torch.float32)
    assert torch.equal(swapper.model.get_input_embeddings().weight, original.get_input_embeddings().weight)


def test_a_name_that_is_both_kinds_loads_the_tokenizer_asset_as_a_tokenizer():
    """`smollm2` names a tokenizer asset and (as an alias) a model asset: a tokenizer load takes the tokenizer asset,
    so it never needs the model, and its fingerprint names the tokenizer folder."""
    assert resolve("smollm2", prefer="tokenizer").path == str(assets.tokenizer_path("smollm2"))
    assert resolve("smollm2").path == str(assets.model_path("smollm2"))
    assert load_tokenizer("smollm2").name_or_path == str(assets.tokenizer_path("smollm2"))


@pytest.mark.usefixtures("hub")
def test_a_hub_id_that_loads_nothing_is_a_loading_error_and_still_an_oserror():
    for load, what in ((load_model, "a model"), (load_tokenizer, "a tokenizer")):
        with pytest.raises(LoadingError, match=f"Could not load {what} from 'nobody/nothing-here'") as caught:
            load("nobody/nothing-here")
        assert isinstance(caught.value, OSError)  # callers that catch from_pretrained's OSError still do
