"""The processes clients talk to: the embedded router (`router`), the protocol gateway
(`gateway`, MQTT today), the auth service routers delegate SASL to (`authservice`), the relay
between qdrouterd and RabbitMQ (`vhost_relay`), and qdrouterd's static configuration
(`qdrouterd`). None imports Django or an app: what they need of the control plane goes through
`control`, which the process's starter implements (maas/bindings.py)."""
