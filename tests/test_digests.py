"""Every shipped scenario's seed-0 deterministic trace digest, pinned.

A digest is a function of the seed and the scenario only (docs/runtime.md, "The
trace"): any change to what a run does, or to the order it does it in, shows
here. The values changed once, with the message-path work of issue 7 (a
request's id doubles as its correlation id, message ids are decimal, and a
wait's timeout lives in a deadline queue swept by one timer per actor; see
docs/runtime.md); a change to them must be explained the same way.

They changed again with issue 23's joins (finding 4): a join's and session_get_state's
questions to the regions and tasks services name the page they want (``offset``,
``limit``, ``claims_of``, ``agents``), so those internal letters, and with them every
run that joins a session, read differently; no tool's answer below 100 items changed.
"""

from __future__ import annotations

import pytest

import barnraise

DIGESTS_SEED_0 = {
    "async_delegation": "d5c7c7a92ee2e96db51c05caa64a3e8745cac198e6c304dd80b9b5ff0d2a99f1",
    "best_of_n": "6366177a0a688d76b98b1bcab87eac3ae7b1d42b3e7a770bf28033ec6d519b7a",
    "checkpoint_rollback": "9a51b73508b687979b2e23ec41b505b3b13a468254e1080e8c8f6e3aea95ca3b",
    "conflict_resolution": "d131fcea86c1c182313bdcb08e0f82e10b8cdd440548e5b75e6b498b5c09f3ab",
    "conflict_storm": "0772b6469d67f2cb342e9bc31ba2fb189e2004f8d1ad1d4aea91cc3369f1ce0e",
    "delegation_chain": "179ff8f60dc4abe4c6f921823062b1d638ba24f564b22e392f404e56398c3f45",
    "grid_build": "6d0195113c125e0c38ea8da09d1cbc8209ab66b187aeffb22e1fe169d8f8b3c4",
    "hitl_approval": "38b3f00bd38d7e4a37dd962be3ca8d93e195e8a88d276e0ef58fea70ec10eb0a",
    "kernel_build": "71a1c391c442e311d7867b724c35f9575850631581694371bf04b0871d383360",
    "locks_barriers": "12fe98547d856c574de75bd2d56eec44a9600e218b10429038ccd68683c0d3ea",
    "mode_comparison": "2e3721b1f3a7feefb30025e63bf1dd1b9a75f1232072217fc7508994e714979a",
    "parallel_build": "4d5fda5becd54f2b8ca40dd9f54af943c7d94255e5876e97737ed337c4258215",
    "parallel_speedup": "00de8bef9b9760e1e4363e1a403a4c314b9f6d4f7233d2f7dd517a9e63f447a3",
    "permissions": "8d7fe667076d54653b6810ac1c733b9ce80fc5a60db893973e325668cc696570",
    "plan_run": "989b14e530a43694aa2641e94b67a8ddcbd4939d32f3d5314b2bc12bcd02750b",
    "writer_critic": "87bf849018d8ef8812eb60b2cc785dec1b7b0e4581a7d2e785cd7a0b4c45e8cc",
}


def test_every_shipped_scenario_is_pinned() -> None:
    from barnraise.runner import list_scenarios

    assert set(DIGESTS_SEED_0) == {name for name, _ in list_scenarios()}


@pytest.mark.parametrize("name", sorted(DIGESTS_SEED_0))
def test_the_seed_0_digest_of_each_scenario_is_unchanged(name: str) -> None:
    result = barnraise.run(name, seed=0)
    assert result.success, result.summary
    assert result.trace_digest == DIGESTS_SEED_0[name]


def test_a_redacted_trace_shows_the_stand_in_everywhere_and_digests_line_by_line() -> None:
    """The digest (encoded a block at a time) is the SHA-256 of every record's own JSON
    line, as shown; a secret is replaced in every way out, in every record that has it,
    and the records in memory keep what was delivered."""
    import hashlib

    from sim.trace import Trace

    trace = Trace()
    trace.redact("s3cret", "tok-1")
    trace.redact("other", "tok-2")
    contents = [b'{"a":"s3cret"}', b'{"b":1}', b'["other","s3cret","s3cret"]', b'"plain"']
    for n in range(5000):  # more than one block of the digest
        trace.append(n * 0.5, "deliver", "x", "y", "t", contents[n % len(contents)])
    shown = list(trace.records())
    assert shown[0].content == b'{"a":"tok-1"}'
    assert shown[2].content == b'["tok-2","tok-1","tok-1"]'
    assert all(b"s3cret" not in r.content and b"other" not in r.content for r in shown)
    assert list(trace.records_from(4, 8)) == shown[4:8]
    assert trace.shown_from(4, 8) == [tuple(r)[1:] for r in shown[4:8]]
    assert trace._records[2][5] == contents[2]  # what was delivered is kept
    expected = hashlib.sha256(b"".join(r.to_json() + b"\n" for r in shown)).hexdigest()
    half = hashlib.sha256(b"".join(r.to_json() + b"\n" for r in shown[:4100])).hexdigest()
    partial = Trace()
    partial.redact("s3cret", "tok-1")
    partial.redact("other", "tok-2")
    for r in list(trace._records)[:4100]:
        partial.add_record(r)
    assert partial.digest == half  # asked part way, then caught up
    for r in list(trace._records)[4100:]:
        partial.add_record(r)
    assert partial.digest == trace.digest == expected
