"""Every shipped scenario's seed-0 deterministic trace digest, pinned.

A digest is a function of the seed and the scenario only (docs/runtime.md, "The
trace"): any change to what a run does, or to the order it does it in, shows
here. The values changed once, with the message-path work of issue 7 (a
request's id doubles as its correlation id, message ids are decimal, and a
wait's timeout lives in a deadline queue swept by one timer per actor; see
docs/runtime.md). They changed twice with issue 23: a join's and session_get_state's
questions to the regions and tasks services name the page they want (``offset``,
``limit``, ``claims_of``, ``agents``), so those internal letters, and with them every
run that joins a session, read differently (no tool's answer below 100 items changed);
and every role agent (``Participant``) heartbeats every 5 simulated seconds by default,
so the registry notices one that vanishes (its heartbeats are letters in the trace). A
change to them must be explained the same way.
"""

from __future__ import annotations

import pytest

import barnraise

DIGESTS_SEED_0 = {
    "async_delegation": "f9adc92e9655f3cb530a68ab4271586da96c361d3bc146df4e3ea175f151cab8",
    "best_of_n": "f00db7c923b3e401ca083d322fd5846adb280c635c7fa531c8b42645fed531bc",
    "checkpoint_rollback": "fafe6085142c08e12d76bd95e11523bf96d0b0578bbeb5d3808f871678dd688c",
    "conflict_resolution": "f5558dcf4f05f0d4edb9c5132b7a7afb3c3ed5e4c2c482610449bf8071bc6a7b",
    "conflict_storm": "296e8b3b465c53ffca857fe63ea40e2360266503116df3fc2dd1821b299f3b38",
    "delegation_chain": "37c647963d5369952ab95e4715e69d78901c4c4d78d300baf125ae310ef68ced",
    "grid_build": "45f30130372a56f4d4c2dd70093c4cee486dddeeb4def564fd8f39e698550ee6",
    "hitl_approval": "6a2034212f66304fc4d6f1a3e5ff17bda6eec12aaf8d170b99fe1b2c141d8beb",
    "kernel_build": "a729b10f1b2857fd3b4f785a79004894fc95d08f5249d913f7ed51ea42d39f93",
    "locks_barriers": "4e97fbe234ef8ecc3408bab77a642725117ba8c941f85d6dae2339f187739d53",
    "mode_comparison": "46de6912f6023ba70d129a91745d4ad24e324cb16b79cc04e3d9aadab1c1337f",
    "parallel_build": "be2ca8e22200406744789dda159a286ddd098c14005d3119cbbe3a0aa75c972b",
    "parallel_speedup": "3e6b39a33c750935b27f2732527223e18c1c74089e9f3483e7e518b2bc33ee4e",
    "permissions": "37a4e25f46f082a33eacdd288d86eb91a7bd703ce7b5a5d5fa67ac523ffe5989",
    "plan_run": "a01da4f63a362c35540fc416bb931d6feaf0ed0a6e051c71c07b2fb255df2216",
    "writer_critic": "1b0fd50e283f2a0662e559bfdd655f47e196fd6cffe480ce0a5bd77affa6de25",
}


def test_every_shipped_scenario_is_pinned() -> None:
    from barnraise.loading import list_scenarios

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

    from barnraise.sim.trace import Trace

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
