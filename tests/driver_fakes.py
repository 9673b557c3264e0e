"""Fake devices written from each NIC driver's source: mlx5, bnxt_re, irdma, efa and hns.

Each is a FakeDevice (tests/fake_device.py) with a `Driver` behaviour: the driver's own
modify_qp and post checks, step by step in the order of its code, taken from the functions
its profile (fixtures/quirks/<driver>.toml) cites. A step the driver shares with the model
is the model's: uverbs and the core refuse before any driver (`reaches_driver`), and
`ib_modify_qp_is_ok()` is the kernel's table, which the model transcribes. A step where the
driver differs is a small method whose docstring names its profile entry and cites the
code, with the entry's citation. What the source does not show is left to the model, as
for the plain fake: completions and their timing, the attributes query_qp reads back, what
the hardware does with a WQE posted below RTS (these fakes never complete it). The firmware
accepts a command the driver sends: bnxt_re and irdma check so little that a modify the
model refuses by a rule they do not check reaches the firmware (`Driver.accepted_unchecked`
lists those rules; any other refusal is an error of the fake).

These fakes are predictions, like the profiles: they let the self-tests check that each
profile covers what its driver's code does, each entry its own behaviour and nothing
else. They never replace a run on the NIC.

Each driver can `bend` one deviation (BENDS): the same fake with that behaviour changed
slightly (another errno, another state), which its profile must not cover (near misses).
"""

from __future__ import annotations

import errno
import fnmatch
from dataclasses import replace
from typing import ClassVar

from models import uverbs
from models.attributes import DeviceCaps
from models.enums import MTU, STANDARD_BITS, AccessFlag, Attr, EventType, QPState, QPType
from models.outcomes import Expectation, Outcome
from models.qp_modify import broken_value_rules
from models.sources import CORE, UVERBS
from models.variant import LINUX
from qpconform.engine.device import AttrValues
from tests.fake_device import ACCEPTED, Behaviour, FakeDevice, FakeQP, Verdict

S = QPState
T = QPType
K61 = "6.1.0-50-amd64"
K612 = "6.12.117+deb13-amd64"
#: rdma-core of the fakes' runs (Debian 13's): libbnxt_re without its old post checks.
RDMA_CORE = "56.1"
#: The last rdma-core whose libbnxt_re refused posts by its state record (before v47).
RDMA_CORE_OLD = "46.0"
#: iboe_get_mtu() of a netdev with jumbo frames (9000) and of a plain 1500-byte Ethernet one
JUMBO, ETHERNET_1500 = MTU.MTU_4096, MTU.MTU_1024
_LINUX = LINUX.table
_REFUSED = Verdict(False, errno.EINVAL)
_REMOTE_ACCESS = AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ | AccessFlag.REMOTE_ATOMIC


# ------------------------------------------------------------ the kernel before any driver
def reaches_driver(qp: FakeQP, attrs: AttrValues, mask: Attr) -> tuple[Attr, dict[str, int]]:
    """The mask and attributes the driver's modify_qp is called with (after uverbs rewrote
    them), or raise NotReached when uverbs or the core refuse the modify first: those layers
    are the model's (models/uverbs.py and the uverbs/core value rules), for every device."""
    if int(mask) & ~(int(STANDARD_BITS) | int(Attr.RATE_LIMIT)):
        raise NotReached
    for bit, name in ((Attr.STATE, "qp_state"), (Attr.CUR_STATE, "cur_qp_state")):
        if bit in mask and attrs[name] > S.ERR:
            raise NotReached
    caps = qp.device.caps
    seen, given, refusal, _ = uverbs.rewrite(
        qp.qp_type, attrs, mask, qp.model.port, caps.privileged_qkey
    )
    kernel = [
        vr for vr in broken_value_rules(given, seen, caps, LINUX)
        if vr.rule.layer in (UVERBS, CORE)
    ]
    if refusal is not None or kernel:
        raise NotReached
    return seen, given


class NotReached(Exception):
    """uverbs or the core refused the modify: the driver never saw it."""


def ib_mtu_enum_to_int(mtu: int) -> int:
    """include/rdma/ib_verbs.h ib_mtu_enum_to_int(): bytes of an ib_mtu, -1 for any other
    value (0, 6, ...)."""
    return 128 << mtu if MTU.MTU_256 <= mtu <= MTU.MTU_4096 else -1


def _targets(attrs: AttrValues, mask: Attr, state: QPState) -> tuple[QPState, QPState]:
    """(cur_state, new_state) as most drivers compute them: CUR_STATE if given, else the
    QP's state; qp_state if STATE is given, else the current state."""
    cur = S(attrs["cur_qp_state"]) if Attr.CUR_STATE in mask else state
    nxt = S(attrs["qp_state"]) if Attr.STATE in mask else cur
    return cur, nxt


