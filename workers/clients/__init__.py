"""Clients of what the agents configure, with no agent logic: qdrouterd's (and the embedded
router's) AMQP management (`qdr`), RabbitMQ's management HTTP API (`rabbitmq_api`)."""
