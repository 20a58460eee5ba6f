"""The ``record_loop`` fixture: run a record test against both record decoders.

:mod:`gengroup.protocol.records` decodes records with the compiled loop of
:mod:`gengroup.protocol._speedups` when it is built, else with its pure-Python
loop. Tests that use this fixture run once with each. The compiled parameter
fails (never skips) when the extension is not built: the install is expected
to compile it on every machine the tests run on.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from gengroup.protocol import records

RECORD_LOOPS = ["compiled", "python"]


def compiled_loop() -> object:
    """The compiled record loop; fails the test if the extension is not built."""
    try:
        module = importlib.import_module("gengroup.protocol._speedups")
    except ImportError as exc:
        pytest.fail(
            f"the compiled record decoder is not built ({exc}); reinstall the project "
            "(pip install -e '.[dev]') with a C compiler available"
        )
    module.configure(records.Record, records.CorruptRecordError)
    return module.decode_records


@pytest.fixture(scope="module", params=RECORD_LOOPS)
def record_loop(request: pytest.FixtureRequest) -> Iterator[str]:
    """Select the record loop :mod:`gengroup.protocol.records` decodes with."""
    saved = records._decode_records
    if request.param == "compiled":
        records._decode_records = compiled_loop()  # type: ignore[assignment]
    else:
        records._decode_records = records._decode_records_py
    try:
        yield request.param
    finally:
        records._decode_records = saved