# ----------------------------------------------------------------------------- drivers
class Driver(Behaviour):
    """One NIC driver (and its rdma-core provider) as its source reads."""

    name = "driver"
    #: QP types the driver creates (others: create_qp fails, a reported unsupported type)
    qp_types: ClassVar[tuple[QPType, ...]] = (T.RC, T.UC, T.UD)
    #: what query_device / query_port report on the fake, before the netdev's MTU
    CAPS: ClassVar[DeviceCaps] = DeviceCaps(max_mtu=MTU.MTU_4096)
    #: deviations that can be bent for a near miss: name -> how
    BENDS: ClassVar[dict[str, str]] = {}
    #: query_qp never writes cur_qp_state, which reads 0 (RESET) after the driver's memset
    CUR_UNSET: ClassVar[bool] = False

    def __init__(
        self, rdma_core: str = RDMA_CORE, bend: str | None = None, netdev_mtu: MTU = JUMBO
    ) -> None:
        if bend is not None and bend not in self.BENDS:
            raise ValueError(f"{self.name} cannot bend {bend!r} (only: {', '.join(self.BENDS)})")
        self.rdma_core = rdma_core
        self.bend = bend
        #: iboe_get_mtu(netdev->mtu): the port's active MTU (query_port) on these RoCE NICs
        self.netdev_mtu = netdev_mtu
        #: what query_device / query_port report on the fake
        self.caps = replace(self.CAPS, active_mtu=min(netdev_mtu, self.CAPS.max_mtu))

    def modify(
        self, qp: FakeQP, exp: Expectation, attrs: AttrValues, mask: Attr
    ) -> Verdict | None:
        try:
            seen, given = reaches_driver(qp, attrs, mask)
        except NotReached:
            return None
        return self.modify_qp(qp, exp, given, seen)

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        """The driver's modify_qp, called with what uverbs and the core passed on."""
        return None

    def accepted_unchecked(self, exp: Expectation, unchecked: dict[str, str]) -> Verdict:
        """The driver passed the modify to its firmware, which accepts it (what it checks
        is not in the source): accepted, also where the model refuses it by a rule the
        driver does not check (`unchecked`: rule glob -> why). A model refusal by any other
        rule means this fake misses a check of the driver: that is an error of the fake."""
        if exp.outcome is Outcome.REFUSE and not any(
            fnmatch.fnmatchcase(exp.rule.id, glob) for glob in unchecked
        ):
            raise RuntimeError(f"{self.name} fake: the model refuses by {exp.rule.id}, which "
                               "this fake does not know whether the driver checks")
        return ACCEPTED

    def device(self, kernel: str = K612, delay: float = 0.0) -> DriverFake:
        """A fake device of this driver on `kernel`."""
        return DriverFake(self, kernel, delay)


class DriverFake(FakeDevice):
    """A FakeDevice whose QPs run a Driver's code; named like the driver's devices."""

    def __init__(self, driver: Driver, kernel: str, delay: float = 0.0) -> None:
        super().__init__(variant="linux", caps=driver.caps, qp_types=driver.qp_types,
                         kernel=kernel, delay=delay, behaviour=driver, cur_unset=driver.CUR_UNSET)
        self.driver = driver
        self.name = f"{driver.name}_0"

    def identity(self) -> dict[str, str]:
        return {**super().identity(), "driver": self.driver.name,
                "rdma_core": self.driver.rdma_core}


