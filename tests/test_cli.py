"""The `tokswap` entry point: every sub-command is reachable, and exit codes tell success from user error."""

import subprocess
import sys

import pytest

from tokswap import cli

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub


def test_top_level_help_lists_every_command_without_importing_them(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("align", "swap", "train", "distill", "eval", "push", "assets", "demo"):
        assert f"    {name}" in out


@pytest.mark.parametrize("command", sorted(cli._COMMANDS))
def test_each_command_has_a_full_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"tokswap {command}" in capsys.readouterr().out


def help_examples(command, capsys) -> list:
    """The `tokswap <command> ...` lines of the command's --help examples, continuation lines joined."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "\nexamples:\n" in text
    examples = text.split("\nexamples:\n", 1)[1].replace("\\\n", " ")
    lines = [line.split("#", 1)[0] for line in examples.splitlines()]  # shell comments are not arguments
    return [line.split() for line in lines if line.strip().startswith(f"tokswap {command}")]


@pytest.mark.parametrize("command", sorted(cli._COMMANDS))
def test_each_command_has_at_least_two_examples_that_parse(command, capsys):
    examples = help_examples(command, capsys)
    assert len(examples) >= 2, f"tokswap {command} --help shows {len(examples)} examples"
    for words in examples:
        # the flags and positionals are the command's own: argparse exits 2 on any it does not know
        args = cli.build_parser(command).parse_args(words[1:])
        assert args.command == command and callable(args.func)


# The positionals that take tokswap asset names: a bare name there (no "/") must be a real asset.
ASSET_ARGUMENTS = {
    "align": ("source_tokenizer", "target_tokenizer"),
    "swap": ("source", "target"),
    "draft": ("small", "big"),
    "eval": ("model",),
}


@pytest.mark.parametrize("command", sorted(ASSET_ARGUMENTS))
def test_examples_name_real_assets(command, capsys):
    from tokswap.offline import assets

    known = {name.lower() for name in (*assets.ASSET_HUB_IDS, *assets._MODEL_ALIASES, *assets._TOKENIZER_ALIASES)}
    for words in help_examples(command, capsys):
        args = cli.build_parser(command).parse_args(words[1:])
        for name in ASSET_ARGUMENTS[command]:
            value = getattr(args, name)
            assert "/" in value or value.lower() in known, f"{value!r} in `{' '.join(words)}` is not an asset name"


def test_no_command_and_bad_arguments_are_user_errors(capsys):
    assert cli.main([]) == 2
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["swap", "--no-such-flag"])
    assert exit_info.value.code == 2


def test_console_entry_point_runs_as_a_module():
    result = subprocess.run([sys.executable, "-m", "tokswap.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("tokswap ")


@pytest.mark.parametrize(
    ("name", "local"),
    [
        ("/nope", True),
        ("./nope", True),
        ("../nope", True),
        ("~/nope", True),
        ("models/a/b", True),
        ("models/my model", True),
        ("qwen2.5", False),
        ("smollm2-135m", False),
        ("Qwen/Qwen2.5-0.5B", False),
    ],
)
def test_what_looks_like_a_local_path(name, local):
    from tokswap.utils import looks_like_local_path

    assert looks_like_local_path(name) is local


def test_a_missing_local_path_is_one_line_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    from tokswap.utils import MissingPathError

    missing = str(tmp_path / "nope")
    assert cli.main(["swap", missing, "qwen2.5", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tokswap swap: error: The source model {missing} does not exist: give an existing folder, "
        "a tokswap asset name (tokswap assets list) or a Hub id.\n"
    )
    with pytest.raises(MissingPathError):
        cli.main(["align", missing, "qwen2.5", "--output", str(tmp_path / "out"), "--debug"])
    monkeypatch.setenv("TOKSWAP_DEBUG", "1")
    with pytest.raises(MissingPathError):
        cli.main(["eval", missing])
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("hub")
@pytest.mark.parametrize(
    "argv, what",
    [
        (["align", "smollm2", "nobody/no-such-tokenizer"], "a tokenizer from 'nobody/no-such-tokenizer'"),
        (["swap", "nobody/no-such-model", "qwen2.5"], "a model from 'nobody/no-such-model'"),
    ],
)
def test_a_hub_id_that_loads_nothing_is_one_line(argv, what, tmp_path, capsys):
    """A name that is no folder or asset goes to the Hub; when nothing is there, one line, exit code 2."""
    out = tmp_path / "out"
    assert cli.main([*argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tokswap {argv[0]}: error: Could not load {what}")
    assert "tokswap assets list" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
