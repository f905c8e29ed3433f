"""RabbitMQ: the TTL + dead-letter-exchange retry topology (semantics.md section 3).

The only package that imports `pika`. Parts:

- `topology`: names, cluster options and the idempotent declaration of the exchanges,
  queues and bindings;
- `messages`: the headers Redrive puts on retry/dead-letter copies and how a message's
  headers become string properties and back;
- `consumer`: the consumer-side runner (`RetryingConsumer`) and `reconsume_later`;
- `publisher`: publishing many messages with windowed publisher confirms;
- `management`: the small client of the management HTTP API used for inventory;
- `adapter`: `RabbitMQAdapter`, the console's side.
"""

from __future__ import annotations