# -------------------------------------------------------------------------------- mlx5
class Mlx5(Driver):
    """mlx5_ib (mlx5_ib_modify_qp(), __mlx5_ib_modify_qp()) and rdma-core's libmlx5.

    Its checks before __mlx5_ib_modify_qp() are the model's: ib_modify_qp_is_ok() from the
    asserted state, port, pkey_index, validate_rd_atomic() (max_rd_atomic against
    1 << log_max_ra_res_qp, which mlx5_ib_query_device() reports as max_qp_init_rd_atom;
    max_dest_rd_atomic against log_max_ra_req_qp, reported as max_qp_rd_atom), and the
    path_mtu range of __mlx5_ib_modify_qp(). RESET->RESET returns 0 before it.
    """

    name = "mlx5"
    qp_types = (T.RC, T.UC, T.UD)
    BENDS: ClassVar[dict[str, str]] = {
        "no_rts_to_sqd": "RTS->SQD refused with EBUSY instead of EINVAL",
    }
    #: __mlx5_ib_modify_qp(): the (cur, new) pairs optab[][] has a firmware command for.
    OPTAB = frozenset({
        (S.RESET, S.RESET), (S.RESET, S.ERR), (S.RESET, S.INIT),
        (S.INIT, S.RESET), (S.INIT, S.ERR), (S.INIT, S.INIT), (S.INIT, S.RTR),
        (S.RTR, S.RESET), (S.RTR, S.ERR), (S.RTR, S.RTS),
        (S.RTS, S.RESET), (S.RTS, S.ERR), (S.RTS, S.RTS),
        (S.SQD, S.RESET), (S.SQD, S.ERR), (S.SQD, S.RTS),
        (S.SQE, S.RESET), (S.SQE, S.ERR), (S.SQE, S.RTS),
        (S.ERR, S.RESET), (S.ERR, S.ERR),
    })

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        if exp.outcome is Outcome.REFUSE:
            return None  # refused by the checks mlx5 shares with the model: the same EINVAL
        cur, nxt = _targets(attrs, mask, qp.model.state)
        if cur == nxt == S.RESET:
            return None  # mlx5_ib_modify_qp(): returns 0 before __mlx5_ib_modify_qp()
        return self.no_rts_to_sqd(cur, nxt)

    def no_rts_to_sqd(self, cur: QPState, nxt: QPState) -> Verdict | None:
        """mlx5.no_rts_to_sqd: linux v6.1, v6.12 drivers/infiniband/hw/mlx5/qp.c
        __mlx5_ib_modify_qp(): if (... !optab[mlx5_cur][mlx5_new]) { err = -EINVAL; goto
        out; } -- optab has no [RTS][SQD] (nor [SQD][SQD]) entry."""
        if (cur, nxt) in self.OPTAB:
            return None
        return Verdict(False, errno.EBUSY if self.bend == "no_rts_to_sqd" else errno.EINVAL)

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        """mlx5.post_below_rts_accepted: rdma-core v64.0 providers/mlx5/qp.c
        _mlx5_post_send() and mlx5_post_recv() refuse only a bad opcode, a full queue or too
        many SGEs: no test of the QP state. What the hardware does with the WQE later is not
        in the source (nor in the entry): this fake never completes it."""
        return ACCEPTED if exp.outcome is Outcome.REFUSE else None

    def modified(
        self, qp: FakeQP, before: QPState, after: QPState, attrs: AttrValues, mask: Attr
    ) -> None:
        """mlx5.reset_drops_unpolled_completions: rdma-core v64.0 providers/mlx5/verbs.c
        mlx5_modify_qp(): on a successful modify to RESET, mlx5_cq_clean() removes from the
        QP's CQs every CQE of the QP not polled yet."""
        if Attr.STATE in mask and after == S.RESET:
            qp.cq.clear()
            qp.staged.clear()
        if Attr.ACCESS_FLAGS in mask:
            # attr.readback.access_flags: linux v6.1, v6.12 drivers/infiniband/hw/mlx5/qp.c
            # query_qp_attr(): qp_access_flags |= REMOTE_READ/WRITE/ATOMIC from the QPC's
            # rre/rwe/rae only -- LOCAL_WRITE and MW_BIND never read back
            qp.attrs["qp_access_flags"] &= int(_REMOTE_ACCESS)


