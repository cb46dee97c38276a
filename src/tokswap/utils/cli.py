"""Help-text helpers shared by the `tokswap` sub-commands."""

import argparse
import functools


@functools.cache
def examples_formatter(base: type = argparse.HelpFormatter) -> type:
    """`base` (an argparse formatter class) that prints an epilog starting with "examples:" line by line, as
    written, while descriptions and option help are wrapped as `base` does."""

    class ExamplesFormatter(base):
        def _fill_text(self, text, width, indent):
            if text.startswith("examples:"):
                return "".join(indent + line for line in text.splitlines(keepends=True))
            return super()._fill_text(text, width, indent)

    ExamplesFormatter.__name__ = f"Examples{base.__name__}"
    return ExamplesFormatter


def add_dataclass_arguments(parser: argparse.ArgumentParser, config_cls: type, skip=(), types=None) -> None:
    """One `--flag` per field of a config dataclass, its help text from the field's `metadata["help"]`.

    Every flag defaults to None so `dataclass_kwargs` can tell "not given" from a value; booleans get
    `--flag/--no-flag`. A field whose default is None gets its type from `types[name]` (else `str`).

    Args:
        parser: the sub-command's parser.
        config_cls: a dataclass whose fields all have defaults (e.g. `AlignmentConfig`).
        skip: field names not offered on the command line.
        types: `{field name: type}` for fields whose default does not show their type.
    """
    import dataclasses

    defaults = config_cls()
    for item in dataclasses.fields(config_cls):
        if item.name in skip or not item.init:
            continue
        flag = "--" + item.name.replace("_", "-")
        default = getattr(defaults, item.name)
        help_text = f"{item.metadata.get('help', '')} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=item.name, default=None, action=argparse.BooleanOptionalAction, help=help_text
            )
        else:
            kind = type(default) if default is not None else (types or {}).get(item.name, str)
            parser.add_argument(flag, dest=item.name, type=kind, default=None, help=help_text)


def dataclass_kwargs(args: argparse.Namespace, config_cls: type) -> dict:
    """The fields of `config_cls` that were given on the command line (not None), as keyword arguments."""
    import dataclasses

    values = {item.name: getattr(args, item.name, None) for item in dataclasses.fields(config_cls) if item.init}
    return {name: value for name, value in values.items() if value is not None}
