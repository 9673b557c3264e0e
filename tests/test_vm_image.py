"""Image cache key, mirror discovery and the mmdebstrap command (no build, no network)."""

from pathlib import Path

import pytest

from qpconform import soak
from qpconform.vm import buildenv, image, mirror, pydeps

INIT = b"#!/bin/sh\necho init\n"
MIRROR = "http://mirror.invalid/debian"


def key(**changes):
    args = {
        "release": "bookworm",
        "packages": image.PACKAGES,
        "init_script": INIT,
        "mirror": MIRROR,
    }
    args.update(changes)
    return image.cache_key(**args)


def test_cache_key_is_stable():
    assert key() == key()
    assert key(packages=tuple(reversed(image.PACKAGES))) == key()
    assert key(mirror=MIRROR + "/") == key()


@pytest.mark.parametrize(
    "change",
    [
        {"release": "trixie"},
        {"release": "trixie-backports"},
        {"packages": (*image.PACKAGES, "strace")},
        {"init_script": INIT + b"# v2\n"},
        {"mirror": "http://other.invalid/debian"},
    ],
)
def test_cache_key_changes_with_each_input(change):
    assert key(**change) != key()


def test_cache_key_changes_with_recipe(monkeypatch):
    before = key()
    monkeypatch.setattr(image, "RECIPE_VERSION", image.RECIPE_VERSION + 1)
    assert key() != before


def test_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert image.cache_root() == tmp_path / "qpconform"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert image.cache_root() == Path.home() / ".cache" / "qpconform"


def test_guest_init_script_is_package_data():
    script = image.guest_init_script()
    assert script.startswith(b"#!/bin/sh")
    assert b'. "$CTL/devices.sh"' in script  # the devices follow the driver under test
    assert b"QPCONFORM-EXIT" in script


def test_mmdebstrap_command(tmp_path):
    cmd = image.mmdebstrap_command("trixie", MIRROR, tmp_path / "root", tmp_path / "init")
    assert cmd[0] == "mmdebstrap"
    assert "--variant=minbase" in cmd
    include = next(a for a in cmd if a.startswith("--include="))
    for pkg in ("linux-image-amd64", "rdma-core", "python3-pyverbs", "ibverbs-utils"):
        assert pkg in include
    assert cmd[-3:] == ["trixie", str(tmp_path / "root"), f"deb {MIRROR} trixie main"]


def test_trixie_backports_takes_the_kernel_from_backports(tmp_path):
    """trixie user space, the kernel (and so its dependencies) from trixie-backports; the
    build layer sees both suites (the headers and linux-source of that kernel)."""
    assert image.suites("bookworm") == ("bookworm",)
    assert image.suites("trixie-backports") == ("trixie", "trixie-backports")
    assert image.packages_for("trixie") == image.PACKAGES
    pkgs = image.packages_for("trixie-backports")
    assert "linux-image-amd64/trixie-backports" in pkgs and "linux-image-amd64" not in pkgs
    assert set(pkgs) - {"linux-image-amd64/trixie-backports"} == set(image.PACKAGES) - {
        "linux-image-amd64"
    }
    cmd = image.mmdebstrap_command("trixie-backports", MIRROR, tmp_path / "r", tmp_path / "i")
    include = next(a for a in cmd if a.startswith("--include="))
    assert "linux-image-amd64/trixie-backports" in include.split("=", 1)[1].split(",")
    assert cmd[-4:] == [
        "trixie",
        str(tmp_path / "r"),
        f"deb {MIRROR} trixie main",
        f"deb {MIRROR} trixie-backports main",
    ]
    layer = buildenv.mmdebstrap_command(
        "trixie-backports", "7.3.4+deb13-amd64", MIRROR, tmp_path / "b"
    )
    assert "linux-headers-7.3.4+deb13-amd64" in next(a for a in layer if a.startswith("--incl"))
    assert layer[-4:] == [
        "trixie",
        str(tmp_path / "b"),
        f"deb {MIRROR} trixie main",
        f"deb {MIRROR} trixie-backports main",
    ]
    assert buildenv.source_package("7.3.4+deb13-amd64") == "linux-source-7.3"
    assert buildenv.source_package("7.2.13+deb14-amd64") == "linux-source-7.2"


def test_every_release_list_is_the_images(tmp_path):
    assert soak.RELEASES == image.RELEASES
    for release in image.RELEASES:
        soak.parse_target(f"{release}/rxe:1")


def test_removing_old_images_keeps_other_releases(tmp_path):
    """trixie-KEY images are pruned when a new trixie image is built; trixie-backports-KEY
    (a name that also starts with trixie-) is another release and stays."""
    names = ("trixie-aaaa", "trixie-bbbb", "trixie-backports-cccc", "bookworm-dddd")
    for name in names:
        (tmp_path / name).mkdir()
    image.remove_other_images(tmp_path / "trixie-bbbb")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bookworm-dddd", "trixie-backports-cccc", "trixie-bbbb"
    ]
    image.remove_other_images(tmp_path / "trixie-backports-cccc")
    assert (tmp_path / "trixie-bbbb").is_dir()


def test_image_completeness(tmp_path):
    img = image.Image(tmp_path)
    assert not img.complete()
    for name in ("root.img", "vmlinuz", "initrd.img", "meta.json"):
        (tmp_path / name).write_text("{}")
    assert img.complete()


def test_mirror_from_deb822(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://sec.invalid/debian-security\n"
        "Suites: bookworm-security\n\n"
        "Types: deb-src\nURIs: http://src.invalid/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://main.invalid/debian/\nSuites: bookworm\nComponents: main\n"
    )
    assert mirror.host_mirror(tmp_path) == "http://main.invalid/debian"


def test_mirror_from_one_line_list(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/x.gpg] http://one.invalid/debian bookworm main\n"
    )
    assert mirror.host_mirror(tmp_path) == "http://one.invalid/debian"


def test_no_mirror_is_a_clear_error(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://ppa.invalid/ubuntu jammy main\n")
    with pytest.raises(mirror.MirrorError, match="--mirror"):
        mirror.host_mirror(tmp_path)


def test_pydeps_key_and_pip_command(tmp_path):
    assert pydeps.cache_key("3.11", ["a", "b"]) == pydeps.cache_key("3.11", ["b", "a"])
    assert pydeps.cache_key("3.11", ["a"]) != pydeps.cache_key("3.13", ["a"])
    cmd = pydeps.pip_command(tmp_path, "3.13", ["hypothesis"])
    assert cmd[cmd.index("--python-version") + 1] == "3.13"
    assert "--only-binary=:all:" in cmd and cmd[-1] == "hypothesis"
