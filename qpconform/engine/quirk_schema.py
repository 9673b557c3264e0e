"""The quirk profile format, and the parser that holds every entry to it.

A quirk is a hole in a CI gate, so every condition narrows it; all given
conditions must hold. A profile (fixtures/quirks/<family>.toml; family = device
name without its number: rxe0 -> rxe) lists `[[quirk]]` tables:

    id        unique name (reports cite it)                              required
    rule      model rule id(s) broken; fnmatch globs, string or list     required
    reason    why the device behaves so (one paragraph)                  required
    evidence  list of strings: source lines, spec text, observations     required
    kernel    version range of the running kernel, e.g. ">=6.4,<6.13"
    rdma_core version range of rdma-core, e.g. ">=50"
              (an entry outside its range is not loaded: "not applicable here")
    qp_types  QP type names, e.g. ["UC", "UD"]
    verbs     the record's verb: modify, post_send, post_recv, query, destroy, or on a
              pair completion, event, query, memory
    kinds     what was compared: outcome, state, status, order, completion,
              missing_completion, event, missing_event, readback (an attribute
              query_qp reports; tags "field=NAME", "read=lower|higher"), inconsistent
              (a "may" rule chosen both ways in one situation), memory (a pair's
              target MR bytes: tags "target=NAME", "first_offset=N", "bytes=N")
    observed  table of exact observed values (a list allows several), or a list of
              such tables when the behaviour shows in more than one way:
                outcome = "accepted" | "refused" | "killed" (the call killed the process
                making it: qpconform/adapters/isolated.py)   signal = "SIGFPE" | "hung"
                errno = "EINVAL"
                status = "LOC_QP_OP_ERR" (WC status) state = "ERR" (state read back)
                event = "SQ_DRAINED"                 missing_event = "QP_ACCESS_ERR"
                sq_draining = 0 | 1 (read back)      queue = "send" | "recv"
                field = "max_send_wr" (an ibv_qp_cap field query_qp read back)
    attrs     table of attribute values of the modify, e.g. { path_mtu = 0 }
    context   table of what the engine knew at the step:
                state = "ERR"           the model's state when the divergence was found
                state_before = "SQD"    the state before the step the divergence is
                                        attributed to (the one that made it due)
                transition = "SQD->SQD" that step was this modify
                device_sq_draining = 1  the device reported a running drain just before
                                        the verb (SQD only)
                after = "SQD->RESET"    the QP's last entry into RESET came from SQD
                                        ("RESET->RESET": a modify to RESET from RESET
                                        came after the last entry, or a new QP's)
                since = ["RTS", "ERR"]  the QP entered one of these states at or after
                                        that step
    tags      words the record must carry, e.g. ["resumed_by_rts"]
    mask_without  mask bit names that must NOT be in the modify's mask, e.g. ["STATE"]
    intermittent  why the behaviour may not show in every run (it depends on timing);
              such an entry that matched nothing is reported as "not seen", not stale
    provenance    "observed" (default: seen on a device) or "source" (predicted by reading
              the driver/provider source, never run); every shipped entry sets it. A
              source entry must cite in `evidence` at least one line naming a source file,
              a function and the version read, e.g. "linux v6.1, v6.12
              drivers/infiniband/hw/mlx5/qp.c __mlx5_ib_modify_qp(): ..."
    readback_only  true: only the state query_qp reports is wrong, the QP is where the model
              says (siw 6.1 never sets qp_state): the model does not follow the reported
              state; needs kinds = ["state"]
    feature   the optional feature the entry says the device lacks (one of SQD, SQE,
              ALT_PATH, XRC, RAW_PACKET, RATE_LIMIT), for a "not supported" capability row
    hazard    the verb would crash the machine under test (a known bug that corrupts kernel
              memory): the engine does not send a verb for which this condition holds
              (qpconform/engine/hazards.py), records a known divergence of kind "hazard"
              and skips the step. One of HAZARDS:
                "grows_max_dest_rd_atomic"  a modify the driver stores that sets
                    max_dest_rd_atomic above the value the QP holds
              Needs kinds = ["hazard"] and verbs = ["modify"]; scope it with `kernel`.
    instead   what the device did instead, when the state and queues it reads back do not
              show it by themselves; the engine follows it, so what the quirk causes later
              is not reported again and a different bug after it still is (one of INSTEAD):
                "sends_wait_for_doorbell"  the sends whose completions are missing were
                    never started: they wait in the send queue, and the QP's next accepted
                    post_send in RTS (its doorbell) starts them, before the new WR; nothing
                    they would have caused (an error state, flushes, the peer's receives)
                    happened. Needs kinds = ["missing_completion"].
              Without it the engine follows what it can read: a known wrong state or
              sq_draining is taken from query_qp, a known wrong status or missing
              completion is not owed again.

Example:

    [[quirk]]
    id = "rxe.path_mtu_zero_accepted"
    rule = "attr.path_mtu.range"
    kinds = ["outcome"]
    observed = { outcome = "accepted" }
    attrs = { path_mtu = 0 }
    reason = "..."
    evidence = ["..."]

A source entry that matched a divergence in a run is reported as confirmed (observed);
one that matched nothing is stale like any other entry.
"""

