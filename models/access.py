"""Memory protection: the responder's checks before it touches the memory a request names.

A valid rkey is not a licence: the memory region (MR) it names grants some remote
rights and not others, covers [start, start + length) and nothing past it, and
belongs to one protection domain (PD). An RDMA WRITE, READ or atomic that asks for
more is refused by the responder, and no byte moves (IBTA ch. 9.7.5.2 and 10.6).
The pair harness gives each end a set of *target* MRs, each registered with a subset
of the remote rights (and one in a second PD), filled with a guard pattern; a
request names one of them through a `Fault` of models/wire.py, which this module
turns into the target, the offset and the length (`window_of`). `Memory` is what
the target MRs must hold: the guard pattern, except where a granted WRITE placed its
bytes; a device's bytes are compared with it after every step (`Memory.diff`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.enums import AccessFlag, WCStatus
from models.operations import Op
from models.sources import DRIVER, MAY, MUST, Rule, Source

#: Each target MR's length; a request's window lies inside it, at its end, or across it.
TARGET_LEN = 4096
#: Where a granted or refused request works inside a target (8-byte aligned: atomics).
MID = 1024
#: The bytes a WRITE or READ carries (the adapters' WR length); an atomic: 8.
WR_LEN, ATOMIC_LEN = 16, 8
#: A WRITE or READ across a target's end starts this many bytes before it.
ACROSS = 8
#: The bytes every WRITE carries (the requester's send buffer: the adapters' plain bytes).
PAYLOAD = b"send:plain bytes"

_R = AccessFlag
#: The target registered with no right at all, not even LOCAL_WRITE: the requester's
#: own sink check names it (models/local_access.py).
READ_ONLY = "read_only"
#: The target MRs of an end, by name: the remote rights each is registered with (all
#: with LOCAL_WRITE, which REMOTE_WRITE and REMOTE_ATOMIC require, but READ_ONLY), and
#: whether it lies in a second PD of the end's context.
TARGETS: dict[str, tuple[AccessFlag, bool]] = {
    "full": (_R.REMOTE_WRITE | _R.REMOTE_READ | _R.REMOTE_ATOMIC, False),
    "no_write": (_R.REMOTE_READ | _R.REMOTE_ATOMIC, False),
    "no_read": (_R.REMOTE_WRITE | _R.REMOTE_ATOMIC, False),
    "no_atomic": (_R.REMOTE_WRITE | _R.REMOTE_READ, False),
    "other_pd": (_R.REMOTE_WRITE | _R.REMOTE_READ | _R.REMOTE_ATOMIC, True),
    READ_ONLY: (_R(0), False),
}


def registered_with(name: str) -> AccessFlag:
    """The access flags target `name` is registered with: LOCAL_WRITE and its remote
    rights (READ_ONLY: none)."""
    rights = TARGETS[name][0]
    return rights if name == READ_ONLY else _R.LOCAL_WRITE | rights

_VALIDATE = "ch. 10.6 Memory protection (the R_Key checks: access rights, bounds, PD)"
_CLASS_C = "ch. 9.7.5.2 Responder error behavior (class C: NAK Remote Access Error)"
_DRIVERS = (
    "The NAK is the hardware's; every driver reports it as Remote Access Error: mlx5 "
    "cq.c mlx5_handle_error_cqe() MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR -> "
    "IB_WC_REM_ACCESS_ERR; bnxt_re ib_verbs.c __req_to_ib_wc_status() "
    "CQ_REQ_STATUS_REMOTE_ACCESS_ERR -> IB_WC_REM_ACCESS_ERR; irdma "
    "irdma_flush_err_to_ib_wc_status() FLUSH_REM_ACCESS_ERR -> IB_WC_REM_ACCESS_ERR; hns "
    "hns_roce_v2 wc status map HNS_ROCE_CQE_V2_REMOTE_ACCESS_ERR -> IB_WC_REM_ACCESS_ERR; "
    "rxe rxe_resp.c check_rkey(): lookup_mr() returns NULL for another PD or missing "
    "access, mr_check_range() fails past the end, all RESPST_ERR_RKEY_VIOLATION -> "
    "do_class_ac_error(AETH_NAK_REM_ACC_ERR, IB_WC_REM_ACCESS_ERR); efa has no RC (SRD: "
    "EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS, reported as REM_ACCESS_ERR by newer "
    "rdma-core, GENERAL_ERR by older: not this rule). The responder's affiliated event is "
    "where they differ (rxe raises IB_EVENT_QP_ACCESS_ERR from 7.3 only, the hardware "
    "drivers map their WQ access error events to it): it may come"
)


def _source(location: str, quote: str) -> Source:
    return Source("IBTA Vol. 1 and linux drivers/infiniband", f"IBTA {location}; {_DRIVERS}",
                  quote)


RC_MR_RIGHTS = Rule(
    "pair.rc.access.mr_rights",
    "an RC RDMA WRITE, READ or atomic naming a valid rkey of an MR registered without the "
    "remote right it needs (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC) is NAKed (Remote "
    "Access Error): the requester completes it with REM_ACCESS_ERR and enters ERR; the "
    "responder enters ERR (QP_ACCESS_ERR may come); no byte of the MR changes",
    _source(f"{_VALIDATE} and {_CLASS_C}",
            "the R_Key's access rights do not permit the operation"),
    kind=MUST,
    layer=DRIVER,
)
RC_BOUNDS = Rule(
    "pair.rc.access.bounds",
    "an RC RDMA WRITE, READ or atomic whose [addr, addr+len) reaches past the end of the "
    "MR its rkey names is NAKed (Remote Access Error): REM_ACCESS_ERR and ERR at the "
    "requester, ERR at the responder (QP_ACCESS_ERR may come); no byte of the MR changes "
    "(one that ends at the MR's last byte is granted)",
    _source(f"{_VALIDATE} and {_CLASS_C}",
            "the virtual address and length are not within the bounds of the region"),
    kind=MUST,
    layer=DRIVER,
)
RC_OTHER_PD = Rule(
    "pair.rc.access.pd",
    "an RC RDMA WRITE, READ or atomic naming the rkey of an MR in another PD than the "
    "responder QP's is NAKed (Remote Access Error): REM_ACCESS_ERR and ERR at the "
    "requester, ERR at the responder (QP_ACCESS_ERR may come); no byte of the MR changes",
    _source(f"{_VALIDATE}, {_CLASS_C} and ch. 10.2 protection domains",
            "the PD of the memory region does not match the PD of the QP"),
    kind=MUST,
    layer=DRIVER,
)
UC_REFUSED = Rule(
    "pair.uc.access.dropped",
    "a UC RDMA WRITE the responder refuses (an MR without REMOTE_WRITE, past the MR's "
    "end, an MR of another PD) is silently dropped: the requester completes it with "
    "SUCCESS, both QPs stay in RTS, no receive is consumed and no byte of the MR changes",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        "IBTA ch. 9.8 Unreliable service, responder error behavior (an invalid R_Key, "
        "access or bounds: the packet is silently dropped) and ch. 10.6; rxe rxe_resp.c "
        "RESPST_ERR_RKEY_VIOLATION on UC: qp->resp.drop_msg = 1 (no NAK, no state change); "
        "UC carries no READ or atomic (IBTA Table 38), UD no RDMA at all",
        "the packet is silently dropped",
    ),
    kind=MUST,
    layer=DRIVER,
)
GUARD = Rule(
    "pair.access.guard",
    "no byte of a target MR changes outside the window a granted RDMA WRITE named, and "
    "none in the window of a request the responder refused (the guard bands around every "
    "window are compared after every step)",
    Source(
        "IBTA Vol. 1",
        f"{_VALIDATE}; ch. 9.4.3 RDMA WRITE (the data is "
        "placed at the virtual address, for the DMA length, nowhere else)",
        "a request that fails its access checks does not access the memory",
    ),
    kind=MUST,
    layer=DRIVER,
)
WRITE_PLACED = Rule(
    "pair.access.write_placed",
    "once the pair is quiet, a granted RDMA WRITE's bytes are in its window of the target "
    "MR, exactly",
    Source("IBTA Vol. 1", "ch. 9.4.3 RDMA WRITE",
           "the payload is written to the responder's memory at the virtual address given"),
    kind=MUST,
    layer=DRIVER,
)
ACCESS_EVENT = Rule(
    "pair.rc.access.event",
    "the responder of a refused RC request may raise QP_ACCESS_ERR (a Local Access "
    "Violation Work Queue Error); no other affiliated event",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        "IBTA ch. 11.6.3.1 Affiliated asynchronous errors; rxe raises it from 7.3 "
        "(get_rkey_violation_state() -> RESPST_ERR_RKEY_VIOLATION_EVENT), 6.1 and 6.12 "
        "do not; mlx5 qp.c mlx5_ib_qp_event(): MLX5_EVENT_TYPE_WQ_ACCESS_ERROR -> "
        "IB_EVENT_QP_ACCESS_ERR; bnxt_re, irdma and hns map their own access error events",
        "Local Access Violation Work Queue Error",
    ),
    kind=MAY,
    layer=DRIVER,
)

_QP_RIGHTS_DRIVERS = (
    "rxe rxe_resp.c check_op_valid(): on RC a READ, WRITE (with or without immediate) or "
    "atomic the QP's qp_access_flags lack -> RESPST_ERR_UNSUPPORTED_OPCODE -> "
    "do_class_ac_error(AETH_NAK_INVALID_REQ, IB_WC_REM_INV_REQ_ERR), checked before the "
    "receive queue (check_resource) and the rkey (check_rkey); on UC a WRITE -> "
    "qp->resp.drop_msg = 1 (dropped, no receive consumed). mlx5 (qp.c "
    "get_qp_access_flags(): the QPC's rre/rwe/rae bits), bnxt_re (CMDQ_MODIFY_QP_ACCESS_*), "
    "irdma (rd_en/wr_rdresp_en in the QP context) and hns (V2_QPC_BYTE_76_RRE_S, RWE_S, "
    "ATE_S) hand the flags to the hardware, which sends the NAK: their CQE maps carry both "
    "a remote access and a remote invalid request syndrome (mlx5 cq.c "
    "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR and MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR), so "
    "which the hardware sends is not in the driver; efa has no RC"
)
RC_QP_RIGHTS = Rule(
    "pair.rc.access.qp_rights",
    "an RC RDMA WRITE (with or without immediate), READ or atomic arriving at a responder "
    "whose QP's qp_access_flags lack the matching remote right (REMOTE_WRITE, REMOTE_READ, "
    "REMOTE_ATOMIC: set at RESET->INIT, RTR->RTS or RTS->RTS) is refused: the requester "
    "completes it with REM_ACCESS_ERR (Remote Access Error NAK) or REM_INV_REQ_ERR "
    "(Invalid Request NAK) and enters ERR; the responder enters ERR (an affiliated error "
    "event may come); no byte moves. The device chooses one status and keeps to it for "
    "the whole run; widening the flags again lets the same request through",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        "IBTA ch. 9.7.4.1 responder checks (the operation must be enabled on the QP), ch. "
        "9.7.5.2 responder error behavior (class C: NAK, the QP to Error; a request the QP "
        "does not support is an Invalid Request, an access violation a Remote Access "
        "Error: the spec names the check, the two NAK codes both fit it) and ch. 11.2.4.2 "
        f"Modify QP (access flags in RTR->RTS and RTS->RTS); {_QP_RIGHTS_DRIVERS}",
        "remote access to the QP is not enabled for the operation",
    ),
    kind=MAY,
    layer=DRIVER,
)
UC_QP_RIGHTS = Rule(
    "pair.uc.access.qp_rights",
    "a UC RDMA WRITE (with or without immediate) arriving at a responder whose QP's "
    "qp_access_flags lack REMOTE_WRITE is silently dropped: the requester completes it "
    "with SUCCESS, both QPs stay in RTS, no receive is consumed and no byte moves",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        "IBTA ch. 9.8 Unreliable service, responder error behavior (a request that fails "
        "the responder's checks is silently dropped, no NAK on UC) and ch. 10.6; UC "
        f"carries no READ or atomic (IBTA Table 38); {_QP_RIGHTS_DRIVERS}",
        "the packet is silently dropped",
    ),
    kind=MUST,
    layer=DRIVER,
)
#: The statuses RC_QP_RIGHTS allows the requester, the first the model names by default.
QP_RIGHTS_STATUSES = (WCStatus.REM_ACCESS_ERR, WCStatus.REM_INV_REQ_ERR)
#: The remote rights a QP's qp_access_flags can grant (the others are not checked here).
REMOTE_RIGHTS = AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ | AccessFlag.REMOTE_ATOMIC


def qp_lacks(flags: int, op: Op) -> bool:
    """Does a responder QP with `flags` in force lack the right `op` needs? (An operation
    naming no remote memory needs none.)"""
    if not op.remote:
        return False
    return not AccessFlag(int(flags) & int(REMOTE_RIGHTS)) & right_of(op)


#: The rules declared above, by name: models/catalog.py lists the model's rules from these
#: (tests/test_model_catalog.py checks that none is left out).
RULES: tuple[Rule, ...] = (
    RC_MR_RIGHTS, RC_BOUNDS, RC_OTHER_PD, UC_REFUSED, GUARD, WRITE_PLACED, ACCESS_EVENT,
    RC_QP_RIGHTS, UC_QP_RIGHTS,
)

#: The operations a target fault is planted on (with immediate data the request would
#: also meet the receive queue: which error wins is the responder's order of checks).
TARGETED_OPS = frozenset({Op.RDMA_WRITE, Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD})


def right_of(op: Op) -> AccessFlag:
    """The remote right an operation needs of the MR its rkey names."""
    if op in (Op.RDMA_WRITE, Op.WRITE_WITH_IMM):
        return AccessFlag.REMOTE_WRITE
    if op is Op.RDMA_READ:
        return AccessFlag.REMOTE_READ
    if op.atomic:
        return AccessFlag.REMOTE_ATOMIC
    raise ValueError(f"{op.name} names no remote memory")


def lacking(op: Op) -> str:
    """The target registered with every remote right but the one `op` needs."""
    need = right_of(op)
    return next(n for n, (rights, other) in TARGETS.items() if not other and need not in rights
                and rights | need == TARGETS["full"][0])


@dataclass(frozen=True)
class Window:
    """Where a request works: a target MR of the responder, an offset and a length."""

    target: str
    offset: int
    length: int

    @property
    def span(self) -> range:
        """The offsets it covers inside the target (a window across its end: the part in)."""
        return range(self.offset, min(self.offset + self.length, TARGET_LEN))


def window_of(op: Op, fault: str) -> Window:
    """The window a request of `op` with a target fault (models.wire.Fault's value) names:
    "granted" mid-target, "at_end" ending at its last byte, "past_end" across its end (an
    atomic: at the first byte past it, aligned), "no_right" in the target lacking the right
    `op` needs, "other_pd" in the target of the second PD."""
    length = ATOMIC_LEN if op.atomic else WR_LEN
    if fault == "granted":
        return Window("full", MID, length)
    if fault == "at_end":
        return Window("full", TARGET_LEN - length, length)
    if fault == "past_end":
        return Window("full", TARGET_LEN if op.atomic else TARGET_LEN - ACROSS, length)
    if fault == "no_right":
        return Window(lacking(op), MID, length)
    if fault == "other_pd":
        return Window("other_pd", MID, length)
    raise ValueError(f"{fault!r} names no target window")


def refusal_rule(fault: str, reliable: bool) -> Rule:
    """The rule a refused request is judged by: RC's per check, UC's drop."""
    if not reliable:
        return UC_REFUSED
    return {"no_right": RC_MR_RIGHTS, "past_end": RC_BOUNDS, "other_pd": RC_OTHER_PD}[fault]


def fill(target: str) -> bytes:
    """The guard pattern a target starts with: no 8 aligned bytes are zero (a compare-and-
    swap with compare 0 never swaps, a fetch-and-add of 0 changes nothing), and it differs
    between targets."""
    salt = 1 + list(TARGETS).index(target)
    return bytes(((i * 31) + 7 * salt) % 251 + 1 for i in range(TARGET_LEN))


@dataclass
class Memory:
    """What each end's target MRs must hold. A granted WRITE's window is *pending* (old
    or new bytes) until `commit` (the pair is quiet: the data must have landed); every
    other byte must hold what it held."""

    held: dict[tuple[str, str], bytearray] = field(default_factory=dict)
    pending: dict[tuple[str, Window], set[bytes]] = field(default_factory=dict)
    granted: set[tuple[str, Window]] = field(default_factory=set)
    used: bool = False  # a WR named a target (the adapters register them on first use)

    def expected(self, side: str, target: str) -> bytearray:
        """The bytes `side`'s target must hold once everything pending has landed."""
        return self.held.setdefault((side, target), bytearray(fill(target)))

    def place(self, side: str, window: Window, data: bytes) -> None:
        """A granted WRITE of `data` into `side`'s window: pending until `commit`."""
        mem = self.expected(side, window.target)
        old = bytes(mem[window.offset:window.offset + window.length])
        self.pending.setdefault((side, window), {old}).add(data)
        mem[window.offset:window.offset + window.length] = data
        self.granted.add((side, window))

    def commit(self) -> None:
        """The pair is quiet: every granted WRITE must have landed."""
        self.pending.clear()

    def forget(self, side: str) -> None:
        """`side`'s QP was recreated with new target MRs: they start over."""
        for key in [k for k in self.held if k[0] == side]:
            del self.held[key]
        self.pending = {k: v for k, v in self.pending.items() if k[0] != side}
        self.granted = {k for k in self.granted if k[0] != side}

    def diff(self, side: str, target: str, got: bytes) -> tuple[list[int], list[int]]:
        """Offsets of `side`'s `target` whose bytes differ: (stray: outside every granted
        window, or in a refused one; unplaced: inside a granted window, not its bytes)."""
        want = self.expected(side, target)
        if got == want:  # everything landed where it should: the common case, at once
            return [], []
        windows = [w for s, w in self.granted if s == side and w.target == target]
        pending = {w: v for (s, w), v in self.pending.items() if s == side and w.target == target}
        stray: list[int] = []
        unplaced: list[int] = []
        inside: set[int] = set()
        for w in windows:
            inside.update(w.span)
            seen = bytes(got[w.offset:w.offset + w.length])
            if w in pending and seen in pending[w]:
                continue
            unplaced += [i for i in w.span if got[i] != want[i]]
        stray += [i for i in range(min(len(got), TARGET_LEN))
                  if i not in inside and got[i] != want[i]]
        return stray, sorted(set(unplaced))
