"""The field ledger: every field a verb the suites call hands back, and what checks it.

A conformance suite is blind where its model says nothing: a driver that writes a wrong
value into a field nobody compares passes. This ledger lists, per structure a verb
returns (libibverbs' struct and field names, verbs.h), every field, with the rule ids
that check it (they must exist in the catalog, models/catalog.py) or the written reason
it is not checked. `python -m models fields-doc` renders it as docs/fields.md; the
self-tests (tests/test_fields_ledger.py) fail when the document is stale, an entry names
no rule and gives no reason, a rule is unknown, or a field the adapters read from pyverbs
has no entry (tests/test_vm_fields.py: every public field of pyverbs' classes, in the
guest).

Partial coverage is said in `note`: a field checked on some opcodes or QP types only.
"""

from __future__ import annotations

from dataclasses import dataclass

_ISSUE = "issue 45"


@dataclass(frozen=True)
class Field:
    """One field of one returned structure: the rules that check it, or why none does."""

    struct: str  # "ibv_wc", "ibv_qp_attr", ... ("payload" for the bytes a WR moves)
    name: str  # the field as verbs.h names it ("ah_attr.port_num": a nested one)
    verbs: str  # the verbs that return it
    rules: tuple[str, ...] = ()
    reason: str = ""  # why it is not checked (given when `rules` is empty)
    note: str = ""  # where a checked field is checked, where not


def _f(struct: str, name: str, verbs: str, *rules: str, reason: str = "",
       note: str = "") -> Field:
    return Field(struct, name, verbs, tuple(rules), reason, note)


def _not(why: str) -> str:
    """A reason a field is not checked yet: the work is open (issue 45)."""
    return f"not checked: {why}, {_ISSUE}"


_Q = "ibv_query_qp"
_READBACK = ("attr.readback", "attr.readback.unmasked", "attr.readback.refused")
_APM = "the alternate path is an optional feature (ALT_PATH) whose read-back depends on " \
       "path migration (models/readback.py)"
_AV = "the address vector's read-back depends on the GID table and the route (RoCE)"

QP_ATTR: tuple[Field, ...] = (
    _f("ibv_qp_attr", "qp_state", _Q, "ibta.query.state", "iwarp.query.state", "pair.state"),
    _f("ibv_qp_attr", "cur_qp_state", _Q, "query.cur_qp_state",
       note="lone QPs, at every query_qp: qp_state, or RESET from a driver that never writes "
            "it (efa); the choice is recorded"),
    _f("ibv_qp_attr", "path_mtu", _Q, *_READBACK),
    _f("ibv_qp_attr", "path_mig_state", _Q, reason=_not(_APM)),
    _f("ibv_qp_attr", "qkey", _Q, *_READBACK, "pair.ud.qkey.mismatch",
       note="read back on every query_qp; and in force on a UD pair: a datagram naming "
            "another Q_Key is dropped by the responder (models/qkey.py)"),
    _f("ibv_qp_attr", "rq_psn", _Q, *_READBACK, "attr.psn.masked"),
    _f("ibv_qp_attr", "sq_psn", _Q, *_READBACK, "attr.psn.masked"),
    _f("ibv_qp_attr", "dest_qp_num", _Q, *_READBACK),
    _f("ibv_qp_attr", "qp_access_flags", _Q, "attr.readback.access_flags"),
    _f("ibv_qp_attr", "cap", _Q, "pair.inline.over_cap",
       note="a struct ibv_qp_cap: its fields are listed under ibv_qp_cap; libibverbs "
            "(ibv_cmd_query_qp) fills it and init_attr.cap from the same reply, the lone "
            "checks read init_attr.cap"),
    _f("ibv_qp_attr", "ah_attr", _Q, reason=_not(_AV),
       note="port_num and sgid_index are read (ah_attr.port_num, ah_attr.sgid_index)"),
    _f("ibv_qp_attr", "ah_attr.port_num", _Q, reason=_not(
        "read by the adapter; its value rules judge the modify (attr.ah_port_num.range), "
        "the read-back is not compared")),
    _f("ibv_qp_attr", "ah_attr.sgid_index", _Q, reason=_not(
        "read by the adapter; its value rules judge the modify (attr.ah_sgid_index.range), "
        "the read-back is not compared")),
    _f("ibv_qp_attr", "ah_attr.is_global", _Q, reason=_not(
        "read to interpret sgid_index only; RoCE requires a GRH")),
    _f("ibv_qp_attr", "alt_ah_attr", _Q, reason=_not(_APM)),
    _f("ibv_qp_attr", "pkey_index", _Q, *_READBACK),
    _f("ibv_qp_attr", "alt_pkey_index", _Q, reason=_not(_APM)),
    _f("ibv_qp_attr", "en_sqd_async_notify", _Q, "ibta.sqd.drained_event",
       note="its effect is checked (SQ_DRAINED asked or not); the read-back value is not"),
    _f("ibv_qp_attr", "sq_draining", _Q, "pair.sqd.sq_draining"),
    _f("ibv_qp_attr", "max_rd_atomic", _Q, *_READBACK, "attr.readback.rd_atomic_rounded"),
    _f("ibv_qp_attr", "max_dest_rd_atomic", _Q, *_READBACK,
       "attr.readback.rd_atomic_rounded"),
    _f("ibv_qp_attr", "min_rnr_timer", _Q, *_READBACK),
    _f("ibv_qp_attr", "port_num", _Q, *_READBACK),
    _f("ibv_qp_attr", "timeout", _Q, *_READBACK),
    _f("ibv_qp_attr", "retry_cnt", _Q, *_READBACK),
    _f("ibv_qp_attr", "rnr_retry", _Q, *_READBACK),
    _f("ibv_qp_attr", "alt_port_num", _Q, reason=_not(_APM)),
    _f("ibv_qp_attr", "alt_timeout", _Q, reason=_not(_APM)),
    _f("ibv_qp_attr", "rate_limit", _Q, reason=_not(
        "an optional feature (RATE_LIMIT, packet pacing) the suites do not set; iwarp "
        "refuses it at modify (iwarp.modify.rate_limit)")),
)

