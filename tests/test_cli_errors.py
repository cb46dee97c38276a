"""Bad input to any command: exit code 2, one line on stderr, no traceback, nothing written.

Every case must fail before a model is loaded (the table stays fast): paths are checked, options
range-checked and outputs inspected before anything big happens. Model and tokenizer arguments that
should get past the checks are tokswap asset names or empty folders, which are never loaded here.
"""

import json

import pytest

from tokswap import cli

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

MISSING = "{tmp}/does-not-exist"
MODEL = "{tmp}/model"  # an existing (empty) folder: passes the path checks, never loaded
DATA = "{tmp}/data.jsonl"
OUT = "{tmp}/out"
FOREIGN = "{tmp}/foreign"  # a non-empty folder tokswap did not write
OLD_SWAP = "{tmp}/old-swap"  # an earlier `tokswap swap` output
OLD_ALIGN = "{tmp}/old-align"  # an earlier `tokswap align` output
A_FILE = "{tmp}/notes.txt"
BINARY = "{tmp}/binary.txt"  # not UTF-8
NO_TEXT = "{tmp}/no_text.jsonl"  # records without a text field

TRAIN = ["train", MODEL, "--dataset", DATA, "--output", OUT]
DISTILL = ["distill", MODEL, "--teacher", MODEL, "--dataset", DATA, "--output", OUT]
SWAP = ["swap", "smollm2-135m", "qwen2.5"]
ALIGN = ["align", "smollm2", "qwen2.5"]

# (case id, argv, a fragment the message must contain)
CASES = [
    # local paths that do not exist
    ("swap-missing-source", ["swap", MISSING, "qwen2.5", "--output", OUT], "does-not-exist does not exist"),
    (
        "swap-missing-target",
        ["swap", MODEL, "./no-such-tokenizer", "--output", OUT],
        "no-such-tokenizer does not exist",
    ),
    ("swap-missing-alignment", SWAP + ["--output", OUT, "--alignment", MISSING], "The alignment"),
    ("swap-missing-corpus", SWAP + ["--output", OUT, "--corpus", MISSING], "Corpus"),
    ("align-missing-source", ["align", MISSING, "qwen2.5", "--output", OUT], "does not exist"),
    ("align-missing-target", ["align", "smollm2", "../no/such/tokenizer", "--output", OUT], "does not exist"),
    ("align-missing-corpus", ALIGN + ["--output", OUT, "--corpus", MISSING], "Corpus"),
    ("train-missing-model", ["train", MISSING, "--dataset", DATA, "--output", OUT], "The model"),
    ("train-missing-dataset", ["train", MODEL, "--dataset", MISSING, "--output", OUT], "Dataset"),
    (
        "distill-missing-student",
        ["distill", MISSING, "--teacher", MODEL, "--dataset", DATA, "--output", OUT],
        "The student",
    ),
    (
        "distill-missing-teacher",
        ["distill", MODEL, "--teacher", MISSING, "--dataset", DATA, "--output", OUT],
        "The teacher",
    ),
    ("eval-missing-model", ["eval", MISSING], "The model"),
    ("eval-missing-tokenizer", ["eval", "smollm2-135m", "--tokenizer", MISSING], "The tokenizer"),
    # zero and negative numbers
    ("align-zero-iterations", ALIGN + ["--output", OUT, "--iterations", "0"], "--iterations) must be an integer >= 1"),
    ("align-negative-dim", ALIGN + ["--output", OUT, "--dim", "-5"], "--dim) must be an integer >= 1"),
    ("align-zero-window", ALIGN + ["--output", OUT, "--window", "0"], "--window)"),
    ("align-zero-min-count", ALIGN + ["--output", OUT, "--min-count", "0"], "--min-count)"),
    ("train-zero-batch", TRAIN + ["--batch-size", "0"], "--batch-size) must be an integer >= 1"),
    ("train-negative-length", TRAIN + ["--max-length", "-1"], "--max-length)"),
    ("train-zero-grad-accum", TRAIN + ["--grad-accum", "0"], "--grad-accum)"),
    ("train-zero-lr", TRAIN + ["--stage1-lr", "0"], "--stage1-lr) must be a finite number > 0"),
    ("train-negative-steps", TRAIN + ["--stage1-steps", "-2"], "--stage1-steps) must be >= 0"),
    ("train-zero-save-steps", TRAIN + ["--save-steps", "0"], "--save-steps)"),
    ("train-merge-original-range", TRAIN + ["--merge-original", "1.5"], "--merge-original) must be in [0, 1]"),
    ("train-merge-original-without-teacher", TRAIN + ["--merge-original", "0.5"], "pass --teacher MODEL"),
    ("distill-negative-max-steps", DISTILL + ["--max-steps", "-3"], "--max-steps) must be -1 (one epoch)"),
    ("distill-zero-batch", DISTILL + ["--batch-size", "0"], "--batch-size)"),
    ("distill-zero-lr", DISTILL + ["--lr", "0"], "--lr)"),
    ("distill-zero-logging-steps", DISTILL + ["--logging-steps", "0"], "--logging-steps)"),
    ("distill-zero-chunk", DISTILL + ["--chunk-size", "0"], "--chunk-size)"),
    ("eval-zero-batch", ["eval", "smollm2-135m", "--batch-size", "0"], "--batch-size)"),
    ("eval-negative-limit", ["eval", "smollm2-135m", "--limit", "-1"], "--limit)"),
    ("eval-output-over-a-foreign-file", ["eval", "smollm2-135m", "--output", A_FILE], "not a tokswap eval result"),
    ("eval-output-under-a-file", ["eval", "smollm2-135m", "--output", A_FILE + "/r.json"], "is a file"),
    ("eval-output-is-a-folder", ["eval", "smollm2-135m", "--output", FOREIGN], "is a folder"),
    # outputs that already hold something
    ("swap-foreign-output", SWAP + ["--output", FOREIGN], "not written by tokswap"),
    ("swap-foreign-output-overwrite", SWAP + ["--output", FOREIGN, "--overwrite"], "even with --overwrite"),
    ("swap-file-output", SWAP + ["--output", A_FILE, "--overwrite"], "existing file"),
    ("swap-earlier-output", SWAP + ["--output", OLD_SWAP], "Pass --overwrite"),
    ("swap-alignment-folder-as-output", SWAP + ["--output", OLD_ALIGN, "--overwrite"], "no tokswap_config.json"),
    ("align-foreign-output", ALIGN + ["--output", FOREIGN, "--overwrite"], "not written by tokswap"),
    ("align-earlier-output", ALIGN + ["--output", OLD_ALIGN], "Pass --overwrite"),
    ("align-file-output", ALIGN + ["--output", A_FILE], "existing file"),
    ("align-output-under-a-file", ALIGN + ["--output", A_FILE + "/out"], "notes.txt is a file, so"),
    ("swap-output-under-a-file", SWAP + ["--output", A_FILE + "/sub/out"], "cannot be created"),
    ("train-foreign-output", ["train", MODEL, "--dataset", DATA, "--output", FOREIGN], "not a tokswap run"),
    ("train-file-output", ["train", MODEL, "--dataset", DATA, "--output", A_FILE], "existing file"),
    ("train-output-under-a-file", ["train", MODEL, "--dataset", DATA, "--output", A_FILE + "/x"], "is a file"),
    (
        "distill-foreign-output",
        ["distill", MODEL, "--teacher", MODEL, "--dataset", DATA, "--output", FOREIGN],
        "not a tokswap run",
    ),
    # the other commands
    ("draft-missing-small", ["draft", MISSING, MODEL, "--output", OUT], "does-not-exist"),
    ("draft-missing-big", ["draft", MODEL, MISSING, "--output", OUT], "does-not-exist"),
    ("draft-foreign-output", ["draft", MODEL, MODEL, "--output", FOREIGN], "not written by tokswap"),
    ("draft-missing-dataset", ["draft", MODEL, MODEL, "--output", OUT, "--dataset", MISSING], "does-not-exist"),
    ("push-missing-folder", ["push", MISSING, "me/repo"], "does-not-exist"),
    ("push-folder-not-written-by-tokswap", ["push", FOREIGN, "me/repo"], "tokswap"),
    ("assets-unknown-name", ["assets", "fetch", "no-such-asset"], "no-such-asset"),
    ("demo-foreign-output", ["demo", "--output", FOREIGN], "not written by tokswap"),
    ("demo-negative-train-steps", ["demo", "--output", OUT, "--train-steps", "-1"], "--train-steps must be >= 0"),
    ("train-binary-dataset", ["train", MODEL, "--dataset", BINARY, "--output", OUT], "UTF-8"),
    ("align-binary-corpus", ALIGN + ["--output", OUT, "--corpus", BINARY], "UTF-8"),
    ("train-dataset-without-text", ["train", MODEL, "--dataset", NO_TEXT, "--output", OUT], "text"),
]


