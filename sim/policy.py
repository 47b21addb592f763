"""Who may call which tool: the design notes' role matrix, refined by rules.

A rule names a subject (an agent, by its id; a role; or ``*``), a tool (exact,
a ``*`` pattern such as ``task_*``, or ``*``) and an effect (allow or deny). For a
call, every rule that matches is considered and the most specific wins:

1. a rule for the agent beats one for its role, which beats one for ``*``;
2. then an exact tool beats a pattern, which beats ``*``;
3. on a tie, deny wins.

The default matrix is a set of role rules for exact tools, so a user rule beats it
only if it is at least as specific. Anything no rule matches is denied.

Rules come from a list of dicts, a dict with a ``rules`` key, or a YAML/JSON file
with either shape::

    rules:
      - {role: builder, tool: task_delegate, allow: true}
      - {agent: Observer-2, tool: "builder_*", allow: true}
      - {role: "*", tool: a2a_broadcast, allow: false}
"""

from __future__ import annotations

import fnmatch
import json
import pathlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DEFAULT_MATRIX", "OPEN_TOOLS", "Policy", "PolicyError", "Rule"]

#: Tools anyone may call, member or not yet: they create or change membership.
OPEN_TOOLS: Final = frozenset({"session_create", "session_join", "session_leave"})

_READS: Final = frozenset({"session_get_state", "region_query", "task_get_queue",
                           "a2a_discover", "a2a_subscribe"})
_TALK: Final = frozenset({"a2a_send_message", "a2a_broadcast", "a2a_lock_acquire",
                          "a2a_lock_renew", "a2a_lock_release", "a2a_barrier_enter"})
_BUILD: Final = frozenset({"region_claim", "region_renew", "region_release", "builder_place_tile",
                           "builder_place_tiles", "builder_load_shader",
                           "builder_assemble_cartridge"})
_TASK_WORK: Final = frozenset({"task_accept", "task_report"})
#: Seed 004's alert tool: any member who works may tell the session something is wrong.
_ALERT: Final = frozenset({"alert_raise"})

DEFAULT_MATRIX: Final[Mapping[str, frozenset[str]]] = {
    # The design notes: the architect may do everything but build_test.
    "architect": _READS | _TALK | _BUILD | _TASK_WORK | _ALERT | frozenset({
        "task_delegate", "task_add_dependencies", "build_checkpoint", "build_rollback",
        "blueprint_set", "plan_start",
        "approval_respond"}),
    "builder": _READS | _TALK | _BUILD | _TASK_WORK | _ALERT,
    "tester": _READS | _TALK | _TASK_WORK | _ALERT | frozenset({"build_test"}),
    "observer": _READS,
}


class PolicyError(ValueError):
    """A rule (or rules file) is malformed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Rule:
    subject_kind: str  # "agent" | "role" | "any"
    subject: str
    tool: str
    allow: bool

    @property
    def specificity(self) -> tuple[int, int]:
        subject = {"agent": 2, "role": 1, "any": 0}[self.subject_kind]
        if self.tool == "*":
            tool = 0
        elif any(c in self.tool for c in "*?["):
            tool = 1
        else:
            tool = 2
        return subject, tool

    def matches(self, agent_id: str, role: str, tool: str) -> bool:
        # An agent rule names an agent id, the identity the caller authenticated as: a
        # display name is unique only within one session, so any session's "Foreman"
        # would have matched a rule for "Foreman".
        if self.subject_kind == "agent" and self.subject != agent_id:
            return False
        if self.subject_kind == "role" and self.subject not in ("*", role):
            return False
        return self.tool == "*" or fnmatch.fnmatchcase(tool, self.tool)


def _parse_rule(raw: Any, index: int) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: expected an object, got {raw!r}")
    unknown = set(raw) - {"agent", "role", "tool", "allow", "effect"}
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {sorted(unknown)}")
    if "agent" in raw and "role" in raw:
        raise PolicyError(f"{where}: give an agent or a role, not both")
    if "agent" in raw:
        kind, subject = "agent", raw["agent"]
    elif "role" in raw:
        kind, subject = "role", raw["role"]
    else:
        raise PolicyError(f"{where}: needs an agent or a role (\"*\" for everyone)")
    if not isinstance(subject, str) or not subject:
        raise PolicyError(f"{where}: the subject must be a non-empty string, got {subject!r}")
    if kind == "role" and subject == "*":
        kind = "any"
    tool = raw.get("tool")
    if not isinstance(tool, str) or not tool:
        raise PolicyError(f"{where}.tool: expected a tool name or pattern, got {tool!r}")
    if "allow" in raw:
        allow = raw["allow"]
        if not isinstance(allow, bool):
            raise PolicyError(f"{where}.allow: expected true or false, got {allow!r}")
    elif raw.get("effect") in ("allow", "deny"):
        allow = raw["effect"] == "allow"
    else:
        raise PolicyError(f"{where}: needs allow: true|false (or effect: allow|deny)")
    return Rule(kind, subject, tool, allow)


class Policy:
    """An immutable rule set; safe to share between actors and threads."""

    def __init__(self, rules: Iterable[Rule] = (), *, defaults: bool = True) -> None:
        base = [Rule("role", role, tool, True)
                for role, tools in DEFAULT_MATRIX.items() for tool in sorted(tools)]
        self.rules: tuple[Rule, ...] = (*(base if defaults else ()), *rules)
        # Every tool call asks; the rules never change, so each answer is kept.
        # (A dict read or write is atomic, so threads may share the cache.)
        self._decided: dict[tuple[str, str, str], bool] = {}

    @classmethod
    def load(cls, source: Any = None, *, defaults: bool = True) -> Policy:
        """From None (the default matrix), a Policy, rules, a dict, or a file path."""
        if source is None:
            return cls(defaults=defaults)
        if isinstance(source, Policy):
            return source
        if isinstance(source, (str, pathlib.Path)):
            path = pathlib.Path(source)
            try:
                text = path.read_text()
            except OSError as exc:
                raise PolicyError(f"policy file {str(path)!r}: {exc.strerror}") from None
            source = _parse_text(text, path)
        if isinstance(source, Mapping):
            if set(source) - {"rules"}:
                raise PolicyError(f"policy: unknown key(s) {sorted(set(source) - {'rules'})}")
            source = source.get("rules", [])
        if not isinstance(source, (list, tuple)):
            raise PolicyError(f"policy: expected a list of rules, got {type(source).__name__}")
        return cls([_parse_rule(r, i) for i, r in enumerate(source)], defaults=defaults)

    def decide(self, tool: str, *, role: str, agent_id: str = "") -> bool:
        """True if the most specific matching rule allows the call; False if none matches."""
        if tool in OPEN_TOOLS:
            return True
        key = (tool, role, agent_id)
        known = self._decided.get(key)
        if known is None:
            known = self._decided[key] = self._decide(tool, role, agent_id)
        return known

    def _decide(self, tool: str, role: str, agent_id: str) -> bool:
        best: tuple[int, int] | None = None
        allowed = False
        for rule in self.rules:
            if not rule.matches(agent_id, role, tool):
                continue
            spec = rule.specificity
            if best is None or spec > best:
                best, allowed = spec, rule.allow
            elif spec == best and not rule.allow:
                allowed = False  # a tie: deny wins
        return allowed


def _parse_text(text: str, path: pathlib.Path) -> Any:
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(f"policy file {str(path)!r}: {exc}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"policy file {str(path)!r}: {exc}") from None
