"""Training output folders: a run writes only into a folder that is new, empty, or an earlier tokswap run.

Trainers write checkpoints, `config.json` and `model.safetensors` straight into their `output_dir`. Pointed at a
folder holding someone's own model, they would overwrite it. So a run claims its folder first: it refuses a
non-empty folder without tokswap's run marker (unless asked to resume from what is there) and writes the marker.
"""

import json
from pathlib import Path
from typing import Union

from tokswap.constants import RUN_MARKER_NAME, __version__
from tokswap.utils.io import OutputExistsError, atomic_output_file, check_can_create


def _resume_requested(resume: Union[bool, str, None]) -> bool:
    if isinstance(resume, str):
        return resume.strip().lower() not in ("", "false", "0", "no")
    return bool(resume)


def check_run_dir(output_dir, resume: Union[bool, str, None] = None) -> None:
    """Refuse a training `output_dir` whose files a run could overwrite although tokswap did not write them.

    Accepted: a missing or empty folder, a folder holding `tokswap_run.json` (an earlier tokswap run, resumed or
    run again), or any folder when `resume` asks to continue the run found there.

    Raises:
        `OutputExistsError`: a non-empty folder that is not a tokswap run, a file, or a symbolic link.
        `OutputNotWritableError`: the folder could not be created or written.
    """
    path = Path(output_dir)
    if path.is_symlink():
        raise OutputExistsError(f"{path} is a symbolic link; give a new folder (or the real folder it points to).")
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"{path} is an existing file, not a folder; choose another output folder.")
    if path.is_dir() and any(path.iterdir()) and not (path / RUN_MARKER_NAME).is_file():
        if not _resume_requested(resume):
            raise OutputExistsError(
                f"{path} is not empty and has no {RUN_MARKER_NAME}, so it is not a tokswap run: training would "
                "write over its files. Choose a new or empty output folder (or resume a run that is there)."
            )
    check_can_create(path / RUN_MARKER_NAME)


def claim_run_dir(output_dir, kind: str, resume: Union[bool, str, None] = None) -> None:
    """`check_run_dir`, then create the folder and mark it as a tokswap run of `kind` (e.g. `"train"`)."""
    check_run_dir(output_dir, resume)
    marker = Path(output_dir, RUN_MARKER_NAME)
    if marker.is_file():
        return
    with atomic_output_file(marker, mode="w") as handle:
        json.dump({"written_by": "tokswap", "tokswap_version": __version__, "kind": kind}, handle, indent=2)
        handle.write("\n")
