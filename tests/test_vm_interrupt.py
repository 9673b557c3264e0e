"""Ctrl-C (SIGINT) or SIGTERM to `qpconform vm`, with stub QEMU and mmdebstrap on PATH.

The runner runs in a subprocess, as a user starts it; the test waits until the stub
says it has started, signals the runner (only the runner, as a kill would; a
terminal's Ctrl-C reaches the runner too, never QEMU or mmdebstrap, which run in
process groups of their own), and checks what is left: the exit status, the stub
processes and their children, the image cache, and whether the next run works.
Each stub starts a child that ignores SIGINT, so only killing its process group
ends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qpconform.vm import image, runner, stoppable

ROOT = Path(__file__).resolve().parent.parent
MIRROR = "file:///nonexistent/debian"

#: The runner, with the two checks a root-less, small test host fails stubbed out.
DRIVER = """
import os, sys
from qpconform.vm import prereqs, stoppable
prereqs.check_root_for_build = lambda: None
prereqs.check_disk_space = lambda *args, **kwargs: None
stoppable.GRACE = float(os.environ["STUB_GRACE"])
from qpconform import cli
sys.exit(cli.main(sys.argv[1:]))
"""

#: Starts a child that ignores SIGINT (as dpkg below mmdebstrap may) and records both pids.
STUB_HEAD = """
import os, signal, subprocess, sys, time
stub_dir = os.environ["STUB_DIR"]
def note(name, text=""):
    with open(os.path.join(stub_dir, name), "a") as f:
        f.write(text)
def start_child():
    child = subprocess.Popen(["sh", "-c", "trap '' INT; exec sleep 600"])
    note("pids", f"{os.getpid()}\\n{child.pid}\\n")
"""

MMDEBSTRAP = """
note("mmdebstrap-runs", "x")
root = sys.argv[-2]
os.makedirs(os.path.join(root, "boot"))
os.makedirs(os.path.join(root, "usr", "bin"))
for name in ("vmlinuz-6.1.0-stub", "initrd.img-6.1.0-stub"):
    open(os.path.join(root, "boot", name), "w").write("half\\n")
os.symlink("python3.11", os.path.join(root, "usr", "bin", "python3"))
if os.environ.get("STUB_MMDEBSTRAP") == "hang":
    def clean_up(signum, frame):  # mmdebstrap unmounts what it mounted here
        note("mmdebstrap-cleaned-up", "x")
        os._exit(1)
    signal.signal(signal.SIGINT, clean_up)
    start_child()
    note("mmdebstrap-started")
    time.sleep(600)
