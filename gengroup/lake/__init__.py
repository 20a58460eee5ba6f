"""The lake sink: Kafka topics landed in a Parquet lake, exactly once, and Spark jobs over it.

``LakeSink`` runs in a consumer group and lands each partition's records as
Parquet files (``topic=T/partition=P/<base>-<end>.parquet``) on any
``pyarrow.fs`` file system; ``gengroup.lake.spark`` verifies the lake against
the topic and computes analytics on Spark. ``docs/pipeline.md`` describes the
landing protocol and why it lands every offset exactly once. Needs the
``lake`` extra (pyarrow); the Spark jobs need the ``spark`` extra (pyspark).
"""

from .layout import Landed as Landed
from .sink import (
    LakeConfig as LakeConfig,
    LakeSink as LakeSink,
    PartitionProgress as PartitionProgress,
)
from .store import LakeError as LakeError, LakeStore as LakeStore

__all__ = ["Landed", "LakeConfig", "LakeError", "LakeSink", "LakeStore", "PartitionProgress"]
