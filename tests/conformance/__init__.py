"""Conformance suite: the embedded broker's classic group coordinator against Apache Kafka."""
