#!/usr/bin/env python3
"""A throwaway one-node SLURM cluster (munge + slurmctld + slurmd) to run the workflow through.

Everything it writes lives under one directory (default /tmp/mars-slurm, or $MARS_SLURM_DIR):
config, munge key and socket, state, logs, PID files. No systemd, no system config is touched
(missing Debian packages are installed with apt-get, as root). Start it twice and the second start
reuses the running daemons; stop ends exactly the daemons it started, by PID.

    eval "$(python3 tests/slurm_cluster.py start)"   # prints the exports SLURM clients need
    snakemake --workflow-profile profiles/slurm --configfile config/test.yaml \\
        --slurm-init-seconds-before-status-checks 2
    python3 tests/slurm_cluster.py stop

The node is virtual in size: it advertises 32 CPUs, 128 GB and 4 "h100" GPUs (backed by /dev/null
and friends) whatever the machine has, so the requests of profiles/slurm fit and can be read back
from the scheduler. Nothing is enforced (no cgroups): it is a scheduler to test against, not a
sandbox. Partitions `cpu` (default) and `gpu` mirror the ones profiles/slurm names. There is no
accounting database, so `sacct` fails here, as on many small clusters.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("MARS_SLURM_DIR", "/tmp/mars-slurm"))
# the commands we need -> the Debian package that ships them
PACKAGES = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "srun": "slurm-client",
    "squeue": "slurm-client",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
}
DAEMONS = ("munged", "slurmctld", "slurmd")  # start order; stop runs in reverse
NODE_CPUS = 32  # 4 GPUs x cpus_per_gpu 8 in profiles/slurm
NODE_MEM_MB = 128000
NODE_GPUS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")  # stand-ins for 4 cards
GPU_MODEL = "h100"
MIN_JOB_AGE = 300  # s a finished job stays visible to squeue / scontrol (SLURM's default)
LOOKUP_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])


class Unavailable(RuntimeError):
    """SLURM cannot run on this machine at all (no root, no apt-get): a reason to skip."""


def which(command: str) -> str | None:
    return shutil.which(command, path=LOOKUP_PATH)


def ensure_installed() -> None:
    """Install the SLURM and munge packages that are missing (apt-get, as root)."""
    missing = sorted({pkg for cmd, pkg in PACKAGES.items() if which(cmd) is None})
    if os.geteuid() != 0:
        raise Unavailable("a local SLURM cluster needs root (slurmd runs jobs as their user)")
    if not missing:
        return
    if which("apt-get") is None:
        raise Unavailable(f"SLURM packages missing ({' '.join(missing)}) and no apt-get")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing {' '.join(missing)} (apt-get)", file=sys.stderr)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        output = (r.stdout + r.stderr)[-3000:]
        raise RuntimeError(f"apt-get install {' '.join(missing)} failed:\n{output}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGTERM when its starter dies (even by SIGKILL)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def process_alive(pid: int) -> bool:
    """Running, not a zombie left for a parent that is not reaping it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it ended on its own meanwhile
        pass


