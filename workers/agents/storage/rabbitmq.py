"""The RabbitMQ side of the storage controller, by one name: re-exports its three modules.

- `rabbitmq_api`: the management HTTP API client (`RabbitMQApi`, `BrokerError`);
- `rabbitmq_objects`: the objects a vhost state asks for (names, permission patterns, queue
  arguments, policies, dead-letter routes, `desired_objects`) and how addresses map to them;
- `rabbitmq_reconciler`: `BrokerReconciler`, which observes a vhost, converges it and
  verifies it, and its `ApplyResult`.

Callers outside workers/agents/storage import from here (`from workers.agents.storage import rabbitmq`).
"""
# One implementation of RabbitMQ's password hash format, for the controller and tests.
from config_service.passwords import hash_password, verify_password
from workers.agents.storage.rabbitmq_objects import (
    AMQ_DEFAULT,
    DLX_EXCHANGE,
    EXPIRY_REASONS,
    FANOUT_PREFIX,
    INTERNAL_PREFIX,
    OWNER_ARG,
    OWNER_TAG,
    POLICY_PREFIX,
    POLICY_PRIORITY,
    REJECT_REASONS,
    TEMP_QUEUE_EXPIRY_MS,
    TEMP_QUEUE_POLICY,
    TEMP_QUEUES,
    dead_letter_routes,
    desired_objects,
    fanout_exchange,
    pattern_matches,
    pattern_regex,
    policy_definition,
    policy_of,
    queue_arguments,
    queue_policies,
    queue_type,
    user_permissions,
)
from workers.agents.storage.rabbitmq_reconciler import (
    VHOST_DESCRIPTION,
    ApplyResult,
    BrokerReconciler,
    topic_type,
)
from workers.clients.rabbitmq_api import HASHING_ALGORITHM, BrokerError, RabbitMQApi
from workers.naming import USER_SEPARATOR, broker_username

__all__ = [
    "AMQ_DEFAULT", "DLX_EXCHANGE", "EXPIRY_REASONS", "FANOUT_PREFIX", "HASHING_ALGORITHM", "INTERNAL_PREFIX",
    "OWNER_ARG", "OWNER_TAG", "POLICY_PREFIX", "POLICY_PRIORITY", "REJECT_REASONS",
    "TEMP_QUEUE_EXPIRY_MS", "TEMP_QUEUE_POLICY", "TEMP_QUEUES", "USER_SEPARATOR",
    "VHOST_DESCRIPTION",
    "ApplyResult", "BrokerError", "BrokerReconciler", "RabbitMQApi",
    "broker_username", "dead_letter_routes", "desired_objects", "fanout_exchange", "hash_password",
    "pattern_matches", "pattern_regex", "policy_definition", "policy_of", "queue_arguments", "queue_policies",
    "queue_type", "topic_type", "user_permissions", "verify_password",
]