# ----------------------------------------------------------------------------- bnxt_re
class BnxtRe(Driver):
    """bnxt_re (bnxt_re_modify_qp()) and rdma-core's libbnxt_re.

    bnxt_re_modify_qp() checks little before the firmware command: the transition table
    from its own state record when STATE is given, path_mtu at ->RTR against the netdev's
    MTU, max_dest_rd_atomic against max_qp_init_rd_atom, and the CAP sizes (not modelled: the
    suites send CAP only with STATE, which the table refuses first). It raises no
    SQ_DRAINED (bnxt_re_handle_qp_async_event() knows QP errors, SRQ errors and
    LAST_WQE_REACHED only). The firmware here reports a larger initiator than responder
    rd_atomic limit (else max_dest_rd_atomic_checked_against_init_rd_atom cannot show), the
    netdev's MTU gives active_mtu 4096 (jumbo frames) unless the fake is made with
    netdev_mtu=ETHERNET_1500, and the P_Key table has one entry (bnxt_qplib_get_dev_attr():
    max_pkey = 1).
    """

    name = "bnxt_re"
    qp_types = (T.RC, T.UD)  # __from_ib_qp_type(): RC, UD (and GSI) only
    CAPS = DeviceCaps(max_mtu=MTU.MTU_4096, max_qp_rd_atom=8, max_qp_init_rd_atom=16)
    BENDS: ClassVar[dict[str, str]] = {
        "max_rd_atomic_capped": "a max_rd_atomic above the limit refused with EOPNOTSUPP, "
        "not capped",
        "dest_rd_atomic_read_back_capped": "max_dest_rd_atomic also read back capped to "
        "max_qp_rd_atom / 2",
    }
    #: rules of the model bnxt_re_modify_qp() does not check as the model does
    UNCHECKED: ClassVar[dict[str, str]] = {
        "linux.transition.*": "checked from its own state, only when STATE is given",
        "linux.cur_state.allowed": "checked from its own state, only when STATE is given",
        "attr.pkey_index.range": "pkey_index_unchecked",
        "attr.path_mtu.range": "path_mtu_zero_accepted",
        "attr.max_rd_atomic.range": "max_rd_atomic_capped",
        "attr.max_dest_rd_atomic.range": "max_dest_rd_atomic_checked_against_init_rd_atom",
    }

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        if mask & ~STANDARD_BITS:
            return Verdict(False, errno.EOPNOTSUPP)
        for check in (self.table_from_own_state, self.path_mtu_at_rtr, self.max_rd_atomic,
                      self.max_dest_rd_atomic):
            verdict = check(qp, attrs, mask)
            if verdict is not None:
                return verdict
        return self.accepted_unchecked(exp, self.UNCHECKED)

    def modified(
        self, qp: FakeQP, before: QPState, after: QPState, attrs: AttrValues, mask: Attr
    ) -> None:
        """attr.readback.access_flags: linux v6.1, v6.12 drivers/infiniband/hw/bnxt_re/
        ib_verbs.c bnxt_re_modify_qp(): access = __from_ib_access_flags(...); access |=
        LOCAL_WRITE ("must be set to allow RC receive"), REMOTE_WRITE, REMOTE_READ ("Temp: Set
        all params on QP as of now"); bnxt_re_query_qp() maps them back."""
        if Attr.ACCESS_FLAGS in mask:
            forced = AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ
            qp.attrs["qp_access_flags"] = int(attrs["qp_access_flags"]) & 0x1F | int(forced)
        if Attr.MAX_QP_RD_ATOMIC in mask:
            # bnxt_re.max_rd_atomic_reads_back_capped: max_rd_atomic = min_t(u32,
            # qp_attr->max_rd_atomic, dev_attr->max_qp_rd_atom); bnxt_re_query_qp():
            # qp_attr->max_rd_atomic = qplib_qp->max_rd_atomic
            capped = min(int(attrs["max_rd_atomic"]), qp.device.caps.max_qp_rd_atom)
            qp.attrs["max_rd_atomic"] = capped
        if Attr.MAX_DEST_RD_ATOMIC in mask and self.bend == "dest_rd_atomic_read_back_capped":
            limit = qp.device.caps.max_qp_rd_atom // 2
            qp.attrs["max_dest_rd_atomic"] = min(int(attrs["max_dest_rd_atomic"]), limit)

    def table_from_own_state(
        self, qp: FakeQP, attrs: AttrValues, mask: Attr
    ) -> Verdict | None:
        """bnxt_re.attr_only_modify_not_table_checked and bnxt_re.cur_state_ignored: linux
        v6.1, v6.12 drivers/infiniband/hw/bnxt_re/ib_verbs.c bnxt_re_modify_qp(): if
        (qp_attr_mask & IB_QP_STATE) { curr_qp_state =
        __to_ib_qp_state(qp->qplib_qp.cur_qp_state); ... if (!ib_modify_qp_is_ok(curr_qp_state,
        new_qp_state, ib_qp->qp_type, qp_attr_mask)) return -EINVAL; } -- no table check
        without STATE, and qp_attr->cur_qp_state is never read."""
        if Attr.STATE not in mask:
            return None
        if _LINUX.admits(qp.model.state, S(attrs["qp_state"]), qp.qp_type, mask):
            return None
        return _REFUSED

    def path_mtu_at_rtr(self, qp: FakeQP, attrs: AttrValues, mask: Attr) -> Verdict | None:
        """bnxt_re.path_mtu_zero_accepted: linux v6.1, v6.12
        drivers/infiniband/hw/bnxt_re/ib_verbs.c bnxt_re_modify_qp(): if (qp_attr->qp_state ==
        IB_QPS_RTR) { ... if (ib_mtu_enum_to_int(qp_attr->path_mtu) > ib_mtu_enum_to_int(qpmtu))
        return -EINVAL; } -- qp_state is read whatever the mask, and a value that is no ib_mtu
        (0, 6, ...) counts -1, never larger. (Above the netdev's MTU, not above max_mtu 4096:
        the model's may rule attr.path_mtu.above_active.)"""
        if attrs.get("qp_state") != S.RTR or Attr.PATH_MTU not in mask:
            return None
        if ib_mtu_enum_to_int(attrs["path_mtu"]) > ib_mtu_enum_to_int(self.netdev_mtu):
            return _REFUSED
        return None

    def max_rd_atomic(self, qp: FakeQP, attrs: AttrValues, mask: Attr) -> Verdict | None:
        """bnxt_re.max_rd_atomic_capped: linux v6.1, v6.12
        drivers/infiniband/hw/bnxt_re/ib_verbs.c bnxt_re_modify_qp(): /* Cap the max_rd_atomic
        to device max */ qp->qplib_qp.max_rd_atomic = min_t(u32, qp_attr->max_rd_atomic,
        dev_attr->max_qp_rd_atom); -- never refused."""
        above = attrs.get("max_rd_atomic", 0) > qp.device.caps.max_qp_init_rd_atom
        if self.bend == "max_rd_atomic_capped" and Attr.MAX_QP_RD_ATOMIC in mask and above:
            return Verdict(False, errno.EOPNOTSUPP)
        return None

    def max_dest_rd_atomic(self, qp: FakeQP, attrs: AttrValues, mask: Attr) -> Verdict | None:
        """bnxt_re.max_dest_rd_atomic_checked_against_init_rd_atom: linux v6.1, v6.12
        drivers/infiniband/hw/bnxt_re/ib_verbs.c bnxt_re_modify_qp(): if (qp_attr_mask &
        IB_QP_MAX_DEST_RD_ATOMIC) { if (qp_attr->max_dest_rd_atomic >
        dev_attr->max_qp_init_rd_atom) { ... return -EINVAL; } }"""
        if Attr.MAX_DEST_RD_ATOMIC not in mask:
            return None
        if attrs["max_dest_rd_atomic"] > qp.device.caps.max_qp_init_rd_atom:
            return _REFUSED
        return None

    # bnxt_re.pkey_index_unchecked: linux v6.1, v6.12 drivers/infiniband/hw/bnxt_re/ib_verbs.c
    # bnxt_re_modify_qp(): if (qp_attr_mask & IB_QP_PKEY_INDEX) { ... qp->qplib_qp.pkey_index =
    # qp_attr->pkey_index; } -- no check (UNCHECKED: accepted_unchecked() accepts it).
    # bnxt_re.access_flags_unchecked: bnxt_re_modify_qp(): __from_ib_access_flags() drops
    # unknown bits -- no check; in the linux variant that is the model's "may" rule
    # attr.qp_access_flags.driver (accepted), in the ibta variant a refusal it accepts.

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        """libbnxt_re's post checks, by rdma-core release.

        bnxt_re.post_below_rts_accepted (rdma-core >= 47): rdma-core v64.0
        providers/bnxt_re/verbs.c bnxt_re_post_send() and bnxt_re_post_recv() refuse only a
        full queue or too many SGEs (what the hardware does with the WQE later is not in the
        source: this fake never completes it).

        bnxt_re.post_in_err_refused (rdma-core < 47): rdma-core v46.0
        providers/bnxt_re/verbs.c bnxt_re_post_send(): if ((qp->qpst != IBV_QPS_RTS) &&
        (qp->qpst != IBV_QPS_SQD)) ret = EINVAL; bnxt_re_post_recv(): if (qp->qpst ==
        IBV_QPS_RESET || qp->qpst == IBV_QPS_ERR) rc = EINVAL;
        """
        if int(self.rdma_core.split(".")[0]) >= 47:
            return ACCEPTED if exp.outcome is Outcome.REFUSE else None
        state = qp.model.state  # qpst: set by modify (a lone QP never errs by itself)
        if queue == "send" and state not in (S.RTS, S.SQD):
            return _REFUSED
        if queue == "recv" and state in (S.RESET, S.ERR):
            return _REFUSED
        return None

    def events(self, qp: FakeQP, events: list[EventType]) -> list[EventType]:
        """bnxt_re.sq_drained_never_raised: linux v6.1, v6.12
        drivers/infiniband/hw/bnxt_re/main.c bnxt_re_handle_qp_async_event(): event.event is
        IB_EVENT_QP_FATAL, QP_ACCESS_ERR, QP_REQ_ERR, SRQ_ERR or QP_LAST_WQE_REACHED -- never
        IB_EVENT_SQ_DRAINED."""
        return [e for e in events if e != EventType.SQ_DRAINED]


