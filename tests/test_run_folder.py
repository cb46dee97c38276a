"""Output folders: training never writes into a folder tokswap did not write, and no run starts toward an output
it could never create."""

import json
import os
import sys

import pytest

from tokswap.utils import (
    OutputExistsError,
    OutputNotWritableError,
    check_can_create,
    check_output_dir,
    check_output_file,
    check_run_dir,
    claim_run_dir,
)


def test_a_new_or_empty_folder_is_claimed_and_marked(tmp_path):
    new = tmp_path / "a" / "b" / "run"
    check_run_dir(new)
    assert not (tmp_path / "a").exists()  # checking writes nothing
    claim_run_dir(new, "adapt_vocabulary")
    marker = json.loads((new / "tokswap_run.json").read_text())
    assert marker["written_by"] == "tokswap" and marker["kind"] == "adapt_vocabulary"
    assert sorted(os.listdir(new)) == ["tokswap_run.json"]
    (tmp_path / "empty").mkdir()
    claim_run_dir(tmp_path / "empty", "distill")
    assert (tmp_path / "empty" / "tokswap_run.json").is_file()


def test_an_earlier_run_is_accepted_and_its_marker_kept(tmp_path):
    run = tmp_path / "run"
    claim_run_dir(run, "adapt_vocabulary")
    (run / "stage1").mkdir()
    before = (run / "tokswap_run.json").read_bytes()
    claim_run_dir(run, "TokenDistillationTrainer")  # run again into its own folder
    assert (run / "tokswap_run.json").read_bytes() == before


@pytest.mark.parametrize("resume", [None, False, "", "false"])
def test_a_folder_tokswap_did_not_write_is_refused_and_left_alone(tmp_path, resume):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(OutputExistsError, match="not a tokswap run"):
        claim_run_dir(theirs, "adapt_vocabulary", resume)
    assert os.listdir(theirs) == ["model.safetensors"]


@pytest.mark.parametrize("resume", [True, "true", "checkpoint-5"])
def test_resuming_a_run_found_in_a_folder_is_allowed(tmp_path, resume):
    earlier = tmp_path / "hf-run"
    (earlier / "checkpoint-5").mkdir(parents=True)
    claim_run_dir(earlier, "TokenDistillationTrainer", resume)
    assert (earlier / "tokswap_run.json").is_file()


def test_files_and_links_are_not_run_folders(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError, match="existing file"):
        check_run_dir(tmp_path / "notes.txt")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OutputExistsError, match="symbolic link"):
        check_run_dir(tmp_path / "link")


def test_an_output_under_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    for check in (check_can_create, check_output_dir, check_run_dir):
        with pytest.raises(OutputNotWritableError, match="notes.txt is a file"):
            check(tmp_path / "notes.txt" / "sub" / "out")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc refuses new entries only on Linux")
def test_a_place_that_refuses_new_entries_is_refused_even_for_root():
    """Permission bits would not show it (root may write anywhere they allow): the probe does."""
    with pytest.raises(OutputNotWritableError, match="Cannot create /proc/tokswap-out"):
        check_output_dir("/proc/tokswap-out")
    with pytest.raises(OutputNotWritableError, match="Choose an output folder you can write to"):
        check_run_dir("/proc/tokswap-run")


def test_the_probe_leaves_nothing_behind(tmp_path):
    check_can_create(tmp_path / "out")
    check_output_dir(tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_an_output_file_is_written_over_only_when_it_is_an_earlier_result(tmp_path):
    from tokswap.cli.eval import _is_eval_result

    earlier = tmp_path / "eval.json"
    earlier.write_text(json.dumps({"model": "m", "tokenizer": "m", "bpb": {}}))
    check_output_file(earlier, _is_eval_result, "a tokswap eval result")
    check_output_file(tmp_path / "new.json", _is_eval_result, "a tokswap eval result")
    for content in ("notes", json.dumps(["model", "tokenizer"]), json.dumps({"model": "m"})):
        (tmp_path / "other.json").write_text(content)
        with pytest.raises(OutputExistsError, match="other.json exists and is not a tokswap eval result"):
            check_output_file(tmp_path / "other.json", _is_eval_result, "a tokswap eval result")


def test_a_resume_with_nothing_to_resume_leaves_a_foreign_folder_unmarked(tmp_path):
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from tokswap.errors import TrainingError
    from tokswap.trainer_utils import train_single_stage

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(theirs), resume_from_checkpoint=True))
    with pytest.raises(TrainingError, match="resume"):
        train_single_stage(trainer, TrainingError)
    assert os.listdir(theirs) == ["notes.txt"]
