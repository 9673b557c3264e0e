"""The variant as an object (models/variant.py) and a device's capabilities at a glance
(models/capabilities.py): the registry, and each variant's answers, which must be what the
model decided by comparing variant names before they were objects."""

import pytest

from models import pair_rules, readback, rules
from models.attributes import PSN_MASKED, VALUE_RULES
from models.capabilities import FEATURES, Capabilities
from models.enums import QPType
from models.qp import QPModel
from models.table import linux_table
from models.variant import IBTA, IWARP, LINUX, VARIANTS, Variant, variant
from qpconform.engine import quirks as engine_quirks
from qpconform.engine.quirks import Quirks

NAMES = ("linux", "ibta", "iwarp")


# ------------------------------------------------------------------------- registry
def test_the_registry_names_three_variants_in_option_order() -> None:
    assert VARIANTS == NAMES
    assert [variant(n) for n in NAMES] == [LINUX, IBTA, IWARP]
    assert all(variant(n).name == variant(n).table.name == n for n in NAMES)


def test_a_variant_parses_to_itself() -> None:
    assert variant(IWARP) is IWARP
    assert QPModel(QPType.RC, "iwarp").variant is QPModel(QPType.RC, IWARP).variant is IWARP


@pytest.mark.parametrize("bad", ["freebsd", "", "LINUX", "auto"])
def test_a_bad_name_is_refused_listing_the_allowed_ones(bad: str) -> None:
    with pytest.raises(ValueError) as caught:
        variant(bad)
    assert str(caught.value) == (
        f"unknown model variant {bad!r}: choose one of linux, ibta, iwarp"
    )


def test_a_variant_needs_its_own_table() -> None:
    with pytest.raises(ValueError, match="given the 'linux' table"):
        Variant("ibta", linux_table(), enforces_linux_abi=False, connection_managed=False)


# ------------------------------------------------- the answers the name comparisons gave
@pytest.mark.parametrize("name", NAMES)
def test_each_answer_is_the_old_name_test(name: str) -> None:
    v = variant(name)
    assert v.connection_managed is (name == "iwarp")
    assert v.ib_transport is (name != "iwarp")
    assert v.enforces_linux_abi is (name in ("linux", "iwarp"))
    assert v.strict_spec_ranges is (name == "ibta")
    assert v.masks_psn is (name == "linux")
    assert v.refuses_extra_bits is (name != "iwarp")
    assert v.reads_back_attributes is (name != "iwarp")
    assert v.query_rule is (rules.IWARP_QUERY if name == "iwarp" else rules.QUERY)
    assert v.qp_types == (frozenset({QPType.RC}) if name == "iwarp" else frozenset(QPType))
    assert v.never_consults == (rules.IWARP_NEVER_CONSULTS if name == "iwarp" else frozenset())
    assert str(v) == name


#: Which variants made each value check when they were named by sets of strings.
_EVERY = {"linux", "ibta", "iwarp"}
_OLD_VALUE_VARIANTS = {
    "attr.port_num.range": _EVERY,
    "attr.ah_port_num.range": _EVERY,
    "attr.ah_sgid_index.range": _EVERY,
    "attr.alt_port_num.range": _EVERY,
    "attr.ah_sgid_index.empty": {"linux", "iwarp"},
    "attr.qp_access_flags.driver": {"linux", "iwarp"},
    "attr.alt_ah_port_num.match": {"linux", "iwarp"},
    **{f"attr.{f}.range": {"ibta"}
       for f in ("timeout", "retry_cnt", "rnr_retry", "min_rnr_timer", "dest_qp_num")},
    **{f"attr.{f}.width": {"linux"}
       for f in ("timeout", "retry_cnt", "rnr_retry", "min_rnr_timer", "dest_qp_num")},
    "attr.sq_psn.range": {"ibta"},
    "attr.rq_psn.range": {"ibta"},
    "attr.qp_access_flags.defined": {"ibta"},
    "attr.alt_path.roce": {"linux"},
    "attr.alt_path.iwarp": {"iwarp"},
    **{r: {"linux", "ibta"} for r in (
        "attr.pkey_index.range", "attr.path_mtu.range", "attr.path_mtu.above_active",
        "attr.max_rd_atomic.range", "attr.max_dest_rd_atomic.range",
        "attr.path_mig_state.armed",
    )},
}