class LocalCluster:
    """One node, two partitions, under ``root``.

    ``tie_to_parent``: the daemons get SIGTERM when the thread that started them ends, so a killed
    test run takes them along (start it from the main thread).
    """

    def __init__(self, root: Path | str = DEFAULT_DIR, *, tie_to_parent: bool = False):
        self.root = Path(root).resolve()
        self.tie_to_parent = tie_to_parent
        self.host = socket.gethostname().split(".")[0]
        self._procs: dict[str, subprocess.Popen] = {}

    # paths -------------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def bin(self) -> Path:
        """srun shim: the jobstep plugin strips SLURM_* (SLURM_CONF too) before its srun."""
        return self.root / "bin"

    @property
    def munge_socket(self) -> Path:
        return self.root / "run" / "munge.socket"

    @property
    def jobcomp(self) -> Path:
        """One line per finished job: the scheduler's own record when there is no accounting."""
        return self.root / "log" / "jobcomp.txt"

    def _pidfile(self, daemon: str) -> Path:
        return self.root / "pids" / f"{daemon}.pid"

    def env(self, base: dict | None = None) -> dict:
        """An environment whose SLURM clients (and jobs, and their srun) use this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", "")])
        return env

    def exports(self) -> str:
        return (
            f"export SLURM_CONF={shlex.quote(str(self.conf))}\n"
            f'export PATH={shlex.quote(str(self.bin))}:"$PATH"\n'
        )

    # processes ---------------------------------------------------------------------------------
    def pids(self) -> dict[str, int]:
        """The recorded daemons of this cluster that are alive (and still ours: PIDs get reused)."""
        alive = {}
        for daemon in DAEMONS:
            try:
                pid = int(self._pidfile(daemon).read_text())
            except (FileNotFoundError, ValueError):
                continue
            if self._is_ours(pid, daemon):
                alive[daemon] = pid
        return alive

    def _is_ours(self, pid: int, daemon: str) -> bool:
        if not process_alive(pid):
            return False
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            return False
        inside = f"{self.root}/".encode()  # a path under root among its arguments
        return Path(argv[0].decode()).name == daemon and any(inside in arg for arg in argv)

    def running(self) -> bool:
        return len(self.pids()) == len(DAEMONS)

    def start(self, timeout: float = 60) -> LocalCluster:
        """Start munged, slurmctld and slurmd (or reuse them) and wait until the node is idle."""
        ensure_installed()
        if self.running():
            self.wait_ready(timeout, states={"idle", "mixed", "allocated", "completing"})
            return self
        self.stop()  # leftovers of a half-started cluster
        try:
            self._write_config()
            self._spawn(
                "munged",
                [
                    which("munged"),
                    "--foreground",
                    "--key-file",
                    str(self.root / "etc" / "munge" / "munge.key"),
                    "--socket",
                    str(self.munge_socket),
                    "--pid-file",
                    str(self.root / "run" / "munged.pid"),
                    "--log-file",
                    str(self.root / "log" / "munged.log"),
                    "--seed-file",
                    str(self.root / "run" / "munged.seed"),
                ],
            )
            self._wait_for(self.munge_socket.exists, timeout, "munged to create its socket")
            self._spawn("slurmctld", [which("slurmctld"), "-D", "-c", "-f", str(self.conf)])
            self._spawn("slurmd", [which("slurmd"), "-D", "-c", "-f", str(self.conf)])
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, daemon: str, argv: list) -> None:
        with open(self.root / "log" / f"{daemon}.out", "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
                preexec_fn=_die_with_parent if self.tie_to_parent else None,
            )
        self._procs[daemon] = proc
        self._pidfile(daemon).write_text(f"{proc.pid}\n")

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [d for d, p in self._procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"no luck after {timeout:.0f} s"
                raise RuntimeError(
                    f"local SLURM cluster: waiting for {what}: {why}\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def wait_ready(self, timeout: float = 60, states: set[str] = frozenset({"idle"})) -> None:
        """Wait until slurmctld answers and the node is in one of ``states`` (a new one: idle)."""

        def ready() -> bool:
            r = subprocess.run(
                [which("sinfo"), "-h", "-N", "-o", "%T"],
                env=self.env(),
                capture_output=True,
                text=True,
            )
            return r.returncode == 0 and bool(r.stdout.split()) and set(r.stdout.split()) <= states

        self._wait_for(ready, timeout, f"node {self.host} to be {'/'.join(sorted(states))}")

    def log_tail(self, lines: int = 8) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*")):
            if log.name != self.jobcomp.name and log.is_file():
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM exactly the daemons this cluster started (slurmd, slurmctld, then munged)."""
        for group in (("slurmd", "slurmctld"), ("munged",)):
            pids = {d: p for d, p in self.pids().items() if d in group}
            for pid in pids.values():
                _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for daemon, pid in pids.items():
                while self._is_ours(pid, daemon) and time.monotonic() < deadline:
                    self._reap(daemon)
                    time.sleep(0.1)
                if self._is_ours(pid, daemon):
                    _signal(pid, signal.SIGKILL)
                self._reap(daemon, block=True)
        for daemon in DAEMONS:
            self._pidfile(daemon).unlink(missing_ok=True)

    def _reap(self, daemon: str, block: bool = False) -> None:
        proc = self._procs.get(daemon)
        if proc is not None and (block or proc.poll() is not None):
            proc.wait()
            del self._procs[daemon]

    # configuration -----------------------------------------------------------------------------
    def _write_config(self) -> None:
        closed = [d for d in self.root.parents if d.exists() and not d.stat().st_mode & 0o001]
        if closed:  # munged refuses a socket other users cannot reach
            raise RuntimeError(
                f"{closed[0]} lacks o+x (every user must reach munged's socket): "
                f"choose a directory under /tmp (--dir)"
            )
        for sub in ("etc/munge", "run", "state", "spool", "log", "pids", "bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged insists on a private key and on a socket every user can reach
        self.root.chmod(0o755)
        (self.root / "run").chmod(0o755)
        (self.root / "etc" / "munge").chmod(0o700)
        key = self.root / "etc" / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self.munge_socket.unlink(missing_ok=True)  # left by a killed munged: not a sign of life
        r = self.root
        gres = "\n".join(
            f"NodeName={self.host} Name=gpu Type={GPU_MODEL} File={dev}" for dev in NODE_GPUS
        )
        (r / "etc" / "gres.conf").write_text(f"AutoDetect=off\n{gres}\n")
        self.conf.write_text(f"""\
# written by tests/slurm_cluster.py: one virtual node, no accounting database
ClusterName=mars-local
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# the node advertises the configured size, not the machine's
SlurmdParameters=config_overrides
ReturnToService=2
# finished jobs stay visible to squeue for MinJobAge seconds: the profile's
# `slurm-status-command: squeue` needs it >= 3 x the plugin's first status-check delay
MinJobAge={MIN_JOB_AGE}
# no database: sacct fails, sshare answers nothing (the plugin then passes -A unchecked)
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
GresTypes=gpu
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_MEM_MB} \
Gres=gpu:{GPU_MODEL}:{len(NODE_GPUS)} State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
""")
        shim = self.bin / "srun"
        conf, srun = shlex.quote(str(self.conf)), shlex.quote(which("srun"))
        shim.write_text(f'#!/bin/sh\nSLURM_CONF={conf} exec {srun} "$@"\n')
        shim.chmod(0o755)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status", "env"])
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"state directory [{DEFAULT_DIR}]"
    )
    args = parser.parse_args(argv)
    cluster = LocalCluster(args.dir)
    try:
        if args.action == "start":
            cluster.start()
            print(
                f"SLURM is up: node {cluster.host} ({NODE_CPUS} CPUs, {NODE_MEM_MB} MB, "
                f"{len(NODE_GPUS)} {GPU_MODEL} GPUs, virtual), partitions cpu (default) and gpu, "
                f"files in {cluster.root}. Stop it: python3 {sys.argv[0]} stop",
                file=sys.stderr,
            )
            print(cluster.exports(), end="")
        elif args.action == "stop":
            cluster.stop()
        elif args.action == "status":
            pids = cluster.pids()
            print(" ".join(f"{d}={pids[d]}" for d in DAEMONS if d in pids) or "not running")
            return 0 if cluster.running() else 1
        else:
            print(cluster.exports(), end="")
    except (Unavailable, RuntimeError) as exc:
        print(f"slurm_cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
