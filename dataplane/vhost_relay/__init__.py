"""The vhost relay, between RabbitMQ and its clients: for a router (AMQP) it sets the open
hostname to `vhost:<vhost>` from the SASL PLAIN login `<user>@<vhost>` (qdrouterd cannot); for a
brokered space's AMQP client (`brokered-amqp`) it does the same and rewrites bare address names
to RabbitMQ's forms and back; for a brokered space's MQTT device it scopes the CONNECT's client
id to the login's vhost (RabbitMQ 3.10 tracks client ids across vhosts). Facing tenants it
serves TLS too.

`python -m dataplane.vhost_relay [--protocol amqp|brokered-amqp|mqtt] [--listen HOST:PORT]
[--tls-listen HOST:PORT --tls-cert PEM --tls-key PEM] [--broker HOST:PORT]`; no Django
(docs/router.md, "Router to broker: the vhost relay"; docs/storage.md, "Address names and
TLS" and "MQTT client ids").
"""
