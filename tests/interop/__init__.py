"""Groups shared with other Kafka clients, built from source by the tests."""
