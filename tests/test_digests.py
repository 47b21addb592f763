"""Every shipped scenario's seed-0 deterministic trace digest, pinned.

A digest is a function of the seed and the scenario only (docs/runtime.md, "The
trace"): any change to what a run does, or to the order it does it in, shows
here. The values changed once, with the message-path work of issue 7 (a
request's id doubles as its correlation id, message ids are decimal, and a
wait's timeout lives in a deadline queue swept by one timer per actor; see
docs/runtime.md), and once more with issue 23: every role agent (``Participant``)
heartbeats every 5 simulated seconds by default, so the registry notices one that
vanishes (its heartbeats are letters in the trace). A change to them must be explained
the same way.
"""

from __future__ import annotations

import pytest

import barnraise

DIGESTS_SEED_0 = {
    "async_delegation": "0412dc130fabfff2b1b9a88bef35387b389af547bdadf3e4defea3a3d440ab23",
    "best_of_n": "5b1f937b0e96302fa8fb1801e82e0035a2f072c0f98acdb2a68505593be6abad",
    "checkpoint_rollback": "84367c9f5a4bb220304e32485cc1a35037463c77ea3f1cbdc9f37b1eeab44f6b",
    "conflict_resolution": "6570cf717710c8427f59b989a4c51ee0af0620babfcda9e58707dad6e3932f00",
    "conflict_storm": "aff015dcacd1130388df38cca0d820899c56d976c1bd021bacd8440f1e454bbd",
    "delegation_chain": "7f47b36a48e482fb5fc25f9d968e0d0e0537ca089734c5a7af3258f8688bf9dd",
    "grid_build": "4cd5d8585132be959569c7f20aca2e5e1e088770588dcab621cc880d28090f18",
    "hitl_approval": "6080fa06f81c10b43e080221ed842c4b6b28f090fe9537c95ae1a11c840f2519",
    "kernel_build": "5b6be44644670a04fe289ebf70528a2e7b83c936f2f098b08bc39cd5db792aeb",
    "locks_barriers": "d73b65d8c46b46423c8b224037a453fca939abad3161a7ca84203f3b6510481a",
    "mode_comparison": "ffea84b3446bec1a5ac7c9d3a5f93566f00972d986e7f70c377cf420b1afdded",
    "parallel_build": "037dcb07658d9e626be849756e1060dbc4f324cd7cb4130cee3c3514a6b14ddc",
    "parallel_speedup": "43e87410230192c608a4a1dbf9d686f111b9398bb21268ff2f9fc3990d386975",
    "permissions": "9d052ecd9ef5538ea775b3b66d8269f4ee674ade7c072b77ff36ee71c1364a37",
    "plan_run": "a551aa4a46ee79ebc2538f01a7db63954bd2bf9b8ae42a5c27ce564e83507ae5",
    "writer_critic": "349545cb66be3551ec6f04a3821c3d6e37d7eec6a1ee9ae09f421ee48e1ca9a5",
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