_CAP_VERBS = "ibv_create_qp (written back), ibv_query_qp (attr.cap, init_attr.cap)"
_CAP_LONE = "lone QPs: create_qp's written-back value at least what was asked, query_qp's " \
            "equal to it (every query); a pair end's are not compared (" + _ISSUE + ")"
QP_CAP: tuple[Field, ...] = (
    _f("ibv_qp_cap", "max_send_wr", _CAP_VERBS, "create.cap.at_least", "query.cap.as_created",
       note=_CAP_LONE),
    _f("ibv_qp_cap", "max_recv_wr", _CAP_VERBS, "create.cap.at_least", "query.cap.as_created",
       note=_CAP_LONE),
    _f("ibv_qp_cap", "max_send_sge", _CAP_VERBS, "create.cap.at_least", "query.cap.as_created",
       note=_CAP_LONE),
    _f("ibv_qp_cap", "max_recv_sge", _CAP_VERBS, "create.cap.at_least", "query.cap.as_created",
       note=_CAP_LONE),
    _f("ibv_qp_cap", "max_inline_data", _CAP_VERBS, "pair.inline.over_cap",
       "pair.inline.delivered", "create.cap.at_least", "query.cap.inline",
       note="query_qp's value is the cap used: a WR of that many bytes inline delivers, one "
            "byte more is refused; lone QPs: create_qp's written-back value and query_qp's at "
            "least what was asked (query_qp's may differ from create's: siw reports its "
            "limit); a lone QP asks 0, so only a pair end's 64 bytes make it bite, and a "
            f"pair end's are not compared with create's ({_ISSUE})"),
)

