"""The gateway's MQTT 3.1.1 codec and topic mapping, byte by byte (no services needed)."""
import struct

import pytest

from dataplane.gateway import codec, mapping
from dataplane.gateway.amqp import encode


def feed_bytewise(data: bytes) -> list:
    decoder, out = codec.Decoder(), []
    for i in range(len(data)):
        out += decoder.feed(data[i:i + 1])
    assert decoder.buf == bytearray()
    return out


def test_it_decodes_a_connect_with_will_login_and_keep_alive_even_one_byte_at_a_time():
    will = codec.Publish("status/dev1", b"gone", qos=1, retain=True)
    raw = codec.connect("dev1", "app@acme.shop", b"s3cret", clean_session=False, keep_alive=30,
                        will=will)
    [(kind, c)] = feed_bytewise(raw)
    assert kind == codec.CONNECT
    assert (c.protocol, c.level, c.client_id, c.clean_session, c.keep_alive) == \
        ("MQTT", 4, "dev1", False, 30)
    assert (c.username, c.password) == ("app@acme.shop", b"s3cret")
    assert (c.will_topic, c.will_payload, c.will_qos, c.will_retain) == \
        ("status/dev1", b"gone", 1, True)


def test_it_decodes_several_packets_of_one_read_and_keeps_a_partial_one():
    big = b"x" * 20000  # a three-byte remaining length
    raw = codec.publish("a/b", b"one", 1, 7) + codec.publish("a/c", big, 0) + b"\xc0\x00"
    decoder = codec.Decoder()
    first = decoder.feed(raw[:-5])
    assert [p.payload for _, p in first] == [b"one"]
    rest = decoder.feed(raw[-5:])
    assert rest[0][1].payload == big and rest[0][1].topic == "a/c" and rest[1] == (
        codec.PINGREQ, None)
    assert first[0][1].packet_id == 7 and first[0][1].qos == 1


def test_it_encodes_the_remaining_length_as_the_spec_s_examples():
    assert codec._remaining(0) == b"\x00"
    assert codec._remaining(127) == b"\x7f"
    assert codec._remaining(128) == b"\x80\x01"
    assert codec._remaining(16383) == b"\xff\x7f"
    assert codec._remaining(16384) == b"\x80\x80\x01"
    assert codec._remaining(2097152) == b"\x80\x80\x80\x01"


def test_it_decodes_subscribe_unsubscribe_acks_and_disconnect():
    packets = codec.Decoder().feed(
        codec.subscribe(3, [("a/+", 1), ("#", 0)])
        + b"\xa2" + bytes([2 + 5]) + struct.pack("!H", 4) + codec._str("a/+")
        + codec.ack(codec.PUBACK, 9) + b"\x62\x02\x00\x0a" + b"\xe0\x00")
    assert packets[0][1].filters == [("a/+", 1), ("#", 0)] and packets[0][1].packet_id == 3
    assert packets[1][1].filters == ["a/+"]
    assert packets[2:] == [(codec.PUBACK, 9), (codec.PUBREL, 10), (codec.DISCONNECT, None)]


@pytest.mark.parametrize("raw, reason", [
    (b"\x36\x05\x00\x01a\x00\x01", "QoS 3"),
    (codec.publish("a/+", b"x"), "wildcard"),
    (codec.publish("", b"x"), "empty"),
    (b"\x80\x06\x00\x01\x00\x01a\x01", "flags must be 2"),
    (b"\x82\x06\x00\x01\x00\x01a\x03", "requested QoS"),
    (b"\x82\x02\x00\x01", "no topic filter"),
    (b"\x30\xff\xff\xff\xff\x01", "over 4 bytes"),
    (b"\x30\xff\xff\xff\x7f", "too large"),
    (b"\x30\x04\x00\x02\xff\xfe", "UTF-8"),
    (b"\x30\x03\x00\x05a", "truncated"),
    (b"\x20\x02\x00\x00", "not sent by clients"),
    (codec.connect("c")[:9] + b"\x03" + codec.connect("c")[10:], "reserved"),
])
def test_it_refuses_malformed_packets(raw, reason):
    with pytest.raises(codec.ProtocolError, match=reason):
        codec.Decoder().feed(raw)