def _snapshot(root):
    """Every path under `root` with the file contents: what a failed command must leave untouched."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.delenv("TOKSWAP_DEBUG", raising=False)
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text(json.dumps({"text": "hello world"}) + "\n")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "thesis.tex").write_text("years of work")
    (tmp_path / "old-swap").mkdir()
    (tmp_path / "old-swap" / "tokswap_config.json").write_text("{}")
    (tmp_path / "old-align").mkdir()
    (tmp_path / "old-align" / "alignment_config.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    (tmp_path / "no_text.jsonl").write_text(json.dumps({"content": "hello"}) + "\n")
    return tmp_path


def _never_load(*args, **kwargs):
    raise AssertionError("a model or tokenizer was loaded: the bad input must be refused before that")


@pytest.fixture
def no_loading(monkeypatch):
    """Loading anything big fails the test: each case must be refused before."""
    import transformers

    for name in ("AutoModelForCausalLM", "AutoTokenizer"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", _never_load)
    import tokswap.offline.assets

    for name in ("model_path", "tokenizer_path", "package_root"):
        monkeypatch.setattr(tokswap.offline.assets, name, _never_load)


@pytest.mark.parametrize(("argv", "fragment"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_and_exit_code_2(argv, fragment, workspace, no_loading, capsys):
    argv = [arg.format(tmp=workspace) for arg in argv]
    before = _snapshot(workspace)

    code = cli.main(argv)

    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.endswith("\n"), err
    assert err.startswith(f"tokswap {argv[0]}: error: ")
    assert fragment in err
    assert "Traceback" not in out + err
    assert _snapshot(workspace) == before  # no output folder, temporary folder or changed file left behind


def test_the_table_covers_every_command():
    assert {case[1][0] for case in CASES} == set(cli._COMMANDS)
    assert len(CASES) >= 40
