"""The storage controller: places queues and topics on brokers and configures RabbitMQ (`agent`),
from the vhost state a space should have (`desired`), through the reconciler of RabbitMQ's
objects (`rabbitmq*`); `watch` notices a broker that restarted."""
