"""Names the storage controller and the router agent both rely on, so that neither imports
the other: the broker username of a vhost's user (the router logs in to its space's RabbitMQ
vhost with one)."""

USER_SEPARATOR = "@"


def broker_username(vhost: str, username: str) -> str:
    """The global RabbitMQ username of a messaging user of one vhost: `<user>@<vhost>`.

    '@' because RabbitMQ users are global and MQTT clients select the vhost with
    `VHOST:USER`, splitting at the *last* ':' — so the broker username must not contain ':'.
    The vhost must not contain '@', so the suffix `@<vhost>` identifies the vhost's users.
    """
    if USER_SEPARATOR in vhost:
        raise ValueError("a vhost name must not contain '@'")
    if ":" in username:
        raise ValueError("a username must not contain ':' (MQTT splits VHOST:USER at it)")
    return f"{username}{USER_SEPARATOR}{vhost}"
