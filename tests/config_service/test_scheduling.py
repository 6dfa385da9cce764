"""Credit arithmetic and placement, checked against EnMasse's documented examples."""
from config_service.scheduling import Usage, fits, place


def plan(router=0.0, broker=0.0, partitions=1):
    return {"resources": {"router": router, "broker": broker}, "partitions": partitions}


def schedule(usage, kind, p, name="a"):
    placement = place("standard", kind, name, p, usage)
    usage.add(kind, p, placement)
    return placement


def test_three_addresses_of_0_3_share_a_broker_and_the_fourth_adds_one():
    usage = Usage()
    brokers = [schedule(usage, "queue", plan(0.2, 0.3))[0]["clusterId"] for _ in range(4)]
    assert brokers == ["broker-0", "broker-0", "broker-0", "broker-1"]
    assert usage.needed() == {"router": 1, "broker": 2}


def test_110_addresses_of_0_01_router_need_two_routers():
    usage = Usage()
    for _ in range(110):
        schedule(usage, "anycast", plan(router=0.01))
    assert usage.needed()["router"] == 2


def test_ten_anycast_of_0_2_fit_limits_2_2_2_and_the_eleventh_does_not():
    usage, limits = Usage(), {"router": 2, "broker": 2, "aggregate": 2}
    for _ in range(10):
        schedule(usage, "anycast", plan(router=0.2))
    assert fits(usage, limits)
    schedule(usage, "anycast", plan(router=0.2))
    assert not fits(usage, limits)


def test_partitioned_queue_goes_on_distinct_brokers():
    placement = schedule(Usage(), "queue", plan(0.001, 0.01, partitions=3))
    assert [p["clusterId"] for p in placement] == ["broker-0", "broker-1", "broker-2"]


def test_large_topic_gets_a_sharded_broker_and_subscriptions_follow_it():
    usage = Usage()
    topic = schedule(usage, "topic", plan(0.1, 1.0), name="prices")
    assert topic[0]["clusterId"].startswith("broker-sharded-")
    sub = place("standard", "subscription", "s", plan(0.001, 0.01), usage, topic)
    assert sub == topic
    assert usage.needed()["broker"] == 1


def test_brokered_spaces_have_one_broker():
    assert place("brokered", "queue", "q", plan(broker=0.0), Usage()) == [
        {"clusterId": "broker", "containerId": "broker-0", "state": "Active"}]