def test_it_encodes_what_the_gateway_answers():
    assert codec.connack(codec.ACCEPTED, session_present=True) == b"\x20\x02\x01\x00"
    assert codec.connack(codec.BAD_LOGIN, session_present=True) == b"\x20\x02\x00\x04"
    assert codec.suback(5, [1, 0x80]) == b"\x90\x04\x00\x05\x01\x80"
    assert codec.ack(codec.PUBREL, 1) == b"\x62\x02\x00\x01"
    assert codec.publish("t", b"p", 1, 2, retain=True) == b"\x33\x06\x00\x01t\x00\x02p"


def test_topics_map_to_addresses_by_type():
    spaces = {"sensors": "topic", "rpc": "anycast", "a/b": "multicast", "jobs": "queue"}
    assert mapping.publish_target("sensors/room1/temp", spaces) == ("sensors", "room1.temp")
    assert mapping.publish_target("sensors", spaces) == ("sensors", None)
    assert mapping.publish_target("rpc", spaces) == ("rpc", None)
    assert mapping.publish_target("a/b", spaces) == ("a/b", None)
    assert mapping.publish_target("rpc/x", spaces) is None
    assert mapping.publish_target("elsewhere", spaces) is None


def test_subscriptions_map_to_receivers_and_topics_come_back_from_the_key():
    spaces = {"sensors": "topic", "news": "topic", "rpc": "anycast", "a/b": "multicast"}
    S = mapping.Source
    assert mapping.subscription_sources("sensors/+/temp", spaces) == [
        S("sensors/*.temp", "sensors")]
    assert mapping.subscription_sources("sensors/room1", spaces) == [
        S("sensors/room1", "sensors", "room1")]
    assert mapping.subscription_sources("sensors/#", spaces) == [S("sensors", "sensors")]
    assert mapping.subscription_sources("sensors", spaces) == [S("sensors", "sensors")]
    assert mapping.subscription_sources("a/b", spaces) == [S("a/b")]
    assert mapping.subscription_sources("#", spaces) == [
        S("a/b"), S("news", "news"), S("rpc"), S("sensors", "sensors")]
    assert mapping.subscription_sources("+/b", spaces) == [
        S("a/b"), S("news/b", "news", "b"), S("sensors/b", "sensors", "b")]
    assert mapping.subscription_sources("nowhere/#", spaces) == []
    assert mapping.topic_of(S("sensors", "sensors"), "room1.temp") == "sensors/room1/temp"
    assert mapping.topic_of(S("sensors", "sensors"), None) == "sensors"
    assert mapping.topic_of(S("sensors/room1", "sensors", "room1"), None) == "sensors/room1"
    assert mapping.topic_of(S("rpc"), "ignored") == "rpc"


@pytest.mark.parametrize("topic_filter, topic, expected", [
    ("a/+/c", "a/b/c", True), ("a/+/c", "a/b/d", False), ("a/#", "a", True),
    ("a/#", "a/b/c", True), ("#", "x", True), ("+", "a/b", False), ("a/b", "a/b", True),
    ("a/+", "a", False), ("+/+", "a/b", True),
])
def test_mqtt_filters_match_as_the_spec_says(topic_filter, topic, expected):
    assert mapping.matches(topic_filter, topic) is expected


def test_the_hand_encoded_amqp_message_decodes_in_proton():
    from proton import Message

    m = Message()
    m.decode(encode(b"21", "room1.temp", durable=True))
    assert (bytes(m.body), m.subject, m.durable) == (b"21", "room1.temp", True)
    m = Message()
    m.decode(encode(b""))
    assert (bytes(m.body), m.subject, m.durable) == (b"", None, False)


def test_a_receiver_covers_the_topics_it_would_get():
    S = mapping.Source
    assert mapping.covers(S("sensors", "sensors"), "sensors/a/b")
    assert mapping.covers(S("sensors", "sensors"), "sensors")
    assert not mapping.covers(S("sensors", "sensors"), "sensorsx/a")
    assert mapping.covers(S("sensors/*.temp", "sensors"), "sensors/r1/temp")
    assert not mapping.covers(S("sensors/*.temp", "sensors"), "sensors/r1/hum")
    assert mapping.covers(S("sensors/a.#", "sensors"), "sensors/a/b/c")
    assert mapping.covers(S("rpc"), "rpc") and not mapping.covers(S("rpc"), "rpc/x")
