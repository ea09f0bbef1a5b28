r"""The argument parser shared by the benchmark commands: usage errors on one line."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    r"""argparse with usage errors on one line (``prog: error: ... (see --help)``),
    exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see --help)\n")
