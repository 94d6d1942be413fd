"""The teams' Unix users on the test host. Slurm runs a job only as a user its hosts resolve (a site has them in
LDAP); the tests add each team's uid and gid to /etc/passwd and /etc/group for the test and remove what they
added."""

from __future__ import annotations

import grp
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


def _known(lookup, uid: int) -> bool:
    try:
        lookup(uid)
    except KeyError:
        return False
    return True


@contextmanager
def unix_users(ids: list[int]) -> Iterator[None]:
    """A user and a group ``rota-test-<id>`` for each id that the host does not know yet, removed afterwards."""
    added: list[tuple[str, str]] = []
    try:
        for uid in ids:
            name = f"rota-test-{uid}"
            if not _known(grp.getgrgid, uid):
                subprocess.run(["groupadd", "-g", str(uid), name], check=True, capture_output=True)
                added.append(("groupdel", name))
            if not _known(pwd.getpwuid, uid):
                subprocess.run(["useradd", "-M", "-N", "-g", str(uid), "-u", str(uid), "-s", "/usr/sbin/nologin",
                                "-d", "/nonexistent", name], check=True, capture_output=True)
                added.append(("userdel", name))
        yield
    finally:  # --force: a job of the user that Slurm is still cleaning up does not keep the user
        for command, name in reversed(added):
            subprocess.run([command, *(["--force"] if command == "userdel" else []), name], capture_output=True)
