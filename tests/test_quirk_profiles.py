"""The shipped quirk profiles: they load, every entry says where it comes from, source
entries cite file, function and version, every rule glob names a rule the model or the
engine can produce, and each source entry covers its predicted record and not its near
miss."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from fixtures.selection import QUIRKS_DIR, family_quirks_file
from models.catalog import all_rules
from qpconform.adapters.identity import driver_family
from qpconform.engine.quirk_schema import FEATURES, PROVENANCES, SOURCE, cites_source
from qpconform.engine.quirks import Quirk, Quirks
from qpconform.engine.records import Divergence

PROFILES = sorted(QUIRKS_DIR.glob("*.toml"))


def producible_rule_ids() -> frozenset[str]:
    """Every rule id a divergence record can carry: the model's rules of every variant over
    all QP types and the pair harness's own checks, as the model lists them
    (models/catalog.py)."""
    return frozenset(all_rules())


def unknown_rules(q: Quirk, known: frozenset[str]) -> list[str]:
    """The rule globs of a quirk that match no rule id in `known`."""
    return [g for g in q.rules if not any(fnmatch.fnmatchcase(r, g) for r in known)]

PREDICTED = ("mlx5", "bnxt_re", "irdma", "efa", "hns")
K61, K612 = "6.1.0-50-amd64", "6.12.117+deb13-amd64"


def test_every_nic_has_a_profile() -> None:
    assert {p.stem for p in PROFILES} >= {"rxe", *PREDICTED}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_loads_and_every_entry_states_its_provenance(path: Path) -> None:
    quirks = Quirks.load(path)
    raw = tomllib.loads(path.read_text())["quirk"]
    assert len(quirks) == len(raw) > 0
    for entry in raw:
        assert entry.get("provenance") in PROVENANCES, f"{entry['id']}: no explicit provenance"
        assert entry["id"].startswith(f"{path.stem}."), entry["id"]
    wanted = SOURCE if path.stem in PREDICTED else "observed"
    assert {q.provenance for q in quirks} == {wanted}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_rule_glob_names_a_producible_rule(path: Path) -> None:
    known = producible_rule_ids()
    bad = {q.id: unknown_rules(q, known) for q in Quirks.load(path) if unknown_rules(q, known)}
    assert not bad


def test_producible_rule_ids_cover_model_and_engine() -> None:
    known = producible_rule_ids()
    for rid in ("linux.transition.RC.RTS->SQD", "linux.transition.UD.INIT->INIT.extra",
                "linux.transition.invalid.RTR->RTR", "ibta.transition.invalid.RESET->RTS",
                "attr.path_mtu.range", "ibta.post_send.RESET", "ibta.post_recv.ERR",
                "pair.sqd.sq_draining", "pair.state", "uverbs.modify_qp.unknown_mask"):
        assert rid in known, rid
    assert "linux.transition.RC.RTS->SQE" not in known  # not a table pair
    assert unknown_rules(_one('rule = "attr.no_such.range"'), known) == ["attr.no_such.range"]


@pytest.mark.parametrize("name", PREDICTED)
def test_source_entries_cite_file_function_and_version(name: str) -> None:
    for q in Quirks.load(QUIRKS_DIR / f"{name}.toml"):
        cited = [e for e in q.evidence if cites_source(e)]
        assert cited, q.id
        assert any(e.startswith(("linux v", "rdma-core v")) for e in cited), q.id
        for line in q.evidence:  # kernel lines: read in both kernels the profile covers
            if line.startswith("linux v"):
                assert "v6.1" in line and "v6.12" in line, (q.id, line)
        assert q.feature is None or q.feature in FEATURES


def _one(extra: str, evidence: str = "e") -> Quirk:
    text = f'[[quirk]]\nid = "x.q"\nreason = "r"\nevidence = ["{evidence}"]\n{extra}\n'
    if "rule =" not in extra:
        text += 'rule = "r"\n'
    [quirk] = Quirks.from_toml(text, source="p.toml")
    return quirk


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ('provenance = "guessed"', "provenance = 'guessed' is not allowed (allowed: observed, "
         "source)"),
        ("provenance = 1", "provenance = 1 is not allowed"),
        ('feature = "TAGS"', "feature = 'TAGS' is not allowed (allowed: SQD, SQE, ALT_PATH"),
        ('provenance = "source"', "needs an evidence line naming a source file, a function"),
    ],
)
def test_bad_provenance_or_feature_is_named(change: str, error: str) -> None:
    with pytest.raises(ValueError, match=r"p\.toml quirk #1 \(x\.q\)") as caught:
        _one(change)
    assert error in str(caught.value)


def test_provenance_defaults_to_observed_and_source_needs_a_citation() -> None:
    assert _one("").provenance == "observed" and _one("").feature is None
    cited = _one('provenance = "source"\nfeature = "SQD"', "linux v6.12 drivers/x/y.c f(): z")
    assert (cited.provenance, cited.feature) == ("source", "SQD")
    assert cites_source("linux v6.1 drivers/infiniband/hw/hns/hns_roce_hw_v2.c check_qp_state()")
    assert not cites_source("linux drivers/infiniband/hw/hns/hns_roce_hw_v2.c check_qp_state()")
    assert not cites_source("linux v6.1 drivers/infiniband/hw/hns/hns_roce_hw_v2.c: sm[]")
    assert not cites_source("linux v6.1 check_qp_state() in hns")


def test_described_keeps_provenance_of_entries_not_applicable() -> None:
    quirks = Quirks.load(QUIRKS_DIR / "bnxt_re.toml")
    old = quirks.for_run({"kernel": K612, "rdma_core": "44.0-2"})
    assert "bnxt_re.post_below_rts_accepted" in old.not_applicable
    assert old.described["bnxt_re.post_below_rts_accepted"] == {"provenance": "source"}
    assert Quirks.load(QUIRKS_DIR / "mlx5.toml").described["mlx5.no_rts_to_sqd"] == {
        "provenance": "source", "feature": "SQD"}


# -------------------------------------------------------------------------- device names
@pytest.mark.parametrize(
    ("device", "family"),
    [("rxe0", "rxe"), ("mlx5_0", "mlx5"), ("mlx5_bond_0", "mlx5"), ("bnxt_re0", "bnxt_re"),
     ("bnxt_re12", "bnxt_re"), ("irdma0", "irdma"), ("irdma1", "irdma"), ("efa_0", "efa"),
     ("hns_0", "hns"), ("hns0", "hns")],
)
def test_kernel_device_names_pick_their_profile(device: str, family: str) -> None:
    assert driver_family(device) == family
    assert family_quirks_file(device, sysfs=Path("/nonexistent")) == QUIRKS_DIR / f"{family}.toml"


@pytest.mark.parametrize(
    ("driver", "family"),
    [("mlx5_core", "mlx5"), ("bnxt_en", "bnxt_re"), ("ice", "irdma"), ("i40e", "irdma"),
     ("efa", "efa"), ("hns3", "hns")],
)
def test_renamed_devices_pick_their_profile_by_driver(tmp_path: Path, driver: str,
                                                      family: str) -> None:
    """rdma-core's udev rules may rename devices (rocep1s0f0, ibp...): then the PCI driver
    decides."""
    drv = tmp_path / "drivers" / driver
    drv.mkdir(parents=True)
    dev = tmp_path / "rocep1s0f0" / "device"
    dev.mkdir(parents=True)
    (dev / "driver").symlink_to(drv)
    assert family_quirks_file("rocep1s0f0", sysfs=tmp_path) == QUIRKS_DIR / f"{family}.toml"
    assert family_quirks_file("rocep9s0f0", sysfs=tmp_path) is None  # no sysfs entry


# ------------------------------------------------------------ source entries: near misses
def _record(**over: object) -> Divergence:
    fields: dict = dict(
        qp_type="RC", state="RTS", verb="modify", attrs={}, mask=["STATE"], expected="e",
        observed="o", rule_id="linux.transition.RC.RTS->SQD", rule_summary="s", source="src",
        device={}, steps=[], kind="outcome", tags=["outcome=refused", "errno=EINVAL"],
        context={"state": "RTS", "after": [], "since": []},
    )
    fields.update(over)
    return Divergence(**fields)


def _entry(family: str, quirk_id: str, kernel: str = K612, rdma_core: str = "56.1") -> Quirk:
    quirks = Quirks.load(QUIRKS_DIR / f"{family}.toml").for_run(
        {"kernel": kernel, "rdma_core": rdma_core}
    )
    return next(q for q in quirks if q.id == quirk_id)


ACCEPTED = ["outcome=accepted"]
EOPNOTSUPP = ["outcome=refused", "errno=EOPNOTSUPP"]
DRAINED_MISSING = {"kind": "missing_event", "rule_id": "ibta.sqd.drained_event",
                   "tags": ["missing_event", "missing_event=SQ_DRAINED"]}
FATAL_MISSING = {"kind": "missing_event", "rule_id": "ibta.err.async_error",
                 "tags": ["missing_event", "missing_event=QP_FATAL"]}
NEAR_MISSES = [
    # (family, id, the predicted record, a near miss the entry must not hide)
    ("mlx5", "mlx5.no_rts_to_sqd", {}, {"rule_id": "linux.transition.RC.SQD->RTS"}),
    ("mlx5", "mlx5.no_rts_to_sqd", {}, {"tags": ["outcome=refused", "errno=EBUSY"]}),
    ("hns", "hns.no_rts_to_sqd", {"qp_type": "UD", "rule_id": "linux.transition.UD.RTS->SQD"},
     {"rule_id": "linux.transition.UD.RTS->SQD", "tags": ACCEPTED}),
    ("mlx5", "mlx5.post_below_rts_accepted",
     {"verb": "post_send", "rule_id": "ibta.post_send.INIT", "tags": ACCEPTED},
     {"verb": "post_send", "rule_id": "ibta.post_send.ERR", "tags": ["outcome=refused"]}),
    ("mlx5", "mlx5.reset_drops_unpolled_completions",
     {"verb": "completion", "kind": "missing_completion", "rule_id": "ibta.err.flush",
      "tags": ["queue=send"], "context": {"since": ["ERR", "RESET"]}},
     {"verb": "completion", "kind": "missing_completion", "rule_id": "ibta.err.flush",
      "tags": ["queue=send"], "context": {"since": ["ERR"]}}),
    ("bnxt_re", "bnxt_re.attr_only_modify_not_table_checked",
     {"rule_id": "linux.transition.RC.RTS->RTS.extra", "mask": ["PATH_MTU"], "tags": ACCEPTED},
     {"rule_id": "linux.transition.RC.RTS->RTS.extra", "mask": ["STATE", "PATH_MTU"],
      "tags": ACCEPTED}),
    ("bnxt_re", "bnxt_re.cur_state_ignored",
     {"rule_id": "linux.cur_state.allowed", "attrs": {"cur_qp_state": 1}, "tags": ACCEPTED},
     {"rule_id": "linux.cur_state.allowed", "attrs": {}, "tags": ACCEPTED}),
    ("bnxt_re", "bnxt_re.max_rd_atomic_capped",
     {"rule_id": "attr.max_rd_atomic.range", "tags": ACCEPTED},
     {"rule_id": "attr.max_dest_rd_atomic.range", "tags": ["outcome=refused", "errno=EINVAL"]}),
    ("bnxt_re", "bnxt_re.path_mtu_zero_accepted",
     {"rule_id": "attr.path_mtu.range", "attrs": {"path_mtu": 6}, "tags": ACCEPTED},
     # an ibv_mtu value above the netdev's MTU: bnxt_re refuses it (EINVAL)
     {"rule_id": "attr.path_mtu.range", "attrs": {"path_mtu": 5}, "tags": ACCEPTED}),
    ("bnxt_re", "bnxt_re.pkey_index_unchecked",
     {"rule_id": "attr.pkey_index.range", "tags": ACCEPTED},
     {"rule_id": "attr.pkey_index.range", "tags": EOPNOTSUPP}),
    ("bnxt_re", "bnxt_re.sq_drained_never_raised", DRAINED_MISSING, FATAL_MISSING),
    ("irdma", "irdma.cur_state_ignored",
     {"rule_id": "linux.cur_state.allowed", "attrs": {"cur_qp_state": 1}, "tags": ACCEPTED},
     {"rule_id": "linux.transition.RC.RTR->RTS", "attrs": {}, "tags": ACCEPTED}),
    ("irdma", "irdma.reset_is_hw_error_reinit_refused",
     {"state": "RESET", "rule_id": "linux.transition.RC.RESET->INIT",
      "context": {"after": ["RESET->RESET"]}},
     {"state": "RESET", "rule_id": "linux.transition.RC.RESET->INIT",
      "context": {"after": ["RESET->INIT"]}}),
    ("irdma", "irdma.sq_drained_never_raised", DRAINED_MISSING, FATAL_MISSING),
    ("efa", "efa.sq_drained_never_raised", {**DRAINED_MISSING, "qp_type": "UD"},
     {**FATAL_MISSING, "qp_type": "UD"}),
    ("irdma", "irdma.reset_is_hw_error_reinit_refused",
     {"state": "RESET", "rule_id": "linux.transition.UD.RESET->INIT",
      "context": {"after": ["RTS->RESET"]}},
     {"state": "RESET", "rule_id": "linux.transition.UD.RESET->INIT", "context": {"after": []}}),
    ("irdma", "irdma.reset_is_hw_error_reinit_refused",
     {"state": "RESET", "rule_id": "linux.transition.RC.RESET->INIT",
      "context": {"after": ["ERR->RESET"]}},
     {"qp_type": "UC", "state": "RESET", "rule_id": "linux.transition.UC.RESET->INIT",
      "context": {"after": ["ERR->RESET"]}}),
    ("irdma", "irdma.post_below_rts_accepted",
     {"verb": "post_recv", "rule_id": "ibta.post_recv.RESET", "tags": ACCEPTED},
     {"verb": "post_recv", "rule_id": "ibta.post_recv.RESET", "tags": ["outcome=refused"]}),
    ("efa", "efa.unsupported_mask_bits_eopnotsupp",
     {"qp_type": "UD", "rule_id": "linux.transition.UD.RTS->RTS.extra", "tags": EOPNOTSUPP},
     {"qp_type": "UD", "rule_id": "linux.transition.UD.RTS->RTS.extra",
      "tags": ["outcome=refused", "errno=EINVAL"]}),
    ("efa", "efa.pkey_index_nonzero_eopnotsupp",
     {"qp_type": "UD", "rule_id": "attr.pkey_index.range", "tags": EOPNOTSUPP},
     {"qp_type": "UD", "rule_id": "attr.port_num.range", "tags": EOPNOTSUPP}),
    ("efa", "efa.post_send_refused_in_err",
     {"verb": "post_send", "state": "ERR", "rule_id": "ibta.post_send.ERR"},
     {"verb": "post_send", "state": "ERR", "rule_id": "ibta.post_send.ERR",
      "tags": ["outcome=refused", "errno=ENOMEM"]}),
]


@pytest.mark.parametrize(("family", "quirk_id", "predicted", "near"), NEAR_MISSES,
                         ids=[f"{n[1]}-{i}" for i, n in enumerate(NEAR_MISSES)])
def test_source_entry_covers_its_prediction_not_the_near_miss(
    family: str, quirk_id: str, predicted: dict, near: dict
) -> None:
    quirk = _entry(family, quirk_id)
    assert quirk.matches(_record(**predicted))
    assert not quirk.matches(_record(**near))
    whole = Quirks.load(QUIRKS_DIR / f"{family}.toml").for_run({"kernel": K61, "rdma_core": "56"})
    assert whole.match(_record(**near)) is None  # no other entry of the profile hides it


def test_bnxt_re_post_entries_follow_the_rdma_core_release() -> None:
    post_init = _record(verb="post_send", rule_id="ibta.post_send.INIT", tags=ACCEPTED)
    post_err = _record(verb="post_send", state="ERR", rule_id="ibta.post_send.ERR")
    new = Quirks.load(QUIRKS_DIR / "bnxt_re.toml").for_run({"kernel": K61, "rdma_core": "47.0"})
    old = Quirks.load(QUIRKS_DIR / "bnxt_re.toml").for_run({"kernel": K61, "rdma_core": "44.0"})
    assert new.match(post_init) is not None and new.match(post_err) is None
    assert old.match(post_init) is None and old.match(post_err) is not None
