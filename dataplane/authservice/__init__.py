"""The MaaS auth service: routers (qdrouterd's authServicePlugin) delegate messaging clients'
SASL to it and read the user's identity and address permissions from its AMQP open."""
