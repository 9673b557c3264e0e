"""One vocabulary for records: mask bits and their fields, errnos, expectations and results.

Every divergence, step and reproducer describes verbs with these words, so a lone
QP and a pair read the same in a report, and quirk files match one set of tags.
"""

from __future__ import annotations

import errno as errno_mod
import functools
from collections.abc import Mapping

from models.enums import Attr, WCOpcode, WCStatus
from models.outcomes import Expectation, ExpectedCompletion, Outcome

from .device import Completion, VerbResult

#: The flat attrs fields each mask bit carries (the keys of an attrs dict).
ATTR_FIELDS: dict[Attr, tuple[str, ...]] = {
    Attr.STATE: ("qp_state",),
    Attr.CUR_STATE: ("cur_qp_state",),
    Attr.EN_SQD_ASYNC_NOTIFY: ("en_sqd_async_notify",),
    Attr.ACCESS_FLAGS: ("qp_access_flags",),
    Attr.PKEY_INDEX: ("pkey_index",),
    Attr.PORT: ("port_num",),
    Attr.QKEY: ("qkey",),
    Attr.AV: ("ah_port_num", "ah_sgid_index"),
    Attr.PATH_MTU: ("path_mtu",),
    Attr.TIMEOUT: ("timeout",),
    Attr.RETRY_CNT: ("retry_cnt",),
    Attr.RNR_RETRY: ("rnr_retry",),
    Attr.RQ_PSN: ("rq_psn",),
    Attr.MAX_QP_RD_ATOMIC: ("max_rd_atomic",),
    Attr.ALT_PATH: ("alt_port_num", "alt_timeout", "alt_ah_port_num"),
    Attr.MIN_RNR_TIMER: ("min_rnr_timer",),
    Attr.SQ_PSN: ("sq_psn",),
    Attr.MAX_DEST_RD_ATOMIC: ("max_dest_rd_atomic",),
    Attr.PATH_MIG_STATE: ("path_mig_state",),
    Attr.CAP: (),
    Attr.DEST_QPN: ("dest_qp_num",),
    Attr.RATE_LIMIT: ("rate_limit",),
}


def mask_names(mask: int) -> list[str]:
    """Names of the mask's bits; bits without a name as BIT<n>."""
    return list(_mask_names(int(mask)))


_KNOWN_BITS = sum(int(b) for b in Attr)


@functools.lru_cache(maxsize=4096)  # every modify's step names its mask
def _mask_names(mask: int) -> tuple[str, ...]:
    unknown = mask & ~_KNOWN_BITS
    return (*Attr(mask & _KNOWN_BITS).names(), *(f"BIT{i}" for i in range(64) if unknown >> i & 1))


#: Widths (bits) of the narrow fields of struct ibv_qp_attr / ibv_ah_attr (the rest are 32):
#: a value handed to pyverbs must fit its C field.
C_FIELD_BITS: dict[str, int] = dict.fromkeys(
    (
        "port_num", "ah_port_num", "alt_port_num", "ah_sgid_index", "timeout", "alt_timeout",
        "retry_cnt", "rnr_retry", "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic",
        "en_sqd_async_notify",
    ),
    8,
) | {"pkey_index": 16}


@functools.lru_cache(maxsize=4096)
def mask_fields(mask: int) -> tuple[str, ...]:
    """The attribute fields a mask selects, in ABI bit order (cached: masks repeat)."""
    return tuple(f for bit, fields in ATTR_FIELDS.items() if int(bit) & mask for f in fields)


def masked_attrs(attrs: Mapping[str, int], mask: Attr) -> dict[str, int]:
    """The fields the mask selects, in ABI bit order (what a reproducer must set)."""
    return {f: int(attrs[f]) for f in mask_fields(int(mask)) if f in attrs}


def errno_name(code: int | None) -> str:
    """EINVAL for 22, EOPNOTSUPP for 95 (not its alias ENOTSUP); 'no errno' for None."""
    if code is None:
        return "no errno"
    if code == errno_mod.EOPNOTSUPP:
        return "EOPNOTSUPP"
    return errno_mod.errorcode.get(code, str(code))


def completion_text(c: ExpectedCompletion | Completion) -> str:
    """'wr 7 send WR_FLUSH_ERR' ('REM_ACCESS_ERR|REM_INV_REQ_ERR' where a "may" rule lets
    the device choose: ExpectedCompletion.statuses)."""
    others = getattr(c, "statuses", None)
    names = [WCStatus(c.status).name, *sorted(WCStatus(s).name for s in others[0])] if (
        others is not None) else [WCStatus(c.status).name]
    return f"wr {c.wr_id} {c.queue} {'|'.join(names)}"


def fields_text(wc: Completion) -> str:
    """'opcode RECV, imm 0x5a000007' (what a completion says beyond its status)."""
    opcode = "opcode ?" if wc.opcode is None else f"opcode {WCOpcode(wc.opcode).name}"
    imm = "no immediate data" if wc.imm_data is None else f"imm 0x{wc.imm_data:08x}"
    data = "" if wc.data is None else f", {wc.data} data"
    more = "".join(f", {name} {value:#x}" if name != "byte_len" else f", {name} {value}"
                   for name, value in (("wc_flags", wc.wc_flags), ("byte_len", wc.byte_len),
                                       ("src_qp", wc.src_qp)) if value is not None)
    return f"{opcode}, {imm}{data}{more}"


def describe_expectation(exp: Expectation) -> str:
    """The model's verdict in words."""
    errnos = "any errno" if exp.errnos is None else "/".join(sorted(map(errno_name, exp.errnos)))
    before, after = exp.state_before.name, exp.state_if_accepted.name
    if exp.verb == "modify":
        accept = f"accepted, {before}->{after}"
    elif exp.verb == "query":
        accept = f"state {before}"
    else:
        accept = "accepted"
    if exp.completions:
        accept += ", then " + ", ".join(completion_text(c) for c in exp.completions)
    if exp.outcome is Outcome.ACCEPT:
        return accept
    if exp.outcome is Outcome.REFUSE:
        return f"refused ({errnos}), state stays {before}"
    return f"{accept}, or refused ({errnos})"


def describe_result(res: VerbResult, state: object | None = None) -> str:
    """The device's answer in words (with the state read back, if any)."""
    text = "accepted" if res.accepted else f"refused ({errno_name(res.errno)})"
    if res.killed:
        text = f"the calling process was killed ({res.killed})"
    name = getattr(state, "name", None)
    return text if name is None else f"{text}, state {name}"


def outcome_tags(res: VerbResult) -> list[str]:
    """The words a quirk's `observed` key matches for a verb's outcome."""
    if res.killed:
        return ["outcome=killed", f"signal={res.killed}"]
    if res.accepted:
        return ["outcome=accepted"]
    return ["outcome=refused", f"errno={errno_name(res.errno)}"]
