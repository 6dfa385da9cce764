"""Models of the workers: credentials of the data plane's internal users."""
from django.db import models


class InfraCredential(models.Model):
    """A random credential of an internal user of the data plane (the router's login on a
    space's broker vhost, a space's broker admin), encrypted at rest with a key derived from
    SECRET_KEY. `generation` counts rotations; read and write it through workers.credentials."""

    name = models.CharField(max_length=300, unique=True)
    generation = models.PositiveIntegerField(default=1)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} (generation {self.generation})"


class RetainedMessage(models.Model):
    """The last retained MQTT message of a topic in a standard space (the MQTT gateway's; kept
    here so that every gateway replica and a restarted gateway see it)."""

    # The space's uid, not a foreign key: projections are rebuilt from the config log
    # (rebuild_projections deletes and replays address spaces), which must not wipe these.
    space_uid = models.UUIDField()
    topic = models.CharField(max_length=1000)
    payload = models.BinaryField()
    qos = models.PositiveSmallIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["space_uid", "topic"],
                                               name="retained_topic_per_space")]

    def __str__(self) -> str:
        return self.topic


class MqttSession(models.Model):
    """A persistent MQTT session (clean session 0) of the MQTT gateway: the client's topic
    filters and their QoS. Its QoS 1 messages wait in durable subscription addresses of the
    space (`mqtt-<client>-<filter>`), not here."""

    # The space's uid, not a foreign key: projections are rebuilt from the config log
    # (rebuild_projections deletes and replays address spaces), which must not wipe these.
    space_uid = models.UUIDField()
    client_id = models.CharField(max_length=65535)
    subscriptions = models.JSONField(default=dict)  # topic filter -> granted QoS
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["space_uid", "client_id"],
                                               name="mqtt_session_per_client")]

    def __str__(self) -> str:
        return self.client_id
