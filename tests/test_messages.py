"""The A2A message type: construction, wire form, validation, signatures."""

from __future__ import annotations

import json

import msgspec
import pytest

from barnraise.sim.messages import (
    MESSAGE_TYPES,
    SYSTEM_TYPES,
    TYPE_NAME_RULE,
    Message,
    MessageError,
    Metadata,
    Priority,
    Region,
    canonical_bytes,
    decode,
    encode,
    message_type,
    schema_of,
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


def test_the_built_in_vocabulary_and_named_priorities() -> None:
    """The design notes' eleven types and the four of their final A2A tools."""
    assert len(MESSAGE_TYPES) == 15
    assert {"task_assignment", "registry_response", "subscription"} <= MESSAGE_TYPES
    assert {"task_request", "task_response", "notification", "data_share"} <= MESSAGE_TYPES
    assert SYSTEM_TYPES < MESSAGE_TYPES
    assert [int(p) for p in Priority] == [1, 5, 8, 10]


@pytest.mark.parametrize("name", ["gossip", "ping", "p", "a" * 64, "build_done_2", "message"])
def test_a_type_of_ones_own_is_any_name_following_the_rule(name: str) -> None:
    sent = make(message_type=name)
    assert sent.message_type == name
    assert decode(encode(sent)) == sent  # the wire form is the same for it


@pytest.mark.parametrize("name", ["Ping", "_session", "2ping", "ping-pong", "ping pong", "",
                                  "a" * 65, "pingé", "__init__"])
def test_a_name_not_following_the_rule_is_refused_naming_it_and_the_rule(name: str) -> None:
    for attempt in (lambda: make(message_type=name),
                    lambda: decode(wire(message_type=name))):
        with pytest.raises(MessageError) as info:
            attempt()
        assert info.value.field == "message_type"
        assert repr(name) in str(info.value) and TYPE_NAME_RULE in str(info.value)


class _Survey(msgspec.Struct, forbid_unknown_fields=True):
    question: str
    choices: list[str]


def test_a_schema_refuses_content_that_fails_it_naming_the_field() -> None:
    assert message_type("test_survey", schema=_Survey) == "test_survey"
    assert schema_of("test_survey") is _Survey
    good = make(message_type="test_survey", content={"question": "q?", "choices": ["a"]})
    assert decode(encode(good)) == good
    for content, field in [({"question": 3, "choices": []}, "content.question"),
                           ({"choices": []}, "content.question"),
                           ({"question": "q", "choices": [1]}, "content.choices"),
                           ({"question": "q", "choices": [], "x": 1}, "content.x")]:
        with pytest.raises(MessageError) as made:
            make(message_type="test_survey", content=content)
        with pytest.raises(MessageError) as decoded:
            decode(wire(message_type="test_survey", content=content))
        for info in (made, decoded):
            assert info.value.field == field, info.value
            assert "test_survey" in str(info.value) and "_Survey" in str(info.value)
    # Replacing the content (as signing does) checks it again.
    with pytest.raises(MessageError):
        msgspec.structs.replace(good, content={"question": 1, "choices": []})


def test_a_callable_schema_and_the_rules_of_declaring() -> None:
    def positive(content: dict[str, object]) -> None:
        if not isinstance(content.get("n"), int) or content["n"] <= 0:  # type: ignore[operator]
            raise ValueError(f"n must be a positive int, got {content.get('n')!r}")

    message_type("test_count", schema=positive)
    assert make(message_type="test_count", content={"n": 2}).content == {"n": 2}
    with pytest.raises(MessageError, match="n must be a positive int, got -1") as info:
        make(message_type="test_count", content={"n": -1})
    assert info.value.field == "content"
    message_type("test_count", schema=positive)  # the same again: nothing changes
    message_type("test_count")
    with pytest.raises(ValueError, match="already has the schema"):
        message_type("test_count", schema=_Survey)
    with pytest.raises(ValueError, match="is built in"):
        message_type("heartbeat", schema=positive)
    with pytest.raises(TypeError, match=r"msgspec\.Struct type or a callable"):
        message_type("test_other", schema=3)  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="not a message type name"):
        message_type("Test")
    assert schema_of("test_other") is None and schema_of("test_count") is positive


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
        ({"message_type": "Gossip"}, "message_type"),
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
        (wire(message_type="gos-sip"), "message_type"),
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
