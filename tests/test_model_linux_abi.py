"""What the Linux ABI really refuses, leaves to the driver, or adds (issue 10: no false alarms).

Each test pins one decision of the model against the kernel sources cited in
the rule it names (drivers/infiniband/core/uverbs_cmd.c, verbs.c, cache.c and
the drivers); each one failed on the model before the decision was corrected.
"""

from __future__ import annotations

import errno

import pytest

from models.attributes import DeviceCaps
from models.enums import MTU, Attr, QPState, QPType
from models.outcomes import Outcome
from models.qp import QPModel
from tests.sequences import VALID_ATTRS

S = QPState
T = QPType
VALID = VALID_ATTRS
INIT = Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS
RTR = (
    Attr.STATE | Attr.AV | Attr.PATH_MTU | Attr.DEST_QPN | Attr.RQ_PSN
    | Attr.MAX_DEST_RD_ATOMIC | Attr.MIN_RNR_TIMER
)
RTS = (
    Attr.STATE | Attr.TIMEOUT | Attr.RETRY_CNT | Attr.RNR_RETRY | Attr.SQ_PSN
    | Attr.MAX_QP_RD_ATOMIC
)
#: Where each field is taken on an RC QP: (from, to, mask).
WHERE = {
    "timeout": (S.RTR, S.RTS, RTS),
    "retry_cnt": (S.RTR, S.RTS, RTS),
    "rnr_retry": (S.RTR, S.RTS, RTS),
    "min_rnr_timer": (S.INIT, S.RTR, RTR),
    "dest_qp_num": (S.INIT, S.RTR, RTR),
    "qp_access_flags": (S.RESET, S.INIT, INIT),
    "ah_sgid_index": (S.INIT, S.RTR, RTR),
    "alt_ah_port_num": (S.INIT, S.RTR, RTR | Attr.ALT_PATH),
    "path_mig_state": (S.RTR, S.RTS, RTS | Attr.PATH_MIG_STATE),
    "path_mtu": (S.INIT, S.RTR, RTR),
}


def modify(
    field: str, value: int, variant: str = "linux", caps: DeviceCaps | None = None
) -> tuple[QPModel, object]:
    cur, nxt, mask = WHERE[field]
    model = QPModel(T.RC, variant, caps)
    model.state, model.port = cur, 1
    return model, model.modify({**VALID, "qp_state": int(nxt), field: value}, mask)


# ------------------------------------------------------------------- field widths
@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 32), ("timeout", 255), ("retry_cnt", 8), ("rnr_retry", 8),
     ("min_rnr_timer", 32), ("dest_qp_num", 1 << 24)],
)
def test_linux_leaves_values_beyond_the_field_width_to_the_driver(field: str, value: int) -> None:
    """Neither uverbs nor the core checks them; mlx5 stores them masked (MLX5_SET), rxe
    refuses some: both conform, and the QP follows what the device did."""
    model, exp = modify(field, value)
    assert exp.outcome is Outcome.EITHER
    assert exp.rule.id == f"attr.{field}.width" and exp.rule.kind == "may"
    assert exp.rule.layer == "driver"
    assert exp.allows(True) and exp.allows(False, errno.EINVAL)
    assert not exp.allows(False, errno.EPERM)
    model.apply(exp, accepted=True)
    assert model.state == WHERE[field][1]


@pytest.mark.parametrize(
    ("field", "value"), [("timeout", 32), ("retry_cnt", 8), ("dest_qp_num", 1 << 24)]
)
def test_ibta_keeps_the_field_widths_strict(field: str, value: int) -> None:
    _, exp = modify(field, value, "ibta")
    assert exp.outcome is Outcome.REFUSE and exp.rule.id == f"attr.{field}.range"
    assert exp.rule.layer == "spec"


def test_values_inside_the_width_are_accepted() -> None:
    for field, value in (("timeout", 31), ("retry_cnt", 7), ("dest_qp_num", (1 << 24) - 1)):
        assert modify(field, value)[1].outcome is Outcome.ACCEPT


# ------------------------------------------------------------------------ path MTU
ETHERNET_1500 = DeviceCaps(max_mtu=MTU.MTU_4096, active_mtu=MTU.MTU_1024)


@pytest.mark.parametrize("variant", ["linux", "ibta"])
@pytest.mark.parametrize("mtu", [MTU.MTU_2048, MTU.MTU_4096])
def test_a_path_mtu_above_the_active_mtu_is_left_to_the_driver(variant: str, mtu: MTU) -> None:
    """On a 1500-byte netdev (active 1024, max 4096) bnxt_re (at ->RTR) and hns refuse 2048
    and 4096, mlx5 accepts them: a may rule, not the max_mtu must."""
    _, exp = modify("path_mtu", int(mtu), variant, ETHERNET_1500)
    assert exp.outcome is Outcome.EITHER
    assert exp.rule.id == "attr.path_mtu.above_active" and exp.rule.kind == "may"
    assert exp.allows(True) and exp.allows(False, errno.EINVAL)


def test_a_path_mtu_up_to_the_active_mtu_is_accepted_and_above_max_refused() -> None:
    assert modify("path_mtu", int(MTU.MTU_1024), caps=ETHERNET_1500)[1].outcome is Outcome.ACCEPT
    _, exp = modify("path_mtu", 6, caps=ETHERNET_1500)
    assert exp.outcome is Outcome.REFUSE and exp.rule.id == "attr.path_mtu.range"
    jumbo = DeviceCaps(max_mtu=MTU.MTU_4096, active_mtu=MTU.MTU_4096)
    assert modify("path_mtu", int(MTU.MTU_4096), caps=jumbo)[1].outcome is Outcome.ACCEPT


