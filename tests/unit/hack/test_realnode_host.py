"""hack/realnode_host.py's cgroup set-up for the real node, on a directory tree standing in for /sys/fs/cgroup.

This machine (and its CI) is cgroup v1 hybrid, so the real node's e2e tests only ever run the v1 branch; the v2
branch (delegating controllers down through ``cgroup.subtree_control``) runs here against a small stand-in of the
kernel's behaviour: a new child cgroup offers what its parent enabled in ``cgroup.subtree_control``. What the kernel
really refuses (EBUSY) is simulated by a write that raises. The kubelet on a real v2 host is not covered by this.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
import realnode_host  # noqa: E402
from cluster_procs import HarnessError  # noqa: E402

ROOT_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


class FakeV2:
    """A cgroup2 tree: mkdir makes a child offering its parent's enabled controllers; ``+x`` enables x."""

    def __init__(self, root: Path, controllers: str = ROOT_CONTROLLERS) -> None:
        self.root = root
        self.refuse: set[tuple[Path, str]] = set()
        self.writes: list[tuple[Path, str]] = []
        root.mkdir(exist_ok=True)
        (root / "cgroup.controllers").write_text(controllers)
        (root / "cgroup.subtree_control").write_text("")
        (root / "cgroup.procs").write_text("1\n")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_mkdir, real_write = Path.mkdir, Path.write_text
        fake = self

        def mkdir(path: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
            existed = path.exists()
            real_mkdir(path, mode, parents, exist_ok)
            if not existed and fake.root in path.parents:
                real_write(path / "cgroup.controllers", (path.parent / "cgroup.subtree_control").read_text())
                real_write(path / "cgroup.subtree_control", "")
                real_write(path / "cgroup.procs", "")

        def write_text(path: Path, data: str, encoding: str | None = None, errors: str | None = None,
                       newline: str | None = None) -> int:
            if path.name == "cgroup.subtree_control" and fake.root in path.parents:
                fake.writes.append((path.parent, data))
                controller = data.removeprefix("+")
                if (path.parent, controller) in fake.refuse:
                    raise OSError(errno.EBUSY, "Device or resource busy")
                enabled = set(path.read_text().split()) | {controller}
                return real_write(path, " ".join(sorted(enabled)))
            return real_write(path, data, encoding, errors, newline)

        monkeypatch.setattr(Path, "mkdir", mkdir)
        monkeypatch.setattr(Path, "write_text", write_text)
        monkeypatch.setattr(realnode_host, "CGROUP_FS", self.root)


def enabled(path: Path) -> set[str]:
    return set((path / "cgroup.subtree_control").read_text().split())


def test_v2_delegates_the_kubelets_controllers_to_the_node_cgroup(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeV2(tmp_path / "cgroup")
    fake.install(monkeypatch)
    realnode_host.make_cgroup("/ctxfit-rn3")
    realnode_host.make_cgroup("/ctxfit-rn3/runtime")
    node = fake.root / "ctxfit-rn3"
    wanted = {"cpu", "cpuset", "hugetlb", "io", "memory", "pids"}
    assert enabled(fake.root) == wanted  # not rdma, misc
    # what the kubelet's Validate reads for cgroupRoot=/ctxfit-rn3: every controller it uses is there
    assert set((node / "cgroup.controllers").read_text().split()) >= realnode_host.KUBELET_CONTROLLERS
    assert enabled(node) == wanted  # the kubelet's kubepods and the runtime cgroup below it get them too
    assert (node / "runtime").is_dir()
    assert realnode_host.cgroup_dirs("/ctxfit-rn3/runtime") == [node / "runtime"]


def test_v2_without_hugetlb_on_the_host_needs_no_hugetlb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeV2(tmp_path / "cgroup", "cpuset cpu io memory pids")
    fake.install(monkeypatch)
    realnode_host.make_cgroup("/ctxfit-rn0")
    assert set((fake.root / "ctxfit-rn0" / "cgroup.controllers").read_text().split()) == {
        "cpu", "cpuset", "io", "memory", "pids"}


def test_v2_a_parent_that_was_not_given_a_controller_is_named(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeV2(tmp_path / "cgroup")
    fake.install(monkeypatch)
    Path.mkdir(fake.root / "ci")  # a CI job's cgroup that was given cpu, memory, pids only
    (fake.root / "ci" / "cgroup.controllers").write_text("cpu memory pids")
    with pytest.raises(HarnessError, match=r"ci does not offer cpuset, hugetlb .*needs cpu, cpuset, hugetlb"):
        realnode_host.make_cgroup("/ci/ctxfit-rn0")


def test_v2_a_refused_controller_is_an_error_not_a_later_kubelet_failure(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeV2(tmp_path / "cgroup")
    fake.install(monkeypatch)
    fake.refuse.add((fake.root, "memory"))  # processes directly in this cgroup: EBUSY
    with pytest.raises(HarnessError, match=r"cannot enable memory in .*Device or resource busy.*child cgroup"):
        realnode_host.make_cgroup("/ctxfit-rn1")


def test_v2_a_refused_optional_controller_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeV2(tmp_path / "cgroup")
    fake.install(monkeypatch)
    fake.refuse.add((fake.root, "io"))
    realnode_host.make_cgroup("/ctxfit-rn1")
    assert "io" not in enabled(fake.root) and "memory" in enabled(fake.root)


def test_v1_makes_the_cgroup_in_every_hierarchy_with_a_usable_cpuset(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cgroup"  # hybrid, as here: v1 hierarchies plus an empty cgroup2 at unified/
    for hierarchy in ("cpuset", "memory", "pids", "unified"):
        (root / hierarchy).mkdir(parents=True)
        (root / hierarchy / "cgroup.procs").write_text("1\n")
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    (root / "cpu,cpuacct").symlink_to(root / "memory")  # a symlinked hierarchy name is not a second one
    monkeypatch.setattr(realnode_host, "CGROUP_FS", root)

    real_mkdir = Path.mkdir

    def mkdir(path: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        existed = path.exists()
        real_mkdir(path, mode, parents, exist_ok)
        if not existed and path.parent.name == "cpuset":  # the kernel's new v1 cpuset child: empty cpus/mems
            (path / "cpuset.cpus").write_text("")
            (path / "cpuset.mems").write_text("")

    monkeypatch.setattr(Path, "mkdir", mkdir)
    realnode_host.make_cgroup("/ctxfit-rn2")
    dirs = realnode_host.cgroup_dirs("/ctxfit-rn2")
    assert dirs == [root / h / "ctxfit-rn2" for h in ("cpuset", "memory", "pids", "unified")]
    assert all(d.is_dir() for d in dirs)
    assert (root / "cpuset" / "ctxfit-rn2" / "cpuset.cpus").read_text() == "0-1\n"
    assert (root / "cpuset" / "ctxfit-rn2" / "cpuset.mems").read_text() == "0\n"