from __future__ import annotations

import errno as errno_mod
import re
from collections.abc import Sequence
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from models.capabilities import FEATURES
from models.enums import Attr, EventType, QPState, QPType, WCStatus
from models.returned import CAP_FIELDS

KINDS = (
    "outcome", "state", "status", "order", "completion", "missing_completion", "event",
    "missing_event", "inconsistent", "readback", "fields", "hazard", "memory",
)
VERBS = (
    "modify", "post_send", "post_recv", "query", "destroy", "completion", "event", "settle",
    "memory", "create",  # create: what create_qp / create_cq returned (engine/returned.py)
)
_STATES = tuple(s.name for s in QPState if s <= QPState.ERR)
_OBSERVED: dict[str, tuple[str, ...]] = {
    "outcome": ("accepted", "refused", "killed"),
    "signal": ("SIGFPE", "SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT", "hung"),
    "errno": tuple(sorted({*errno_mod.errorcode.values(), "EOPNOTSUPP"})),
    "status": tuple(s.name for s in WCStatus),
    "state": _STATES,
    "event": tuple(e.name for e in EventType),
    "missing_event": tuple(e.name for e in EventType),
    "sq_draining": ("0", "1"),
    "queue": ("send", "recv"),
    "field": CAP_FIELDS,
}
_CONTEXT: dict[str, tuple[str, ...] | None] = {
    "state": _STATES,
    "state_before": _STATES,
    "device_sq_draining": ("0", "1"),
    "after": None,  # CUR->NXT, checked below
    "transition": None,
    "since": _STATES,
}
_REQUIRED = ("id", "rule", "reason", "evidence")
_KEYS = {
    *_REQUIRED, "kernel", "rdma_core", "qp_types", "verbs", "kinds", "observed", "attrs",
    "context", "tags", "mask_without", "intermittent", "provenance", "feature",
    "readback_only", "instead", "hazard",
}
OBSERVED = "observed"
SOURCE = "source"
PROVENANCES = (OBSERVED, SOURCE)
# FEATURES (models/capabilities.py): what an entry's `feature` may say the device lacks.
#: What a device may do instead of what the model expects, for the engine to follow.
SENDS_WAIT_FOR_DOORBELL = "sends_wait_for_doorbell"
INSTEAD = (SENDS_WAIT_FOR_DOORBELL,)
#: Conditions under which a verb is not sent (qpconform/engine/hazards.py CONDITIONS).
HAZARDS = ("grows_max_dest_rd_atomic",)
#: What a source entry's citation must name: a source file, a function and a version.
_CITED_FILE = re.compile(r"[\w.-]+(?:/[\w.-]+)*\.[ch]\b")
_CITED_FUNCTION = re.compile(r"\b\w+\(\)")
_CITED_VERSION = re.compile(r"\bv\d+(?:\.\d+)*\b")


def cites_source(line: str) -> bool:
    """Does an evidence line name a source file, a function and a version?"""
    return all(p.search(line) for p in (_CITED_FILE, _CITED_FUNCTION, _CITED_VERSION))


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ValueError(f"{where}: {key} must be a non-empty string or list of strings")


def _choices(value: Any, key: str, where: str, allowed: Sequence[str] | None) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{where}: {key} must be a value or a list of values")
    found = tuple(str(v) for v in items)
    bad = [v for v in found if allowed is not None and v not in allowed]
    if bad:
        shown = ", ".join(allowed[:12]) + (", ..." if len(allowed) > 12 else "")
        raise ValueError(f"{where}: {key} = {bad[0]!r} is not one of: {shown}")
    return found


