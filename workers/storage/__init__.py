"""The storage controller: places queues and topics on brokers and configures RabbitMQ."""
