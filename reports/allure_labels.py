"""Allure labels, parameters and attachments for conformance tests; no-ops without allure-pytest.

The suites call `label_test` at the top of a test, the checker calls
`attach_divergence` before raising, and the plugin calls `set_device` once the
device is open and `write_environment` once per run. The device identity goes
in as test parameters, which Allure folds into a test's history id: runs on two
devices are kept apart instead of merged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reports.atomic import write_atomic

try:  # allure-pytest is a dependency, but the reports must work without it
    import allure
except ImportError:  # pragma: no cover - exercised only where allure is absent
    allure = None

EPIC = "QP state machine"
FEATURES = ("transitions", "attributes", "post rules", "error handling", "drain")
#: Identity fields that tell two devices (or two firmwares) apart in Allure's history.
DEVICE_PARAMETERS = (
    ("device", ("device", "name")),
    ("firmware", ("fw_ver",)),
    ("node_guid", ("node_guid",)),
    ("driver", ("driver",)),
)
_KERNEL_TREE = "https://elixir.bootlin.com/linux/latest/source/"
_RDMA_CORE = "https://github.com/linux-rdma/rdma-core"

_device: dict[str, Any] = {}


def set_device(identity: Mapping[str, Any]) -> None:
    """Remember the device identity: every later `label_test` adds it as parameters."""
    _device.clear()
    _device.update(identity)


def source_url(source: Any) -> str | None:
    """A browsable URL for a rule's source when there is a public one (kernel, rdma-core)."""
    document = str(getattr(source, "document", source))
    if document.startswith("linux "):
        return _KERNEL_TREE + document.split(" ", 1)[1].split(":", 1)[0]
    if document.startswith("rdma-core"):
        return _RDMA_CORE
    return None


def label_test(
    feature: str,
    qp_type: Any,
    transition: str | None = None,
    rule: Any = None,
    device: Mapping[str, Any] | None = None,
) -> None:
    """Label the running test: epic, feature, story (QP type and transition), rule, device.

    `rule` is a models Rule (id, source, link) or a rule id; `transition` e.g. "RTR->RTS".
    """
    if allure is None:
        return
    if feature not in FEATURES:
        raise ValueError(f"feature must be one of {FEATURES}, not {feature!r}")
    qp = getattr(qp_type, "name", str(qp_type))
    allure.dynamic.epic(EPIC)
    allure.dynamic.feature(feature)
    allure.dynamic.story(f"{qp} {transition}" if transition else qp)
    allure.dynamic.parameter("qp_type", qp)
    if rule is not None:
        rule_id = getattr(rule, "id", str(rule))
        allure.dynamic.label("rule", rule_id)
        source = getattr(rule, "source", None)
        if source is not None:
            allure.dynamic.label("spec", str(source))
            url = source_url(source)
            if url:
                allure.dynamic.link(url, name=f"{rule_id}: {source}")
    for name, value in device_parameters(device if device is not None else _device).items():
        allure.dynamic.parameter(name, value)


def device_parameters(identity: Mapping[str, Any]) -> dict[str, str]:
    """The identity fields that become Allure parameters (only those present)."""
    out = {}
    for name, keys in DEVICE_PARAMETERS:
        value = next((identity[k] for k in keys if identity.get(k)), None)
        if value is not None:
            out[name] = str(value)
    return out


def _field(div: Any, name: str) -> Any:
    return div.get(name) if isinstance(div, Mapping) else getattr(div, name, None)


def divergence_text(div: Any) -> str:
    """A divergence as a few readable lines (also the shape of the JUnit failure message)."""
    lines = [
        f"{_field(div, 'qp_type')} {_field(div, 'verb')} in {_field(div, 'state')}: "
        f"{_field(div, 'rule_id')}",
        f"  rule:     {_field(div, 'rule_summary')}",
        f"  source:   {_field(div, 'source')}",
        f"  expected: {_field(div, 'expected')}",
        f"  observed: {_field(div, 'observed')}",
    ]
    if _field(div, "known_quirk"):
        lines.append(f"  known quirk: {_field(div, 'known_quirk')}")
    if _field(div, "reproducer"):
        lines.append(f"  reproducer: {_field(div, 'reproducer')}")
    return "\n".join(lines)


#: The labels a divergence gives its test (label name: record field), what the rendered
#: report groups and filters by (reports/allure_render.py).
DIVERGENCE_LABELS = (
    ("rule", "rule_id"), ("kind", "rule_kind"), ("layer", "rule_layer"),
    ("qp_type", "qp_type"), ("state", "state"), ("quirk", "known_quirk"),
)
#: The quirk label of a divergence no quirk covers.
UNKNOWN_QUIRK = "none (unknown divergence)"


def divergence_labels(div: Any) -> list[tuple[str, str]]:
    """(label, value) for each of DIVERGENCE_LABELS the record has (a quirk: always)."""
    labels = []
    for label, name in DIVERGENCE_LABELS:
        value = _field(div, name)
        if label == "quirk" and not value:
            value = UNKNOWN_QUIRK
        if value:
            labels.append((label, str(value)))
    return labels


def attach_divergence(div: Any) -> None:
    """Label the running test with its divergence (rule, kind, layer, QP type, state,
    quirk) and attach it: summary, shrunk steps, reproducer script."""
    if allure is None:
        return
    for label, value in divergence_labels(div):
        allure.dynamic.label(label, value)
    allure.attach(
        divergence_text(div), name="divergence", attachment_type=allure.attachment_type.TEXT
    )
    steps = _field(div, "steps") or []
    allure.attach(
        json.dumps(steps, indent=1, default=str),
        name=f"shrunk steps ({len(steps)})",
        attachment_type=allure.attachment_type.JSON,
    )
    reproducer = _field(div, "reproducer")
    if reproducer and Path(reproducer).is_file():
        allure.attach.file(
            str(reproducer),
            name=Path(reproducer).name,
            attachment_type=allure.attachment_type.TEXT,
            extension="py",
        )


def _escape(text: Any) -> str:
    """Java .properties escaping: backslash, line breaks; ':' and '=' in keys."""
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def environment_lines(identity: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    """The key=value lines of Allure's environment.properties."""
    lines = []
    for prefix, data in (("device", identity), ("run", settings)):
        for key, value in sorted(data.items()):
            if isinstance(value, list | tuple):
                value = ",".join(map(str, value))
            k = _escape(f"{prefix}.{key}").replace(":", "\\:").replace("=", "\\=").replace(" ", "_")
            lines.append(f"{k}={_escape(value)}")
    return lines


def write_environment(
    identity: Mapping[str, Any], settings: Mapping[str, Any], results_dir: str | os.PathLike[str]
) -> Path:
    """Write environment.properties into the Allure results directory (atomically).

    Call it once per run: from the xdist controller, or the only process without xdist.
    """
    target = Path(results_dir) / "environment.properties"
    return write_atomic(target, "\n".join(environment_lines(identity, settings)) + "\n")