# ------------------------------------------------------------------------------- irdma
#: drivers/infiniband/hw/irdma/defs.h: the hardware QP states irdma records (iwarp_state)
IRDMA_INVALID, IRDMA_IDLE, IRDMA_RTS, IRDMA_SQD, IRDMA_RTR, IRDMA_ERROR = 0, 1, 2, 3, 4, 6
IRDMA_PKEY_TBL_SZ = 1


class Irdma(Driver):
    """irdma in RoCEv2 mode (irdma_modify_qp_roce()) and rdma-core's libirdma.

    irdma_modify_qp_roce() checks the P_Key index, max_rd_atomic against max_hw_ord and
    max_dest_rd_atomic against max_hw_ird (the model's limits: query_device reports those),
    then, only when STATE is given, the table from its own ibqp_state and the hardware
    state it records (iwarp_state, kept in qp.private). It raises no SQ_DRAINED
    (irdma_ib_qp_event() knows QP_FATAL, QP_ACCESS_ERR and QP_REQ_ERR only; a drain waits
    for the suspend AE). RC and UD only (irdma_validate_qp_attrs()).
    """

    name = "irdma"
    qp_types = (T.RC, T.UD)
    CAPS = DeviceCaps(max_mtu=MTU.MTU_4096, pkey_tbl_len=IRDMA_PKEY_TBL_SZ)
    BENDS: ClassVar[dict[str, str]] = {
        "reset_is_hw_error_reinit_refused": "RESET->INIT refused on a new QP too (as if every "
        "hardware QP started in ERROR)",
    }
    UNCHECKED: ClassVar[dict[str, str]] = {
        "linux.transition.*": "checked from its own state, only when STATE is given",
        "linux.cur_state.allowed": "checked from its own state, only when STATE is given",
        "attr.path_mtu.range": "path_mtu_unchecked",
    }

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        caps = qp.device.caps
        if mask & ~STANDARD_BITS:
            return Verdict(False, errno.EOPNOTSUPP)
        if Attr.PKEY_INDEX in mask and attrs["pkey_index"] >= IRDMA_PKEY_TBL_SZ:
            return _REFUSED  # irdma_query_pkey(): index >= IRDMA_PKEY_TBL_SZ -> -EINVAL
        # path_mtu: stored unchecked (irdma.path_mtu_unchecked, UNCHECKED)
        if Attr.MAX_QP_RD_ATOMIC in mask and attrs["max_rd_atomic"] > caps.max_qp_init_rd_atom:
            return _REFUSED  # > dev->hw_attrs.max_hw_ord
        if (Attr.MAX_DEST_RD_ATOMIC in mask
                and attrs["max_dest_rd_atomic"] > caps.max_qp_rd_atom):
            return _REFUSED  # > dev->hw_attrs.max_hw_ird
        if Attr.STATE in mask:
            verdict = self.table_from_own_state(qp, attrs, mask) or self.hw_state(qp, attrs)
            if verdict is not None:
                return verdict
        return self.accepted_unchecked(exp, self.UNCHECKED)

    def table_from_own_state(
        self, qp: FakeQP, attrs: AttrValues, mask: Attr
    ) -> Verdict | None:
        """irdma.attr_only_modify_not_table_checked and irdma.cur_state_ignored: linux v6.1,
        v6.12 drivers/infiniband/hw/irdma/verbs.c irdma_modify_qp_roce(): if (attr_mask &
        IB_QP_STATE) { if (!ib_modify_qp_is_ok(iwqp->ibqp_state, attr->qp_state,
        iwqp->ibqp.qp_type, attr_mask)) { ... ret = -EINVAL; goto exit; } ... } -- called only
        with STATE (this method too), from the QP's own state: attr->cur_qp_state is never
        read."""
        if _LINUX.admits(qp.model.state, S(attrs["qp_state"]), qp.qp_type, mask):
            return None
        return _REFUSED

    def hw_state(self, qp: FakeQP, attrs: AttrValues) -> Verdict | None:
        """irdma.reset_is_hw_error_reinit_refused: linux v6.1, v6.12
        drivers/infiniband/hw/irdma/verbs.c irdma_modify_qp_roce(): case IB_QPS_INIT: case
        IB_QPS_RTR: if (iwqp->iwarp_state > IRDMA_QP_STATE_IDLE) { ret = -EINVAL; goto exit; }
        ... case IB_QPS_SQE: case IB_QPS_ERR: case IB_QPS_RESET: ... info.next_iwarp_state =
        IRDMA_QP_STATE_ERROR; -- a QP once moved to RESET is in hardware ERROR, and INIT is
        refused from there. Also: case IB_QPS_RTS: if (iwqp->ibqp_state < IB_QPS_RTR ||
        iwqp->ibqp_state == IB_QPS_ERR) -EINVAL; case IB_QPS_SQD: already SQD -> 0, not RTS ->
        -EINVAL."""
        hw = qp.private.get("iwarp_state", IRDMA_INVALID)
        if self.bend == "reset_is_hw_error_reinit_refused" and hw == IRDMA_INVALID:
            hw = IRDMA_ERROR
        nxt = S(attrs["qp_state"])
        if nxt in (S.INIT, S.RTR) and hw > IRDMA_IDLE:
            return _REFUSED
        if nxt == S.RTS and (qp.model.state < S.RTR or qp.model.state == S.ERR):
            return _REFUSED
        if nxt == S.SQD and hw not in (IRDMA_SQD, IRDMA_RTS):
            return _REFUSED
        return None

    def modified(
        self, qp: FakeQP, before: QPState, after: QPState, attrs: AttrValues, mask: Attr
    ) -> None:
        """The hardware state irdma_modify_qp_roce() records (iwarp_state): INIT from
        INVALID -> IDLE, RTR -> RTR, RTS -> RTS, SQD -> SQD, SQE/ERR/RESET -> ERROR. And the
        access flags as irdma_get_ib_acc_flags() reads them back (attr.readback.access_flags):
        LOCAL_WRITE and REMOTE_WRITE from one bit (wr_rdresp_en), REMOTE_READ, MW_BIND."""
        if Attr.ACCESS_FLAGS in mask:
            given = int(attrs["qp_access_flags"])
            both = AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE
            qp.attrs["qp_access_flags"] = (
                (int(both) if given & both else 0) | given & (int(AccessFlag.REMOTE_READ) | 0x10)
            )
        if Attr.STATE not in mask:
            return
        hw = qp.private.get("iwarp_state", IRDMA_INVALID)
        nxt = S(attrs["qp_state"])
        if nxt == S.INIT and hw == IRDMA_INVALID:
            hw = IRDMA_IDLE
        elif nxt in (S.RTR, S.RTS, S.SQD):
            hw = {S.RTR: IRDMA_RTR, S.RTS: IRDMA_RTS, S.SQD: IRDMA_SQD}[nxt]
        elif nxt in (S.SQE, S.ERR, S.RESET):
            hw = IRDMA_ERROR
        qp.private["iwarp_state"] = hw

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        """irdma.post_below_rts_accepted: rdma-core v64.0 providers/irdma/uverbs.c
        irdma_upost_send() and irdma_upost_recv() read the state only to re-flush a QP in
        ERR: a post below RTS is accepted (this fake never completes it)."""
        return ACCEPTED if exp.outcome is Outcome.REFUSE else None

    def events(self, qp: FakeQP, events: list[EventType]) -> list[EventType]:
        """irdma.sq_drained_never_raised: linux v6.1, v6.12 drivers/infiniband/hw/irdma/utils.c
        irdma_ib_qp_event(): IB_EVENT_QP_FATAL, QP_ACCESS_ERR or QP_REQ_ERR -- never
        IB_EVENT_SQ_DRAINED."""
        return [e for e in events if e != EventType.SQ_DRAINED]


