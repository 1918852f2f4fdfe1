"""mkdocs hook: the CLI reference is generated from the argparse parser at build time.

A page holding the marker `<!-- cli-reference -->` gets, in its place, `specverify --help` and then
`specverify <command> --help` for every subcommand the parser registers, so the reference cannot drift
from the code (a new flag or command appears on the next build).
"""

from __future__ import annotations

import argparse
import os
import sys

MARKER = "<!-- cli-reference -->"
WIDTH = "100"          # argparse wraps help to $COLUMNS: fixed, so the page does not depend on the terminal


def _parser():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from specverify.cli import build_parser
    return build_parser()


def _help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def cli_reference() -> str:
    """Markdown: the top-level help, then one section per subcommand with its help in a text block."""
    parser = _parser()
    parts = ["## specverify", "", "```text", _help(parser), "```"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += ["", f"## specverify {name}", "", "```text", _help(sub), "```"]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
