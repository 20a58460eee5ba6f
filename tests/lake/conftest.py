"""A Spark session shared by the lake tests that need one (started once, ~20 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession with Spark's Kafka source; fails loudly without Java."""
    from gengroup.lake.spark import session

    with session("local[2]", "gengroup tests") as spark:
        yield spark