_INIT = "ibv_query_qp (init_attr)"
QP_INIT_ATTR: tuple[Field, ...] = (
    _f("ibv_qp_init_attr", "qp_context", _INIT,
       reason="libibverbs' own pointer (qp->qp_context), never from the device"),
    _f("ibv_qp_init_attr", "send_cq", _INIT,
       reason="libibverbs fills it from its own ibv_qp (ibv_cmd_query_qp), not the device"),
    _f("ibv_qp_init_attr", "recv_cq", _INIT,
       reason="libibverbs fills it from its own ibv_qp (ibv_cmd_query_qp), not the device"),
    _f("ibv_qp_init_attr", "srq", _INIT,
       reason="libibverbs fills it from its own ibv_qp (ibv_cmd_query_qp), not the device"),
    _f("ibv_qp_init_attr", "cap", _INIT, "pair.inline.over_cap", "query.cap.as_created",
       "query.cap.inline",
       note="a struct ibv_qp_cap: its fields are listed under ibv_qp_cap"),
    _f("ibv_qp_init_attr", "qp_type", _INIT,
       reason="libibverbs copies its own qp->qp_type (ibv_cmd_query_qp), not the device"),
    _f("ibv_qp_init_attr", "sq_sig_all", _INIT, reason=_not(
        "the kernel returns it (ib_uverbs_query_qp); the suite creates every QP with "
        "sq_sig_all 0 and checks its effect (pair.unsignaled.silent), not the value")),
)

_SRQ = "ibv_create_srq (written back), ibv_query_srq, ibv_modify_srq"
SRQ_ATTR: tuple[Field, ...] = (
    _f("ibv_srq_attr", "max_wr", _SRQ, "srq.create.at_least", "srq.query.size", "srq.resize",
       "srq.resize.below_held", "srq.modify.failed_unchanged",
       note="pair ends with an SRQ: create's write-back, query_srq after every arm and resize "
            "(at least create's, then the resize's size); resized where the device has "
            "IBV_DEVICE_SRQ_RESIZE; also set outside the mask of an IBV_SRQ_LIMIT modify, "
            "which must still be accepted (srq.modify.limit)"),
    _f("ibv_srq_attr", "max_sge", _SRQ, "srq.create.at_least", "srq.query.size",
       "srq.modify.failed_unchanged"),
    _f("ibv_srq_attr", "srq_limit", _SRQ, "srq.modify.limit", "srq.limit_reached",
       "srq.query.limit", "srq.query.limit_fired", "srq.modify.failed_unchanged",
       note="its effect (SRQ_LIMIT_REACHED once the SRQ falls below it) is checked, and "
            "query_srq's value: the armed limit, then 0 or it once it fired"),
)

CQ: tuple[Field, ...] = (
    _f("ibv_cq", "cqe", "ibv_create_cq", "create.cq.cqe",
       note="a lone QP's send and receive CQs, when the checker opens the QP (a pooled set's "
            "CQs: read once, when the set is opened; pyverbs prints it, CQ has no property); "
            f"a pair end's CQs are not compared ({_ISSUE})"),
)

_POLL = "ibv_poll_cq"
_ERR_UNDEFINED = "undefined in an error completion by IBTA 11.4.2.1 (man ibv_poll_cq(3): " \
                 "only wr_id, status, qp_num and vendor_err)"
