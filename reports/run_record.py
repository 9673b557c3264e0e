"""What one run did, in a form that survives pytest-xdist and feeds every report.

The checker tells a `RunRecorder` about each step it compared (aggregated, so a
long Hypothesis run stays small); the plugin writes one `run-<worker>.json` per
process at session end, and `merge_runs` folds them into one run for `qpconform
report`, with the divergences of the run's one store (reports/divergence.py), read
beside the records: a run record never carries them (schema 2 refuses one that does).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from qpconform.engine.choices import ChoiceBook
from qpconform.engine.timing import DeliveryLog
from reports.atomic import write_atomic
from reports.divergence import OUT_DIR, DivergenceStore
from reports.replay import describe, part_order, with_batches

SCHEMA = 2  # 2: the divergences left the run record for the store
KIND = "qpconform-run"
RESULTS = ("match", "divergence", "known")
#: A run made of several pytest sessions (a part on the host and one inside the guest with
#: `qpconform vm --then-in-guest`, say; the mutant gate names each gate's run so) gives each
#: the same id in this variable: their records are one run's, merged into one report
#: (`merge_runs`). The plugin reads it (fixtures/seeds.py), the CLIs that start the parts set it.
RUN_ID_ENV = "QPCONFORM_RUN_ID"

StepKey = tuple[str, str, str, str | None, str]  # qp_type, verb, state_before, target, result


def worker_id() -> str:
    """This process's name under pytest-xdist ("gw0", ...), or "main" without it."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def run_path(out_dir: str | os.PathLike[str], worker: str | None = None) -> Path:
    """Where a process writes its run record: <out_dir>/run-<worker>.json."""
    return Path(out_dir) / f"run-{worker or worker_id()}.json"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class RunRecorder:
    """Collects one process's steps, choices and quirks (its divergences are the store's).

    `identity` and `settings` are plain attributes: the plugin may fill them in
    once the device is open (identity) or the options are known (settings).
    """

    def __init__(
        self, identity: Mapping[str, Any], settings: Mapping[str, Any], worker: str | None = None
    ) -> None:
        self.worker = worker or worker_id()
        self.identity: dict[str, Any] = dict(identity)
        self.settings: dict[str, Any] = dict(settings)
        self.started = _now()
        self._steps: dict[StepKey, dict[str, Any]] = {}
        self.stale_quirks: dict[str, str] = {}
        self.not_applicable_quirks: dict[str, str] = {}
        self.unseen_quirks: dict[str, str] = {}
        self.not_provoked_quirks: dict[str, str] = {}
        #: per quirk id of the profile: {"provenance": ..., "feature": ...}
        self.quirk_profile: dict[str, dict[str, str]] = {}
        self.unsupported: dict[str, str] = {}
        #: per "may" rule id: {what the device chose: how often}
        self.choices: dict[str, dict[str, int]] = {}
        #: per "may" rule id and situation: what the device chose, and where first
        self.situations = ChoiceBook()
        #: delivery delays (seconds) per kind, so the workers' samples merge into one summary
        self.delivery: dict[str, list[float]] = {}
        #: per kind, the slowest delivery: [seconds, what it was]
        self.delivery_slowest: dict[str, list[Any]] = {}
        #: lengths (s) of the quiet windows that ended an observation, per kind, and the
        #: windows this process widened (qpconform/engine/timing.py)
        self.windows_closed: dict[str, list[float]] = {}
        self.windows_widened: list[str] = []

    def choice(
        self, rule_id: str, chosen: str, situation: str | None = None, where: str = ""
    ) -> tuple[str, str] | None:
        """The device's outcome under a "may" rule (either conforms): a characteristic.
        With the verb's situation, returns (earlier choice, where) if the device chose
        otherwise in the same situation before (qpconform/engine/choices.py)."""
        seen = self.choices.setdefault(str(rule_id), {})
        seen[chosen] = seen.get(chosen, 0) + 1
        if situation is None:
            return None
        return self.situations.note(str(rule_id), situation, chosen, where)

    def step(
        self,
        qp_type: str,
        verb: str,
        state_before: str,
        target: str | None,
        rules: Iterable[str],
        result: str,
    ) -> None:
        """One compared verb: result is "match", "divergence" or "known" (a quirk)."""
        if result not in RESULTS:
            raise ValueError(f"result must be one of {RESULTS}, not {result!r}")
        key = (
            str(qp_type),
            str(verb),
            str(state_before),
            None if target is None else str(target),
            result,
        )
        agg = self._steps.setdefault(key, {"count": 0, "rules": {}})
        agg["count"] += 1
        for rule in rules:
            rule_id = getattr(rule, "id", rule)
            agg["rules"][rule_id] = agg["rules"].get(rule_id, 0) + 1

    def stale_quirk(self, quirk_id: str, detail: str = "") -> None:
        """A quirk that matched nothing in this process (merge keeps it only if none matched)."""
        self.stale_quirks[str(quirk_id)] = detail

    def quirk_not_provoked(self, quirk_id: str, why: str) -> None:
        """A quirk that matched nothing in a random-profile run: its examples may simply not
        have provoked it (not stale; merge drops it if another worker matched it)."""
        self.not_provoked_quirks[str(quirk_id)] = why

    def quirk_unseen(self, quirk_id: str, why: str) -> None:
        """An intermittent quirk that matched nothing in this process (not stale)."""
        self.unseen_quirks[str(quirk_id)] = why

    def quirk_not_applicable(self, quirk_id: str, reason: str) -> None:
        """A quirk of the profile whose version range excludes this run (not loaded)."""
        self.not_applicable_quirks[str(quirk_id)] = reason

    def quirks_described(self, described: Mapping[str, Mapping[str, str]]) -> None:
        """Provenance (observed / source) and lacked feature of every entry of the profile,
        so the report can tell a source prediction from an observation."""
        self.quirk_profile.update({str(k): dict(v) for k, v in described.items()})

    def qp_type_unsupported(self, qp_type: str, reason: str) -> None:
        """The device cannot create this QP type: reported, not a divergence."""
        self.unsupported[str(qp_type)] = reason

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON form (schema 1)."""
        steps = [
            {
                "qp_type": q,
                "verb": v,
                "state_before": s,
                "target": t,
                "result": r,
                "count": agg["count"],
                "rules": dict(sorted(agg["rules"].items())),
            }
            for (q, v, s, t, r), agg in sorted(self._steps.items(), key=lambda kv: str(kv[0]))
        ]
        return {
            "schema": SCHEMA,
            "kind": KIND,
            "workers": [self.worker],
            "started": self.started,
            "finished": _now(),
            "identity": self.identity,
            "settings": self.settings,
            "steps": steps,
            "stale_quirks": [{"id": k, "detail": v} for k, v in sorted(self.stale_quirks.items())],
            "not_applicable_quirks": [
                {"id": k, "detail": v} for k, v in sorted(self.not_applicable_quirks.items())
            ],
            "unseen_quirks": [
                {"id": k, "detail": v} for k, v in sorted(self.unseen_quirks.items())
            ],
            "not_provoked_quirks": [
                {"id": k, "detail": v} for k, v in sorted(self.not_provoked_quirks.items())
            ],
            "quirk_profile": dict(sorted(self.quirk_profile.items())),
            "unsupported": dict(sorted(self.unsupported.items())),
            "choices": {k: dict(sorted(v.items())) for k, v in sorted(self.choices.items())},
            "situations": self.situations.as_dict(),
            "delivery": {k: [round(x, 6) for x in v] for k, v in sorted(self.delivery.items())},
            "delivery_slowest": {k: [round(v[0], 6), v[1]]
                                 for k, v in sorted(self.delivery_slowest.items())},
            "windows_closed": {k: [round(x, 6) for x in v]
                               for k, v in sorted(self.windows_closed.items())},
            "windows_widened": list(self.windows_widened),
        }

    def write(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the record (default reports/out/run-<worker>.json), atomically."""
        target = Path(path) if path is not None else run_path(OUT_DIR, self.worker)
        return write_atomic(target, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run record, refusing files of another kind or a newer schema."""
    data = json.loads(Path(path).read_text())
    if data.get("kind") != KIND:
        raise ValueError(f"{path}: not a qpconform run record (kind={data.get('kind')!r})")
    if data.get("schema", 0) > SCHEMA:
        raise ValueError(f"{path}: run schema {data['schema']} is newer than this qpconform's")
    if "divergences" in data:
        raise ValueError(
            f"{path}: a run record that carries divergences (schema {data.get('schema')}): "
            f"a run's divergences are in its one store, {DivergenceStore.beside(path).path}; "
            "rerun with this qpconform to get records of the current schema"
        )
    return data


def _merge_dicts(first: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the first value of a key; fill in keys a later worker knew and the first did not."""
    out = dict(first)
    for k, v in more.items():
        if out.get(k) in (None, "", [], {}):
            out[k] = v
    return out


def _one_run(paths: list[Any], runs: list[dict[str, Any]]) -> None:
    """Records of different runs (their run ids differ) are never merged into one report."""
    ids: dict[str, list[str]] = {}
    for path, run in zip(paths, runs, strict=True):
        run_id = run.get("settings", {}).get("run_id")
        if run_id:
            ids.setdefault(run_id, []).append(Path(path).name)
    if len(ids) > 1:
        found = "; ".join(f"run {i}: {', '.join(names)}" for i, names in sorted(ids.items()))
        raise ValueError(
            f"these run records come from {len(ids)} different runs ({found}): a report is "
            "built from one run; remove the older records or give --input the files of one run"
        )


def _unite_parts(values: Iterable[str], sep: str, between: str) -> str:
    """Lists like "lone=4,traffic-RC=3" (sep ",", between "=") from several workers as
    one, each part once (the first worker's value), in the order of PARTS."""
    found: dict[str, str] = {}
    for text in values:
        for item in filter(None, (part.strip() for part in text.split(sep))):
            name, _, value = item.partition(between)
            found.setdefault(name, value)
    order = sorted(found, key=part_order)
    return sep.join(f"{k}{between}{found[k]}" for k in order)


def _unite_stateful(settings: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """Each xdist worker records only its own stateful tests' batches and spending: the
    merged settings name every test's, and the replay line and seed text say all of them
    (reports/replay.py). Older records without them are left as they are."""
    worker_settings = [r.get("settings", {}) for r in runs]
    for key, sep, between in (("stateful_batches", ",", "="), ("stateful_spent", "; ", ": ")):
        values = [s[key] for s in worker_settings if s.get(key)]
        if values:
            settings[key] = _unite_parts(values, sep, between)
    if not settings.get("replay"):
        return
    batches = settings.get("stateful_batches", "")
    settings["replay"] = with_batches(settings["replay"], batches)
    if settings.get("hypothesis_seed") is not None:
        settings["seed"] = describe(
            settings["hypothesis_seed"], settings.get("hypothesis_profile", ""), settings["replay"]
        )


def merge_runs(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """Fold per-worker run records into one: counts summed, quirks united, and the
    divergences of the store beside them (each record once)."""
    paths = sorted(paths, key=str)
    runs = [load_run(p) for p in paths]
    if not runs:
        raise ValueError("no run records to merge")
    _one_run(paths, runs)
    steps: dict[StepKey, dict[str, Any]] = {}
    divergences: list[dict[str, Any]] = []
    seen: set[str] = set()
    stale: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    unseen: dict[str, str] = {}
    not_provoked: dict[str, str] = {}
    profile: dict[str, dict[str, str]] = {}
    unsupported: dict[str, str] = {}
    choices: dict[str, dict[str, int]] = {}
    situations = ChoiceBook()
    delivery: dict[str, list[float]] = {}
    delivery_slowest: dict[str, list[Any]] = {}
    windows_closed: dict[str, list[float]] = {}
    windows_widened: list[str] = []
    identity: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    workers: list[str] = []
    for run in runs:
        workers += run.get("workers", [])
        identity = _merge_dicts(identity, run.get("identity", {}))
        settings = _merge_dicts(settings, run.get("settings", {}))
        for s in run.get("steps", []):
            key = (s["qp_type"], s["verb"], s["state_before"], s["target"], s["result"])
            agg = steps.setdefault(key, {"count": 0, "rules": {}})
            agg["count"] += s["count"]
            for rule_id, n in s["rules"].items():
                agg["rules"][rule_id] = agg["rules"].get(rule_id, 0) + n
        for q in run.get("stale_quirks", []):
            stale[q["id"]] = q.get("detail", "")
        for q in run.get("not_applicable_quirks", []):
            not_applicable[q["id"]] = q.get("detail", "")
        for q in run.get("unseen_quirks", []):
            unseen[q["id"]] = q.get("detail", "")
        for q in run.get("not_provoked_quirks", []):  # absent from older records
            not_provoked[q["id"]] = q.get("detail", "")
        profile.update(run.get("quirk_profile", {}))
        unsupported.update(run.get("unsupported", {}))
        for kind, samples in run.get("delivery", {}).items():
            delivery.setdefault(kind, []).extend(samples)
        for kind, slowest in run.get("delivery_slowest", {}).items():
            if slowest[0] > delivery_slowest.get(kind, [-1.0])[0]:
                delivery_slowest[kind] = list(slowest)
        for kind, lengths in run.get("windows_closed", {}).items():
            windows_closed.setdefault(kind, []).extend(lengths)
        windows_widened.extend(run.get("windows_widened", []))
        for rule_id, chosen_counts in run.get("choices", {}).items():
            into = choices.setdefault(rule_id, {})
            for chosen, n in chosen_counts.items():
                into[chosen] = into.get(chosen, 0) + n
        situations.merge(run.get("situations", {}))
    for store in dict.fromkeys(DivergenceStore.beside(p).path for p in paths):
        for d in DivergenceStore(store).dicts():
            text = json.dumps(d, sort_keys=True)
            if text not in seen:
                seen.add(text)
                divergences.append(d)
    matched = {d.get("known_quirk") for d in divergences if d.get("known_quirk")}
    qp_types = sorted({t for r in runs for t in r.get("settings", {}).get("qp_types", [])})
    if qp_types:
        settings["qp_types"] = qp_types
    _unite_stateful(settings, runs)
    if windows_widened:
        settings["windows_widened"] = "; ".join(windows_widened)
    if delivery:  # one summary over every worker's samples
        settings["delivery_latency"] = DeliveryLog({k: list(v) for k, v in delivery.items()}).text()
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "workers": workers,
        "started": min(r.get("started", "") for r in runs),
        "finished": max(r.get("finished", "") for r in runs),
        "identity": identity,
        "settings": settings,
        "steps": [
            {
                "qp_type": q,
                "verb": v,
                "state_before": s,
                "target": t,
                "result": r,
                "count": agg["count"],
                "rules": dict(sorted(agg["rules"].items())),
            }
            for (q, v, s, t, r), agg in sorted(steps.items(), key=lambda kv: str(kv[0]))
        ],
        "divergences": divergences,
        "stale_quirks": [
            {"id": k, "detail": v} for k, v in sorted(stale.items()) if k not in matched
        ],
        "not_applicable_quirks": [
            {"id": k, "detail": v} for k, v in sorted(not_applicable.items())
        ],
        "unseen_quirks": [
            {"id": k, "detail": v} for k, v in sorted(unseen.items()) if k not in matched
        ],
        "not_provoked_quirks": [
            {"id": k, "detail": v} for k, v in sorted(not_provoked.items()) if k not in matched
        ],
        "quirk_profile": dict(sorted(profile.items())),
        "unsupported": dict(sorted(unsupported.items())),
        "choices": {k: dict(sorted(v.items())) for k, v in sorted(choices.items())},
        "situations": situations.as_dict(),
        "delivery": dict(sorted(delivery.items())),
        "delivery_slowest": dict(sorted(delivery_slowest.items())),
        "windows_closed": dict(sorted(windows_closed.items())),
        "windows_widened": windows_widened,
    }


def find_runs(directory: str | os.PathLike[str]) -> list[Path]:
    """The run-*.json files a session left in a directory."""
    return sorted(Path(directory).glob("run-*.json"))