def test_each_value_check_is_made_by_the_variants_that_made_it() -> None:
    assert {vr.rule.id for vr in VALUE_RULES} == set(_OLD_VALUE_VARIANTS)
    for vr in VALUE_RULES:
        made_by = {n for n in NAMES if vr in variant(n).value_rules}
        assert made_by == _OLD_VALUE_VARIANTS[vr.rule.id], vr.rule.id
        assert made_by == {n for n in NAMES if vr.applies(variant(n))}


def test_value_rules_keep_the_declared_order() -> None:
    for n in NAMES:
        got = variant(n).value_rules
        assert list(got) == [vr for vr in VALUE_RULES if vr in got]
    assert PSN_MASKED.id == "attr.psn.masked"  # linux only: masks_psn


def _old_consults(name: str, rule_id: str, readback_rule: bool) -> bool:
    """models/catalog.py's _consults() before the variant was an object."""
    if rule_id.startswith("iwarp."):
        return name == "iwarp"
    if name != "iwarp":
        return True
    return not readback_rule and rule_id not in rules.IWARP_NEVER_CONSULTS


@pytest.mark.parametrize("name", NAMES)
def test_consults_is_the_old_catalog_test(name: str) -> None:
    for module in (rules, pair_rules, readback):
        for rule in module.RULES:
            assert variant(name).consults(rule, readback_rule=module is readback) is (
                _old_consults(name, rule.id, module is readback)
            ), rule.id


# ------------------------------------------------------------------ capabilities
def test_the_features_are_the_quirk_files_features() -> None:
    assert engine_quirks.FEATURES is FEATURES
    assert FEATURES == ("SQD", "SQE", "ALT_PATH", "XRC", "RAW_PACKET", "RATE_LIMIT", "ATOMICS",
                        "SRQ", "SRQ_RESIZE")


def test_what_each_variant_allows() -> None:
    assert Capabilities.of(LINUX) == Capabilities.of(IBTA) == Capabilities()
    assert Capabilities.of(LINUX).lacks == ()
    assert Capabilities.of(IWARP).lacks == (
        "ALT_PATH", "XRC", "RAW_PACKET", "RATE_LIMIT", "ATOMICS"
    )
    assert Capabilities.of(IWARP).sqd and Capabilities.of(IWARP).sqe  # CLOSING, TERMINATE


def test_lacked_features_come_off_the_variants() -> None:
    caps = Capabilities.of(LINUX, ["SQD"])
    assert not caps.sqd and not caps.has("SQD") and caps.has("SQE")
    assert caps.lacks == ("SQD",)
    assert caps.to_json() == {f: f != "SQD" for f in FEATURES}
    assert list(caps.to_json()) == list(FEATURES)


def test_an_unknown_feature_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown feature.*LASER.*choose from SQD, SQE"):
        Capabilities.of(LINUX, ["LASER"])
    with pytest.raises(ValueError, match="unknown feature 'sqd'"):
        Capabilities().has("sqd")


_PROFILE = '''
[[quirk]]
id = "dev.no_sqd"
rule = "linux.transition.*.RTS->SQD"
feature = "SQD"
reason = "no drain"
evidence = ["seen"]

[[quirk]]
id = "dev.other"
rule = "attr.timeout.width"
reason = "masks"
evidence = ["seen"]

[[quirk]]
id = "dev.old_no_sqe"
rule = "linux.transition.*.RTS->SQE"
feature = "SQE"
kernel = "<5"
reason = "old kernels only"
evidence = ["seen"]
'''


def test_a_profile_gives_the_device_capabilities_at_a_glance() -> None:
    loaded = Quirks.from_toml(_PROFILE, "dev")
    assert loaded.lacked_features == ("SQD", "SQE")
    run = loaded.for_run({"kernel": "6.12.0"})  # the SQE entry is not applicable here
    assert run.lacked_features == ("SQD",)
    assert run.capabilities(LINUX).lacks == ("SQD",)
    assert run.capabilities(IWARP).lacks == ("SQD", "ALT_PATH", "XRC", "RAW_PACKET",
                                             "RATE_LIMIT", "ATOMICS")
