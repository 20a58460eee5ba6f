"""gengroup: a Kafka consumer-group SDK for structured-concurrency Python."""