# --------------------------------------------------------------------------------- efa
#: drivers/infiniband/hw/efa/efa_verbs.c efa_modify_qp_validate(): EFA_MODIFY_QP_SUPP_MASK
EFA_MODIFY_QP_SUPP_MASK = (
    Attr.STATE | Attr.CUR_STATE | Attr.EN_SQD_ASYNC_NOTIFY | Attr.PKEY_INDEX | Attr.PORT
    | Attr.QKEY | Attr.SQ_PSN | Attr.RNR_RETRY
)


class Efa(Driver):
    """efa (efa_modify_qp(), efa_modify_qp_validate()) and rdma-core's libefa.

    UD (and SRD, a driver QP type the suite does not create) only: efa_create_qp() refuses
    RC, UC and XRC. The table check is the model's (ib_modify_qp_is_ok() as IB_QPT_UD, from
    the asserted state); the firmware decides the rest. Its only events are completions
    (efa_main.c): no SQ_DRAINED. One port, one GID, a one-entry P_Key table
    (efa_query_port()).
    """

    name = "efa"
    qp_types = (T.UD,)
    CUR_UNSET = True  # efa_query_qp(): memset(qp_attr, 0), cur_qp_state never written
    CAPS = DeviceCaps(max_mtu=MTU.MTU_4096, gid_tbl_len=1)
    BENDS: ClassVar[dict[str, str]] = {
        "post_send_refused_in_err": "post_send in ERR refused with ENOMEM, not EINVAL",
    }

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        if mask & ~STANDARD_BITS:
            return Verdict(False, errno.EOPNOTSUPP)
        verdict = self.unsupported_mask_bits(mask)
        if verdict is not None:
            return verdict
        cur, nxt = _targets(attrs, mask, qp.model.state)
        if not _LINUX.admits(cur, nxt, T.UD, mask):
            return None  # -EINVAL, as the model
        if Attr.PORT in mask and attrs["port_num"] != 1:
            return Verdict(False, errno.EOPNOTSUPP)  # never reached: uverbs refuses first
        return self.pkey_index_nonzero(attrs, mask)

    def unsupported_mask_bits(self, mask: Attr) -> Verdict | None:
        """efa.unsupported_mask_bits_eopnotsupp: linux v6.1, v6.12
        drivers/infiniband/hw/efa/efa_verbs.c efa_modify_qp_validate(): if (qp_attr_mask &
        ~EFA_MODIFY_QP_SUPP_MASK) { ... return -EOPNOTSUPP; } -- before ib_modify_qp_is_ok()."""
        if mask & ~EFA_MODIFY_QP_SUPP_MASK:
            return Verdict(False, errno.EOPNOTSUPP)
        return None

    def pkey_index_nonzero(self, attrs: AttrValues, mask: Attr) -> Verdict | None:
        """efa.pkey_index_nonzero_eopnotsupp: linux v6.1, v6.12
        drivers/infiniband/hw/efa/efa_verbs.c efa_modify_qp_validate(): if ((qp_attr_mask &
        IB_QP_PKEY_INDEX) && qp_attr->pkey_index) { ... return -EOPNOTSUPP; }"""
        if Attr.PKEY_INDEX in mask and attrs["pkey_index"]:
            return Verdict(False, errno.EOPNOTSUPP)
        return None

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        """efa.post_send_refused_in_err: rdma-core v64.0 providers/efa/verbs.c
        efa_post_send_validate(): state != IBV_QPS_RTS && != IBV_QPS_SQD -> EINVAL.
        efa.post_recv_refused_in_err: efa_post_recv_validate(): state == IBV_QPS_RESET ||
        == IBV_QPS_ERR -> EINVAL. (The state is libefa's record, set by efa_modify_qp(): on
        a lone QP, the QP's.)"""
        state = qp.model.state
        if queue == "send" and state not in (S.RTS, S.SQD):
            bent = self.bend == "post_send_refused_in_err" and state == S.ERR
            return Verdict(False, errno.ENOMEM if bent else errno.EINVAL)
        if queue == "recv" and state in (S.RESET, S.ERR):
            return _REFUSED
        return None

    def events(self, qp: FakeQP, events: list[EventType]) -> list[EventType]:
        """efa.sq_drained_never_raised: linux v6.1, v6.12 drivers/infiniband/hw/efa/efa_main.c
        efa_process_eqe(): only EFA_ADMIN_EQE_EVENT_TYPE_COMPLETION is handled (unknown event
        types are logged): no affiliated QP event, IB_EVENT_SQ_DRAINED included."""
        return [e for e in events if e != EventType.SQ_DRAINED]


