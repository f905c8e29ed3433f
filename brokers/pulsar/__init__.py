"""Apache Pulsar: the consumer-side retry helpers and the console adapter.

The only package that imports `pulsar` (pulsar-client). See docs/pulsar.md.

    from brokers.pulsar.retry import RetryConsumer      # reconsume_later for Python
    from brokers.pulsar.naming import retry_topology    # retry/DLQ names per version
    from brokers.pulsar.adapter import PulsarAdapter    # the console's view
"""