WC: tuple[Field, ...] = (
    _f("ibv_wc", "wr_id", _POLL, "ibta.send.complete", "ibta.recv.complete", "ibta.err.flush",
       note="every completion is matched to its WR by wr_id (qpconform/engine/ledger.py)"),
    _f("ibv_wc", "status", _POLL, "ibta.send.complete", "ibta.recv.complete", "ibta.err.flush",
       "ibta.err.send_error", "ibta.err.recv_error", "pair.rc.bad_rkey", "pair.bad_lkey",
       "pair.local.bounds", "pair.local.pd", "pair.rc.local.sink_write",
       "pair.rc.local.recv_write",
       note="every completion's status is compared with the model's"),
    _f("ibv_wc", "opcode", _POLL, "pair.completion.opcode",
       note=f"successful completions; {_ERR_UNDEFINED}"),
    _f("ibv_wc", "vendor_err", _POLL, reason="vendor-specific: vendor_err (a device's own "
       "syndrome, no value is defined by IBTA or the verbs ABI)"),
    _f("ibv_wc", "byte_len", _POLL, "pair.wc.byte_len", "pair.ud.wc.byte_len",
       "pair.wc.byte_len.write_imm",
       note="successful receive completions of an InfiniBand pair (SEND, SEND with "
            "immediate, WRITE with immediate; an iWARP pair's receives are not compared yet, "
            f"{_ISSUE}); the may rules' choice is a characteristic, the same every time "
            "(qpconform/engine/choices.py); a requester's byte_len (READ: the bytes read; "
            f"atomics: 8 on mlx5) is not compared ({_ISSUE}); {_ERR_UNDEFINED}"),
    _f("ibv_wc", "imm_data", _POLL, "pair.imm.delivered",
       note="compared when IBV_WC_WITH_IMM is set, the flag being the source of truth"),
    _f("ibv_wc", "invalidated_rkey", _POLL, reason=_not(
        "the union's other member (IBV_WC_WITH_INV): the suites post no SEND with "
        "invalidate yet (issue 45 item 4)")),
    _f("ibv_wc", "qp_num", _POLL, "cq.completion.qp_num"),
    _f("ibv_wc", "src_qp", _POLL, "pair.ud.wc.src_qp",
       note="successful UD receives; undefined on RC/UC (man ibv_poll_cq(3): valid only for "
            "UD QPs)"),
    _f("ibv_wc", "wc_flags", _POLL, "pair.imm.delivered",
       note="IBV_WC_WITH_IMM: set iff the message carried immediate data (checked); "
            f"IBV_WC_GRH (UD: may), IBV_WC_WITH_INV, IBV_WC_IP_CSUM_OK: not checked ({_ISSUE})"),
    _f("ibv_wc", "pkey_index", _POLL,
       reason="undefined for the suite's QPs: valid only for GSI QPs (man ibv_poll_cq(3))"),
    _f("ibv_wc", "slid", _POLL, reason=_not(
        "UD only; RoCE and iWARP have no LIDs (0), an InfiniBand port's LID is not modelled")),
    _f("ibv_wc", "sl", _POLL, reason=_not(
        "UD only; the service level the sender's address vector set is not modelled")),
    _f("ibv_wc", "dlid_path_bits", _POLL, reason=_not(
        "UD only; RoCE and iWARP have no LIDs, LMC path bits are not modelled")),
)

_EV = "ibv_get_async_event"
ASYNC_EVENT: tuple[Field, ...] = (
    _f("ibv_async_event", "event_type", _EV, "ibta.sqd.drained_event", "srq.last_wqe_reached",
       "srq.limit_reached", "ibta.err.async_error", "pair.comm_est.first_packet",
       "pair.event.unexpected"),
    _f("ibv_async_event", "element", _EV, reason=_not(
        "unreadable through pyverbs: its AsyncEvent exposes event_type only, so "
        "AsyncEvent.qp_num is the adapter's own attribution (the QP whose Context's async fd "
        "delivered it: one QP per Context; a pair end's bystander shares the end's Context "
        "and raises none of its own, engine.device.Bystander), not the device's word; no "
        "rule compares it, as one would only restate the adapter; reading element.qp "
        "needs a verbs binding below pyverbs")),
)

_DATA = "ibv_poll_cq (the buffer behind a completion)"
PAYLOAD: tuple[Field, ...] = (
    _f("payload", "receive buffer (SEND, SEND with immediate)", _DATA, "pair.fence.after_reads",
       note="the adapter names the 16 bytes a receive holds; compared when the SEND was "
            f"fenced behind a READ or atomic; an unfenced SEND's bytes are not ({_ISSUE})"),
    _f("payload", "RDMA WRITE target", _DATA, "pair.access.write_placed", "pair.access.guard",
       note="the target MRs of the access draws (models/access.py) and of the local SGE "
            "faults (models/local_access.py: the requester's own, and the peer's a WRITE "
            f"names); other WRITEs' targets are not read ({_ISSUE})"),
    _f("payload", "RDMA READ target (the requester's sink)", _DATA, "pair.fence.after_reads",
       note="what a READ placed is sent on by a fenced SEND and compared there"),
    _f("payload", "atomic original value", _DATA, "pair.fence.after_reads",
       note="labelled as an atomic's result when a fenced SEND carries it; the value itself "
            f"(the target's old 8 bytes) is not compared ({_ISSUE})"),
    _f("payload", "atomic target after the operation", _DATA, reason=_not(
        "the responder's 8 bytes after compare-and-swap / fetch-and-add are not read")),
    _f("payload", "inline SEND / WRITE bytes", _DATA, reason=_not(
        "the bytes an inline WR delivers are not compared (its completions are: "
        "pair.inline.delivered)")),
    _f("payload", "UD GRH area (the receive's first 40 bytes)", _DATA,
       reason="undefined when no GRH is present (man ibv_post_recv(3)); RoCE's is the IP "
              "header, not modelled"),
)