# -------------------------------------------------------------------- access flags
@pytest.mark.parametrize("flags", [16, 32, 1 << 20, 1 << 30, 16 | 1])
def test_linux_leaves_access_bits_beyond_the_qp_bits_to_the_driver(flags: int) -> None:
    """16 is IB_UVERBS_ACCESS_MW_BIND, a defined flag; modify_qp() and _ib_modify_qp() copy
    qp_access_flags unchecked: rxe (6.4+) refuses what it does not support, mlx5 ignores."""
    _, exp = modify("qp_access_flags", flags)
    assert exp.outcome is Outcome.EITHER
    assert exp.rule.id == "attr.qp_access_flags.driver" and exp.rule.kind == "may"


def test_ibta_refuses_access_bits_beyond_the_qp_bits() -> None:
    _, exp = modify("qp_access_flags", 16, "ibta")
    assert exp.outcome is Outcome.REFUSE and exp.rule.id == "attr.qp_access_flags.defined"
    assert modify("qp_access_flags", 15)[1].outcome is Outcome.ACCEPT


# ------------------------------------------------------------------------- GIDs
def test_an_empty_gid_entry_in_range_is_refused_with_enodata() -> None:
    """rdma_get_gid_attr() (cache.c) answers ENODATA for an invalid entry in range."""
    caps = DeviceCaps(gid_tbl_len=16, empty_gids=frozenset({3}))
    _, exp = modify("ah_sgid_index", 3, caps=caps)
    assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.ENODATA}
    assert exp.rule.id == "attr.ah_sgid_index.empty" and exp.rule.layer == "core"
    _, past = modify("ah_sgid_index", 16, caps=caps)
    assert past.errnos == {errno.EINVAL} and past.rule.id == "attr.ah_sgid_index.range"
    assert modify("ah_sgid_index", 2, caps=caps)[1].outcome is Outcome.ACCEPT


# ----------------------------------------------------------------- alternate path
def test_the_alternate_av_port_must_be_valid_and_equal_alt_port_num() -> None:
    """uverbs modify_qp(): !rdma_is_port_valid(alt_dest.port_num) || alt_port_num !=
    alt_dest.port_num -> EINVAL (an IB port: RoCE refuses ALT_PATH anyway)."""
    caps = DeviceCaps(phys_port_cnt=2, link_layer="infiniband")
    assert modify("alt_ah_port_num", 1, caps=caps)[1].outcome is Outcome.ACCEPT
    for port in (2, 3):
        _, exp = modify("alt_ah_port_num", port, caps=caps)
        assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.EINVAL}
        assert exp.rule.id == "attr.alt_ah_port_num.match" and exp.rule.layer == "uverbs"


# ------------------------------------------------------------------ path migration
def test_path_mig_state_armed_is_left_to_the_driver() -> None:
    """rdmavt refuses ARMED (rvt_modify_qp), mlx5 stores it: implementation-defined."""
    _, exp = modify("path_mig_state", 2)
    assert exp.outcome is Outcome.EITHER and exp.rule.id == "attr.path_mig_state.armed"
    assert modify("path_mig_state", 1)[1].outcome is Outcome.ACCEPT


# ------------------------------------------------------------------------- Q_Key
def _qkey_modify(qkey: int, privileged: bool, variant: str = "linux") -> object:
    model = QPModel(T.UD, variant, DeviceCaps(privileged_qkey=privileged))
    mask = Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.QKEY
    return model.modify({**VALID, "qp_state": int(S.INIT), "qkey": qkey}, mask)


@pytest.mark.parametrize("qkey", [0x80000000, 0xFFFFFFFF])
def test_a_controlled_qkey_needs_privilege(qkey: int) -> None:
    """uverbs modify_qp(): qkey & IB_QP_SET_QKEY && !rdma_nl_get_privileged_qkey() -> EPERM."""
    exp = _qkey_modify(qkey, privileged=False)
    assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.EPERM}
    assert exp.rule.id == "uverbs.modify_qp.qkey_privileged" and exp.rule.layer == "uverbs"
    assert _qkey_modify(qkey, privileged=True).outcome is Outcome.ACCEPT


def test_an_ordinary_qkey_needs_no_privilege() -> None:
    assert _qkey_modify(0x7FFFFFFF, privileged=False).outcome is Outcome.ACCEPT
    assert DeviceCaps().privileged_qkey  # the suite runs as root (CAP_NET_RAW)


# ------------------------------------------------------------------------- XRC posts
@pytest.mark.parametrize("variant", ["linux", "ibta"])
@pytest.mark.parametrize("state", [S.INIT, S.RTR, S.RTS, S.ERR])
def test_xrc_qps_without_a_queue_refuse_the_post(variant: str, state: QPState) -> None:
    """XRC_RECV has neither queue, XRC_SEND no receive queue (uverbs create_qp())."""
    cases = [(T.XRC_RECV, "post_send"), (T.XRC_RECV, "post_recv"), (T.XRC_SEND, "post_recv")]
    for qp_type, verb in cases:
        model = QPModel(qp_type, variant)
        model.state = state
        exp = getattr(model, verb)(7)
        assert exp.outcome is Outcome.REFUSE, (qp_type, verb)
        assert exp.errnos is None and exp.never_run == {7}
        assert exp.rule.id.startswith("xrc.") and exp.rule.kind == "optional"
        model.apply(exp, accepted=False)
        assert 7 in model.queues.never_run
    sender = QPModel(T.XRC_SEND, variant)
    sender.state = state
    sends = state in (S.RTS, S.ERR)
    assert sender.post_send(8).outcome is (Outcome.ACCEPT if sends else Outcome.REFUSE)
