"""The command-line options every benchmark takes."""

from __future__ import annotations

import argparse


def benchmark_parser(doc: str | None, *, records: int, repeat: int) -> argparse.ArgumentParser:
    """A parser titled by ``doc``, with ``--records``, ``--value-size`` and ``--repeat``.

    Args:
        doc: The benchmark's module docstring.
        records: The default of ``--records``.
        repeat: The default of ``--repeat`` (the best run counts).

    Returns:
        The parser, for the benchmark to add its own options.
    """
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=repeat)
    return parser