LEDGER: tuple[Field, ...] = (
    *QP_ATTR, *QP_CAP, *QP_INIT_ATTR, *SRQ_ATTR, *CQ, *WC, *ASYNC_EVENT, *PAYLOAD)

#: The structures the ledger covers, in the order the document lists them.
STRUCTS: tuple[str, ...] = tuple(dict.fromkeys(f.struct for f in LEDGER))

#: pyverbs' classes and the structure each wraps; `aliases`: a pyverbs property that is
#: another field's shortcut (QPInitAttr.max_send_wr is init_attr.cap.max_send_wr).
PYVERBS_CLASSES: dict[str, tuple[str, dict[str, str]]] = {
    "WC": ("ibv_wc", {}),
    "QPAttr": ("ibv_qp_attr", {}),
    "QPInitAttr": ("ibv_qp_init_attr", {
        f"max_{k}": f"cap.max_{k}"
        for k in ("send_wr", "recv_wr", "send_sge", "recv_sge", "inline_data")}),
    "QPCap": ("ibv_qp_cap", {}),
    "SrqAttr": ("ibv_srq_attr", {}),
}


def entry(struct: str, name: str) -> Field | None:
    """The ledger's entry for one field (a nested "cap.max_send_wr" is found under its
    own structure, ibv_qp_cap); None: no entry."""
    if name.startswith("cap.") and struct in ("ibv_qp_attr", "ibv_qp_init_attr"):
        struct, name = "ibv_qp_cap", name.removeprefix("cap.")
    return next((f for f in LEDGER if f.struct == struct and f.name == name), None)


def pyverbs_missing(found: dict[str, list[str]]) -> list[str]:
    """The pyverbs fields (`found`: class -> its public fields, as the guest lists them,
    tests/test_vm_fields.py) the ledger has no entry for, as "Class.field"."""
    out = []
    for cls, names in found.items():
        struct, aliases = PYVERBS_CLASSES[cls]
        out += [f"{cls}.{n}" for n in names if entry(struct, aliases.get(n, n)) is None]
    return out


def problems(known_rules: set[str] | frozenset[str]) -> list[str]:
    """What is wrong with the ledger: an entry with neither rule nor reason, a rule the
    catalog does not know, a field listed twice."""
    found = []
    seen: set[tuple[str, str]] = set()
    for f in LEDGER:
        where = f"{f.struct}.{f.name}"
        if (f.struct, f.name) in seen:
            found.append(f"{where}: listed twice")
        seen.add((f.struct, f.name))
        if not f.rules and not f.reason.strip():
            found.append(f"{where}: neither a rule nor a reason")
        found += [f"{where}: rule {r} is not in the catalog" for r in f.rules
                  if r not in known_rules]
    return found


def render() -> str:
    """docs/fields.md: the ledger as one table per structure."""
    lines = [
        "# The field ledger: every returned field and what checks it",
        "",
        "Back to the [README](../README.md). Generated from `models/fields.py` by "
        "`python -m models fields-doc --out docs/fields.md`; do not edit by hand "
        "(tests/test_fields_ledger.py fails when it is stale).",
        "",
        "Each field a verb the suites call hands back, with the rules that check it "
        "([docs/model.md](model.md)) or why none does.",
    ]
    for struct in STRUCTS:
        rows = [f for f in LEDGER if f.struct == struct]
        checked = sum(1 for f in rows if f.rules)
        lines += ["", f"## {struct} ({rows[0].verbs})", "",
                  f"{checked} of {len(rows)} fields checked.", "",
                  "| field | checked by | reason / note |", "|---|---|---|"]
        for f in rows:
            by = ", ".join(f"`{r}`" for r in f.rules) or "-"
            text = "; ".join(t for t in (f.reason, f.note) if t).replace("|", "\\|")
            lines.append(f"| `{f.name}` | {by} | {text} |")
    return "\n".join(lines) + "\n"
