"""Runs one step of scripts/gpu_check.sh with a time limit, and ends every process the step started.

  python scripts/timed.py SECONDS NAME -- COMMAND [ARGS...]

GNU timeout signals the step's process group only, and Snakemake starts each job in a new session, so
jobs outlived a timed-out Snakemake and kept writing shards into the next step. Here a process counts as
the step's when either
  - it descends from this process: this process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a
    process whose parent died is re-parented here, not to init, and the tree stays walkable; or
  - its environment holds this step's token (SIEVE_STEP_TOKEN, inherited across setsid and double
    forks; only a process that clears its environment loses it, and that one is still a descendant).
At the limit, or when the command ends, every such process gets SIGTERM, 1 s later SIGKILL, until none
is left (at most about 3 s). One line says how the step ended. Exit status: the command's, 124 at the limit.
Standard library only, Linux /proc, any Python 3.8+.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid

PR_SET_CHILD_SUBREAPER = 36
TOKEN = "SIEVE_STEP_TOKEN"
GRACE_S = 1.0  # scripts/gpu_check.sh budgets 3 s to end a step: 1 s after SIGTERM, 2 x 1 s after SIGKILL


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields follow the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    return parents


def _has_token(pid: int, token: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return token in handle.read().split(b"\0")
    except OSError:
        return False


def step_processes(root: int, token: str) -> set[int]:
    """Live processes of the step: descendants of ``root`` and holders of ``token``, ``root`` excluded."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    marker = f"{TOKEN}={token}".encode()
    found |= {pid for pid in parents if pid not in found and _has_token(pid, marker)}
    found.discard(root)
    found.discard(os.getpid())
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def end_step(token: str) -> int:
    """SIGTERM, then SIGKILL, every process of the step until none is left; returns how many there were."""
    me = os.getpid()
    seen: set[int] = set()
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 1.0), (signal.SIGKILL, 1.0)):
        pids = {pid for pid in step_processes(me, token) if _alive(pid)}
        if not pids:
            break
        seen |= pids
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap()
            if not any(_alive(pid) for pid in step_processes(me, token)):
                break
            time.sleep(0.05)
    _reap()
    return len(seen)


def run(seconds: float, name: str, command: list[str]) -> int:
    subreaper = become_subreaper()
    token = uuid.uuid4().hex
    env = {**os.environ, TOKEN: token}
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env)

    def stop(signum, _frame):  # the whole check interrupted: the step's processes go with it
        end_step(token)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        code = proc.wait(timeout=seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        code = 124
    killed = end_step(token)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    wall = time.monotonic() - started
    how = f"stopped at its {seconds:g} s limit" if timed_out else f"exit {code}"
    left = f", {killed} process(es) of the step ended" if killed else ""
    tree = "" if subreaper else " (no subreaper: orphans found by token only)"
    print(f"[step {name}] {how} after {wall:.0f} s{left}{tree}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[2] != "--":
        print("usage: timed.py SECONDS NAME -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run(float(args[0]), args[1], args[3:])


if __name__ == "__main__":
    sys.exit(main())