"""

MKFS = """
open(sys.argv[-2], "w").write("ext4\\n")
"""

QEMU_IMG = """
open(sys.argv[-1], "w").write("qcow2\\n")
"""

QEMU = """
signal.signal(signal.SIGINT, signal.SIG_IGN)  # only a kill of its group ends it
signal.signal(signal.SIGTERM, signal.SIG_IGN)
start_child()
print("SeaBIOS noise", flush=True)
note("qemu-started")
time.sleep(600)
"""


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{STUB_HEAD}\n{body}")
    path.chmod(0o755)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """Stubs on PATH, an image cache, a project, a TMPDIR: all under tmp_path."""
    places = {n: tmp_path / n for n in ("bin", "stub", "cache", "project", "tmp", "log")}
    for place in places.values():
        place.mkdir()
    _stub(places["bin"], "mmdebstrap", MMDEBSTRAP)
    _stub(places["bin"], "mkfs.ext4", MKFS)
    _stub(places["bin"], "qemu-img", QEMU_IMG)
    _stub(places["bin"], "qemu-system-x86_64", QEMU)
    (places["project"] / "pyproject.toml").write_text("")
    (tmp_path / "driver.py").write_text(DRIVER)
    return places


def _default_sigint() -> None:
    """A background job (CI's `&`, nohup) starts with SIGINT ignored, and children inherit
    that: the runner under test must see Ctrl-C as a terminal would deliver it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(host: dict[str, Path], *args: str, mmdebstrap: str = "ok") -> subprocess.Popen:
    env = {
        **os.environ,
        "PATH": f"{host['bin']}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(host["cache"]),
        "TMPDIR": str(host["tmp"]),
        "STUB_DIR": str(host["stub"]),
        "STUB_MMDEBSTRAP": mmdebstrap,
        "STUB_GRACE": "10",
    }
    argv = [sys.executable, str(host["bin"].parent / "driver.py"), "vm", "--accel", "tcg"]
    argv += ["--mirror", MIRROR, "--no-pip", "--log-dir", str(host["log"]), *args]
    return subprocess.Popen(
        argv,
        cwd=host["project"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,  # as in a terminal, also when pytest runs in the background
    )


def _wait_for(marker: Path, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the runner ended (status {proc.returncode}) first:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{marker.name} never appeared")
        time.sleep(0.05)


def _interrupt(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the runner did not end within 60 s of the signal")
    return proc.returncode, err


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead orphan waits for PID 1 to reap it, which some
    container inits never do)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _all_gone(pids: list[int]) -> None:
    """A killed process takes a moment to die after kill() returns: wait up to 5 s."""
    deadline = time.monotonic() + 5
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _running(p)] == [], "a stub process outlived the runner"


def _stubs_gone(host: dict[str, Path]) -> None:
    pids = [int(p) for p in (host["stub"] / "pids").read_text().split()]
    assert len(pids) >= 2
    _all_gone(pids)


def _complete_image(host: dict[str, Path]) -> image.Image:
    key = image.cache_key("bookworm", image.PACKAGES, image.guest_init_script(), MIRROR)
    img = image.Image(image.image_dir("bookworm", key, host["cache"] / "qpconform"))
    img.directory.mkdir(parents=True)
    for name in ("root.img", "vmlinuz", "initrd.img"):
        (img.directory / name).write_text("stub\n")
    meta = {
        "release": "bookworm",
        "kernel_release": "6.1.0-stub",
        "python": "3.11",
        "mirror": MIRROR,
    }
    (img.directory / "meta.json").write_text(json.dumps(meta))
    return img


SIGNALS = [pytest.param(signal.SIGINT, id="ctrl-c"), pytest.param(signal.SIGTERM, id="sigterm")]


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_interrupted_run_kills_qemu_and_exits_130(host: dict[str, Path], sig: int) -> None:
    img = _complete_image(host)
    proc = _start(host, "--", "true")
    _wait_for(host["stub"] / "qemu-started", proc)
    status, err = _interrupt(proc, sig)
    assert status == runner.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    _stubs_gone(host)
    assert list(host["tmp"].iterdir()) == []  # the run's overlay and control files
    assert img.complete()  # a run never writes the cached image


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_interrupted_image_build_leaves_nothing_that_looks_built(
    host: dict[str, Path], sig: int
) -> None:
    proc = _start(host, "--build-only", mmdebstrap="hang")
    _wait_for(host["stub"] / "mmdebstrap-started", proc)
    status, err = _interrupt(proc, sig)
    assert status == runner.EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    # mmdebstrap had its SIGINT and its time to unmount; its child went with its group
    assert (host["stub"] / "mmdebstrap-cleaned-up").exists(), err
    _stubs_gone(host)
    images = host["cache"] / "qpconform" / "images"
    assert [p.name for p in images.iterdir() if not p.name.endswith(".lock")] == []
    # the next run is not blocked by the lock and builds the image again
    again = _start(host, "--build-only")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    [built] = [p for p in images.iterdir() if p.is_dir()]
    assert image.Image(built).complete()
    assert (host["stub"] / "mmdebstrap-runs").read_text() == "xx"


# ----------------------------------------------------------------------------- the pieces
def test_stop_gives_the_group_its_grace_then_kills_it(tmp_path: Path) -> None:
    """The leader cleans up on SIGINT; its child ignores SIGINT and needs the kill."""
    script = tmp_path / "tool.sh"
    script.write_text(
        "#!/bin/sh\n"
        "(trap '' INT; exec sleep 600) &\n"
        f"echo $! > {tmp_path}/child\n"
        f"trap 'touch {tmp_path}/cleaned; exit 1' INT\n"
        f"touch {tmp_path}/started\n"
        "while :; do sleep 0.05; done\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)], start_new_session=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    stoppable.stop(proc, grace=20)
    assert time.monotonic() - started < 10  # no waiting once the leader is gone
    assert (tmp_path / "cleaned").exists()
    _all_gone([int((tmp_path / "child").read_text())])


def test_a_build_folder_with_mounts_in_it_is_left_alone(tmp_path: Path) -> None:
    work = tmp_path / ".bookworm-x.build-1"
    (work / "rootfs" / "proc").mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / /proc rw shared:12 - proc proc rw\n"
        f"99 22 0:50 / {work}/rootfs/proc ro - proc proc ro\n"
    )
    assert stoppable.mounts_under(work, mountinfo) == [f"{work}/rootfs/proc"]
    assert not stoppable.remove_tree(work, mountinfo)
    assert (work / "rootfs" / "proc").is_dir()
    mountinfo.write_text("22 1 0:21 / /proc rw shared:12 - proc proc rw\n")
    assert stoppable.remove_tree(work, mountinfo) and not work.exists()