def _table(entry: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {key} must be a table, e.g. {key} = {{ name = value }}")
    return value


def _observed(entry: dict[str, Any], where: str) -> tuple[dict[str, tuple[str, ...]], ...]:
    given = entry.get("observed", [])
    tables = given if isinstance(given, list) else [given]
    out = []
    for table in tables:
        if not isinstance(table, dict) or not table:
            raise ValueError(
                f"{where}: observed must be a table, e.g. observed = {{ errno = \"EINVAL\" }}, "
                "or a list of tables"
            )
        unknown = set(table) - _OBSERVED.keys()
        if unknown:
            raise ValueError(
                f"{where}: observed.{sorted(unknown)[0]} is not a known observation "
                f"(allowed: {', '.join(_OBSERVED)})"
            )
        out.append({k: _choices(v, f"observed.{k}", where, _OBSERVED[k]) for k, v in table.items()})
    return tuple(out)


def _context(entry: dict[str, Any], where: str) -> dict[str, tuple[str, ...]]:
    table = _table(entry, "context", where)
    unknown = set(table) - _CONTEXT.keys()
    if unknown:
        raise ValueError(
            f"{where}: context.{sorted(unknown)[0]} is not known (allowed: {', '.join(_CONTEXT)})"
        )
    out = {k: _choices(v, f"context.{k}", where, _CONTEXT[k]) for k, v in table.items()}
    for hop in (*out.get("after", ()), *out.get("transition", ())):
        cur, _, nxt = hop.partition("->")
        if cur not in _STATES or nxt not in _STATES:
            raise ValueError(
                f"{where}: context value {hop!r} must read CUR->NXT, e.g. SQD->RESET"
            )
    return out


def _attrs(entry: dict[str, Any], where: str) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for name, value in _table(entry, "attrs", where).items():
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise ValueError(f"{where}: attrs.{name} must be an integer or a list of integers")
        out[name] = tuple(items)
    return out


def _spec(entry: dict[str, Any], key: str, where: str) -> SpecifierSet | None:
    if key not in entry:
        return None
    try:
        return SpecifierSet(str(entry[key]))
    except InvalidSpecifier:
        raise ValueError(
            f"{where}: {key} = {entry[key]!r} is not a version range (e.g. \">=6.4,<6.13\")"
        ) from None


def quirk_fields(entry: Any, where: str) -> dict[str, Any]:
    """The fields of the Quirk one `[[quirk]]` table describes (ValueError naming the
    entry and the key on any mistake)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: each [[quirk]] must be a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
            f"(allowed: {', '.join(sorted(_KEYS))})"
        )
    for key in _REQUIRED:
        if not entry.get(key):
            raise ValueError(f"{where}: {key} is required")
    if not isinstance(entry["id"], str):
        raise ValueError(f"{where}: id must be a string")
    where = f"{where} ({entry['id']})"
    lists: dict[str, Any] = {}
    for key, allowed in (
        ("qp_types", [t.name for t in QPType]), ("verbs", VERBS), ("kinds", KINDS),
        ("mask_without", [b.name for b in Attr]),
    ):
        if key in entry:
            lists[key] = _choices(entry[key], key, where, allowed)
    if "tags" in entry:
        lists["tags"] = _strings(entry["tags"], "tags", where)
    if "intermittent" in entry:
        lists["intermittent"] = _strings(entry["intermittent"], "intermittent", where)[0]
    for key, allowed in (
        ("provenance", PROVENANCES), ("feature", FEATURES), ("instead", INSTEAD),
        ("hazard", HAZARDS),
    ):
        if key in entry:
            value = entry[key]
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(
                    f"{where}: {key} = {value!r} is not allowed (allowed: {', '.join(allowed)})"
                )
            lists[key] = value
    if "readback_only" in entry:
        if not isinstance(entry["readback_only"], bool):
            raise ValueError(f"{where}: readback_only must be true or false")
        if entry["readback_only"] and lists.get("kinds") != ("state",):
            raise ValueError(f'{where}: readback_only needs kinds = ["state"] (only a state '
                             "read back can be wrong while the QP is right)")
        lists["readback_only"] = entry["readback_only"]
    if "instead" in lists and lists.get("kinds") != ("missing_completion",):
        raise ValueError(f'{where}: instead = "{lists["instead"]}" needs kinds = '
                         '["missing_completion"] (it says why completions are missing)')
    hazard_shape = ("hazard" in lists, lists.get("kinds"), lists.get("verbs"))
    if ("hazard" in lists or "hazard" in lists.get("kinds", ())) and hazard_shape != (
        True, ("hazard",), ("modify",)
    ):
        raise ValueError(f'{where}: a hazard entry needs hazard = "NAME", kinds = ["hazard"] '
                         'and verbs = ["modify"], and kind "hazard" needs a hazard')
    evidence = _strings(entry["evidence"], "evidence", where)
    if lists.get("provenance") == SOURCE and not any(cites_source(e) for e in evidence):
        raise ValueError(
            f"{where}: a provenance = \"source\" entry needs an evidence line naming a source "
            "file, a function and the version read, e.g. \"linux v6.12 "
            "drivers/infiniband/hw/mlx5/qp.c __mlx5_ib_modify_qp(): ...\""
        )
    return {
        "id": entry["id"],
        "rules": _strings(entry["rule"], "rule", where),
        "reason": str(entry["reason"]).strip(),
        "evidence": evidence,
        "kernel": _spec(entry, "kernel", where),
        "rdma_core": _spec(entry, "rdma_core", where),
        "observed": _observed(entry, where),
        "attrs": _attrs(entry, where),
        "context": _context(entry, where),
        **lists,
    }