# --------------------------------------------------------------------------------- hns
class Hns(Driver):
    """hns (hns_roce_modify_qp(), hns_roce_v2_modify_qp()) and rdma-core's libhns.

    hns_roce_modify_qp() refuses a CUR_STATE other than its own state (-EINVAL: where the
    model lets the driver choose), then checks the table and hns_roce_check_qp_attr() as the
    model does; hns_roce_v2_set_abs_fields() then consults its own state machine. libhns's
    post checks are the model's. RC, UD (and XRC, not faked here); UC is refused at
    create_qp.
    """

    name = "hns"
    qp_types = (T.RC, T.UD)
    BENDS: ClassVar[dict[str, str]] = {"no_rts_to_sqd": "RTS->SQD accepted, the QP stays in RTS"}
    #: hns_roce_hw_v2.c check_qp_state(): sm[cur][new]
    SM = frozenset({
        (S.RESET, S.RESET), (S.RESET, S.INIT),
        (S.INIT, S.RESET), (S.INIT, S.INIT), (S.INIT, S.RTR), (S.INIT, S.ERR),
        (S.RTR, S.RESET), (S.RTR, S.RTS), (S.RTR, S.ERR),
        (S.RTS, S.RESET), (S.RTS, S.RTS), (S.RTS, S.ERR),
        (S.ERR, S.RESET), (S.ERR, S.ERR),
    })

    def modify_qp(
        self, qp: FakeQP, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> Verdict | None:
        state = qp.model.state
        if Attr.CUR_STATE in mask and attrs["cur_qp_state"] != state:
            # hns_roce_modify_qp(): if (attr_mask & IB_QP_CUR_STATE && attr->cur_qp_state !=
            # hr_qp->state) goto out; (ret = -EINVAL) -- the model lets the driver refuse it
            return _REFUSED
        if exp.outcome is Outcome.REFUSE:
            return None  # ib_modify_qp_is_ok(), hns_roce_check_qp_attr(): as the model
        if Attr.PATH_MTU in mask and attrs["path_mtu"] > self.caps.active_mtu:
            # hns_roce_qp.c check_mtu_validate(): active_mtu = iboe_get_mtu(netdev->mtu);
            # ... || attr->path_mtu > active_mtu) return -EINVAL;
            return _REFUSED
        nxt = S(attrs["qp_state"]) if Attr.STATE in mask else state
        if state == nxt == S.RESET:
            return None  # hns_roce_modify_qp(): goto out with ret 0
        return self.no_rts_to_sqd(state, nxt)

    def no_rts_to_sqd(self, cur: QPState, nxt: QPState) -> Verdict | None:
        """hns.no_rts_to_sqd: linux v6.1, v6.12 drivers/infiniband/hw/hns/hns_roce_hw_v2.c
        hns_roce_v2_set_abs_fields(): if (!check_qp_state(cur_state, new_state)) return
        -EINVAL; -- check_qp_state()'s sm[IB_QPS_RTS] allows RESET, RTS and ERR only."""
        if (cur, nxt) in self.SM:
            return None
        if self.bend == "no_rts_to_sqd":
            return Verdict(True, state=cur)
        return _REFUSED


DRIVERS: dict[str, type[Driver]] = {d.name: d for d in (Mlx5, BnxtRe, Irdma, Efa, Hns)}


def driver_fake(
    name: str,
    *,
    rdma_core: str = RDMA_CORE,
    kernel: str = K612,
    bend: str | None = None,
    delay: float = 0.0,
    netdev_mtu: MTU = JUMBO,
) -> DriverFake:
    """A fake device of the named driver (mlx5, bnxt_re, irdma, efa, hns)."""
    return DRIVERS[name](rdma_core, bend, netdev_mtu).device(kernel, delay)
