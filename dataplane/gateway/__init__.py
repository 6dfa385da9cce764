"""The MQTT gateway of standard address spaces: MQTT 3.1.1 clients in, one AMQP 1.0 connection
per client to the space's router out, authenticated as that client's messaging user
(`manage.py run_mqtt_gateway`, docs/mqtt.md)."""
