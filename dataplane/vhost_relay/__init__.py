"""The vhost relay: between a router and RabbitMQ, it sets the AMQP open hostname to
`vhost:<vhost>` from the router's SASL PLAIN login `<user>@<vhost>` (qdrouterd cannot).

`python -m dataplane.vhost_relay [--listen 127.0.0.1:5677] [--broker 127.0.0.1:5672]`; no Django
(docs/router.md, "Router to broker: the vhost relay").
"""
