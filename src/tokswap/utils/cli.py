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
