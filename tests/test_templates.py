"""The accelerate config templates parse and pass accelerate's own validation (no GPU or deepspeed needed)."""

import os
from pathlib import Path
from unittest import mock

import pytest

pytest.importorskip("accelerate")

from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file  # noqa: E402
from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402
from accelerate.utils import DeepSpeedPlugin, DistributedType, FullyShardedDataParallelPlugin  # noqa: E402
from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env  # noqa: E402

TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "accelerate"

EXPECTED = {
    "multi_gpu.yaml": (DistributedType.MULTI_GPU, None),
    "deepspeed_zero1.yaml": (DistributedType.DEEPSPEED, 1),
    "deepspeed_zero2.yaml": (DistributedType.DEEPSPEED, 2),
    "deepspeed_zero3.yaml": (DistributedType.DEEPSPEED, 3),
    "fsdp.yaml": (DistributedType.FSDP, None),
}


def test_every_template_is_listed():
    assert sorted(p.name for p in TEMPLATES.glob("*.yaml")) == sorted(EXPECTED)


def launch_environment(path: Path) -> tuple:
    """What `accelerate launch --config_file PATH -m tokswap.cli train ...` validates and exports."""
    args = launch_command_parser().parse_args(
        ["--config_file", str(path), "-m", "tokswap.cli", "train", "model", "--dataset", "d", "--output", "o"]
    )
    args, defaults, mixed_precision_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        # what `accelerate launch` sets before calling its deepspeed launcher
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mixed_precision_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
    else:
        env = prepare_multi_gpu_env(args)
    return args, env


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_template_is_valid_for_accelerate(name):
    path = TEMPLATES / name
    text = path.read_text()
    assert "-m tokswap.cli train" in text  # each template documents its launch command

    config = load_config_from_file(str(path))  # rejects unknown keys and bad enum values
    assert isinstance(config, ClusterConfig)
    distributed_type, zero_stage = EXPECTED[name]
    assert config.distributed_type == distributed_type
    assert config.mixed_precision == "bf16"  # as in the paper
    assert config.num_processes >= 2

    args, env = launch_environment(path)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert args.module and args.training_script == "tokswap.cli"
    with mock.patch.dict(os.environ, env):
        if distributed_type == DistributedType.DEEPSPEED:
            plugin = DeepSpeedPlugin()  # builds the DeepSpeed config dict; deepspeed itself is not needed
            assert plugin.zero_stage == zero_stage
            assert plugin.deepspeed_config["zero_optimization"]["stage"] == zero_stage
            if zero_stage == 3:
                assert plugin.zero3_init_flag
                assert plugin.deepspeed_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
        elif distributed_type == DistributedType.FSDP:
            plugin = FullyShardedDataParallelPlugin()
            assert plugin.fsdp_version == 2
            assert plugin.auto_wrap_policy is not None
        else:
            assert args.multi_gpu and not args.use_deepspeed and not args.use_fsdp


def test_broken_template_is_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((TEMPLATES / "multi_gpu.yaml").read_text() + "zero_stgae: 2\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_config_from_file(str(bad))
    bad.write_text((TEMPLATES / "multi_gpu.yaml").read_text().replace("MULTI_GPU", "MULTI_GPUS"))
    with pytest.raises(ValueError):
        load_config_from_file(str(bad))
