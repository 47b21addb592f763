"""Every shipped scenario's seed-0 deterministic trace digest, pinned.

A digest is a function of the seed and the scenario only (docs/runtime.md, "The
trace"): any change to what a run does, or to the order it does it in, shows
here. The values changed once, with the message-path work of issue 7 (a
request's id doubles as its correlation id, message ids are decimal, and a
wait's timeout lives in a deadline queue swept by one timer per actor; see
docs/runtime.md); a change to them must be explained the same way.
"""

from __future__ import annotations

import pytest

import barnraise

DIGESTS_SEED_0 = {
    "async_delegation": "fd07e99d536de71e4736c32a591439cd314e98d104e155ff331893b364826e30",
    "best_of_n": "c7c89e799bf9142378be1dfe02fef003da769818f06af4e1a982ec6f13239fc0",
    "checkpoint_rollback": "6694fef50afa2b382f00e3e7e920da41f8eb60eb1d368f254229dc3a7a76331e",
    "conflict_resolution": "621df3b52864f93f3be3b8d02133217903090a10c5c2aac80fcf4b76f80948af",
    "conflict_storm": "56eab71db7ded282c24729de11fa77b4557d51be54b9da504ee1065bf664e942",
    "delegation_chain": "53b7f183ef2ed1811c3e92b5659ba57e6031ba233e717d88a08620edece9cf94",
    "grid_build": "8c309810310f00322063a67c853b9939b3c190ffd4781653be44c49ce3a362ca",
    "hitl_approval": "d85bca6f006d4353bf408bbc1bfa6e1d995c09c3251dea8b30db90d0920ba0eb",
    "kernel_build": "940f77f22a39b19a7b67b1dfaf86e668c85ff01818b0280d0a37e19d91fa6b68",
    "locks_barriers": "c63694daf1976cad1aab0555f8ac4dae248051c116a77954fad6db9ec4bc7a23",
    "mode_comparison": "a79de7f0851b29ccfe6678c0f6529259ccc972f2e579e00f674820028d944a47",
    "parallel_build": "0f7056614c80e092b1f9f18068a77e5f7cb9c80ae2e95251024663e68a4ec589",
    "parallel_speedup": "62e0ebc296cdef9a92a088d490ae3ab59cec26fbacdafdbe2b9757123095f6cc",
    "permissions": "b2ddc2e18be7e5d956344a8a0750e4874e84bbfd1c145e828347d753ca9b02d6",
    "plan_run": "f48c4ad638dbe9f1583df73a015fae8da24c0b351d7485afe9657267adb1985d",
    "writer_critic": "f64d4d3a8c174a689f44fbaefc5f532160326ad39dbea85e79e3b8aa7956d0f5",
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
