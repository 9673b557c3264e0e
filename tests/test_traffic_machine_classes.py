"""The traffic machine classes machine_for and iwarp_machine_for make: which rules each
variant has (the reproducers print their names, and a rule added or lost changes what a
seed draws), and the QP type's own draws in the rules that take them."""

from __future__ import annotations

from typing import NoReturn

from hypothesis.stateful import RuleBasedStateMachine

from models.enums import QPType
from models.operations import ops_for
from qpconform.machines.pair import iwarp_machine_for, machine_for

IB_RULES = {
    "access_target", "arm_srq", "exchange", "flush_outstanding", "modify", "post_unwritable_recv",
    "post_batch", "post_fenced", "post_foreign_op", "post_inline_over_cap",
    "post_misaligned_atomic", "post_recv", "post_recv_on_srq_qp", "post_send",
    "post_short_recv", "read_burst", "replace_peer", "send_local_fault", "set_qp_access",
    "write_bad_rkey",
}
IB_BYSTANDER_RULES = {"bystander_flush", "bystander_recv", "bystander_reset",
                      "end_flush_over_bystander", "reset_end_over_bystander_entries"}
IWARP_RULES = {"access_write", "close", "destroy_peer", "modify_to_err", "post_batch",
               "post_fenced", "post_recv", "post_send", "reconnect", "write_bad_rkey"}
IWARP_BYSTANDER_RULES = {"bystander_flush", "bystander_recv", "end_flush_over_bystander"}


def _make() -> NoReturn:
    raise AssertionError("no pair is made here")


def _rules(machine: type[RuleBasedStateMachine]) -> set[str]:
    return {r.function.__name__ for r in machine.setup_state().rules}


def _connect_args(machine: type[RuleBasedStateMachine]) -> set[str]:
    (connect,) = machine.setup_state().initializers
    return set(connect.arguments)


def test_each_infiniband_variant_has_its_rules_and_connect_draws() -> None:
    for srq in (False, True):
        for shared_cq in (False, True):
            machine = machine_for(QPType.RC, _make, srq=srq, shared_cq=shared_cq)
            assert machine.__name__ == "TrafficMachineRC"
            assert _rules(machine) == IB_RULES | (IB_BYSTANDER_RULES if shared_cq else set())
            drawn = ({"with_srq", "bystander"} if shared_cq
                     else {"with_srq"} if srq else set())
            assert _connect_args(machine) == drawn


def test_each_iwarp_variant_has_its_rules_and_connect_draws() -> None:
    for shared_cq in (False, True):
        machine = iwarp_machine_for(_make, shared_cq=shared_cq)
        assert machine.__name__ == "IwarpTrafficMachine"
        assert _rules(machine) == IWARP_RULES | (IWARP_BYSTANDER_RULES if shared_cq else set())
        assert _connect_args(machine) == ({"bystander"} if shared_cq else set())


def test_a_typed_rule_draws_the_operations_of_its_machines_qp_type() -> None:
    for qp_type in (QPType.RC, QPType.UC, QPType.UD):
        machine = machine_for(qp_type, _make, faults={"bad_lkey"})
        (post_send,) = [r for r in machine.setup_state().rules
                        if r.function.__name__ == "post_send"]
        assert tuple(post_send.arguments["op"].elements) == tuple(ops_for(qp_type))
        assert machine.faults == frozenset({"bad_lkey"}) and machine.qp_type is qp_type
