"""The vhost relay, between RabbitMQ and its clients: for a router (AMQP) it sets the open
hostname to `vhost:<vhost>` from the SASL PLAIN login `<user>@<vhost>` (qdrouterd cannot); for a
brokered space's MQTT device it scopes the CONNECT's client id to the login's vhost (RabbitMQ
3.10 tracks client ids across vhosts).

`python -m dataplane.vhost_relay [--protocol amqp|mqtt] [--listen HOST:PORT] [--broker
HOST:PORT]`; no Django (docs/router.md, "Router to broker: the vhost relay"; docs/storage.md,
"MQTT client ids").
"""
