"""The A2A message type: construction, wire form, validation, signatures."""

from __future__ import annotations

import json

import msgspec
import pytest

from barnraise.sim.messages import (
    MESSAGE_TYPES,
    Message,
    MessageError,
    Metadata,
    Priority,
    Region,
    canonical_bytes,
    decode,
    encode,
    sign,
    verify,
)

SECRET = b"session-secret"


def make(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "message_id": "m-1", "timestamp": 12.5, "from_agent": "a", "to_agent": "b",
        "message_type": "task_assignment", "content": {"task": "build", "n": 3},
    }
    fields.update(overrides)
    return Message(**fields)  # type: ignore[arg-type]


def wire(**overrides: object) -> bytes:
    obj: dict[str, object] = {
        "message_id": "m-1", "timestamp": 1.0, "from_agent": "a", "to_agent": "b",
        "message_type": "heartbeat",
    }
    obj.update(overrides)
    return json.dumps({k: v for k, v in obj.items() if v is not ...}).encode()


def test_the_eleven_message_types_and_named_priorities() -> None:
    assert len(MESSAGE_TYPES) == 11
    assert {"task_assignment", "registry_response", "subscription"} <= MESSAGE_TYPES
    assert [int(p) for p in Priority] == [1, 5, 8, 10]


def test_round_trip_through_the_wire_form_keeps_every_field() -> None:
    message = make(
        priority=Priority.HIGH, expires_at=99.0,
        metadata=Metadata(Region(1, 2, 3, 4), ("build",), "corr-9"),
    )
    assert decode(encode(message)) == message


def test_canonical_form_sorts_keys_and_blanks_the_signature() -> None:
    a = make(content={"b": 1, "a": 2})
    b = make(content={"a": 2, "b": 1})
    assert canonical_bytes(a) == canonical_bytes(b)
    obj = json.loads(canonical_bytes(sign(a, SECRET)))
    assert obj["signature"] is None
    assert list(obj) == sorted(obj)


def test_canonical_form_does_not_depend_on_how_a_default_was_spelled() -> None:
    assert canonical_bytes(make(priority=5)) == canonical_bytes(make(priority=Priority.NORMAL))
    assert canonical_bytes(make()) == canonical_bytes(make(metadata=Metadata()))


def test_any_priority_from_1_to_10_is_accepted() -> None:
    for priority in range(1, 11):
        assert make(priority=priority).priority == priority


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"message_id": ""}, "message_id"),
        ({"message_id": 7}, "message_id"),
        ({"from_agent": None}, "from_agent"),
        ({"to_agent": ""}, "to_agent"),
        ({"message_type": "gossip"}, "message_type"),
        ({"priority": 0}, "priority"),
        ({"priority": 11}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"priority": 5.0}, "priority"),
        ({"timestamp": "now"}, "timestamp"),
        ({"content": ["not", "an", "object"]}, "content"),
        ({"metadata": {"region": None}}, "metadata"),
        ({"expires_at": "soon"}, "expires_at"),
        ({"signature": 12}, "signature"),
        ({"to_agent": "topic:"}, "to_agent"),
        ({"to_agent": "type:"}, "to_agent"),
    ],
)
def test_construction_names_the_bad_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(MessageError) as info:
        make(**overrides)
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (wire(message_id=...), "message_id"),
        (wire(to_agent=...), "to_agent"),
        (wire(message_type="gossip"), "message_type"),
        (wire(priority=11), "priority"),
        (wire(priority=0), "priority"),
        (wire(priority="5"), "priority"),
        (wire(timestamp="yesterday"), "timestamp"),
        (wire(content=[1, 2]), "content"),
        (wire(metadata={"region": {"x": "1", "y": 0, "width": 1, "height": 1}}),
         "metadata.region.x"),
        (wire(metadata={"region": {"x": 1, "y": 0, "width": 0, "height": 1}}), "metadata.region"),
        (wire(metadata={"colour": "red"}), "metadata.colour"),
        (wire(sender="x"), "sender"),
        (b"{not json", "message"),
        (b"[]", "message"),
    ],
)
def test_decoding_invalid_input_raises_message_error_naming_the_field(
    data: bytes, field: str
) -> None:
    with pytest.raises(MessageError) as info:
        decode(data)
    assert info.value.field == field, str(info.value)


def test_oversized_content_is_refused_with_the_limit_named() -> None:
    data = wire(content={"blob": "x" * 2000})
    assert decode(data, max_content_bytes=4096).content["blob"] == "x" * 2000
    with pytest.raises(MessageError) as info:
        decode(data, max_content_bytes=1000)
    assert info.value.field == "content"
    assert "1000" in str(info.value)


def test_signature_round_trip_and_tamper_detection() -> None:
    signed = sign(make(), SECRET)
    verify(signed, SECRET)
    assert decode(encode(signed), SECRET) == signed
    tampered = msgspec.structs.replace(signed, content={"task": "destroy", "n": 3})
    with pytest.raises(MessageError) as info:
        verify(tampered, SECRET)
    assert info.value.field == "signature"
    with pytest.raises(MessageError):
        verify(signed, b"another secret")
    with pytest.raises(MessageError, match="missing"):
        verify(make(), SECRET)


def test_tampering_with_the_wire_bytes_is_detected() -> None:
    data = encode(make(), SECRET)
    forged = data.replace(b'"n":3', b'"n":4')
    assert forged != data
    with pytest.raises(MessageError) as info:
        decode(forged, SECRET)
    assert info.value.field == "signature"


def test_non_json_content_is_refused_when_encoded() -> None:
    with pytest.raises(MessageError) as info:
        encode(make(content={"when": object()}))
    assert info.value.field == "content"


def test_message_error_is_a_value_error() -> None:
    assert issubclass(MessageError, ValueError)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"capabilities": "xy"}, "metadata.capabilities"),
        ({"capabilities": ("ok", 3)}, "metadata.capabilities"),
        ({"correlation_id": 5}, "metadata.correlation_id"),
        ({"correlation_id": ""}, "metadata.correlation_id"),
        ({"region": {"x": 0, "y": 0, "width": 1, "height": 1}}, "metadata.region"),
    ],
)
def test_metadata_made_in_process_is_checked_like_decoded_metadata(
    fields: dict[str, object], field: str,
) -> None:
    with pytest.raises(MessageError) as info:
        Metadata(**fields)  # type: ignore[arg-type]
    assert info.value.field == field
    good = Metadata(Region(0, 0, 2, 2), ("build",), "c-1")
    assert decode(encode(make(metadata=good))).metadata == good
