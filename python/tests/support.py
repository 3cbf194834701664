"""Helpers for the pytest files that start processes: the feedline CLI, the test servers of
tests/servers/ (through their own bash functions, so that a server starts here exactly as it does
for the CLI tests), and clean environments for tools that are not feedline.
"""
import os
import shutil
import signal
import subprocess

FEEDLINE = os.environ.get("FEEDLINE_BIN", "feedline")
M64 = 2 ** 64
REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVERS = os.path.join(REPO, "tests", "servers")


def gen(path, *args):
    subprocess.run([FEEDLINE, "gen", str(path), *args], check=True, stdout=subprocess.DEVNULL)
    return str(path)


def manifest_digest(root):
    with open(os.path.join(root, ".feedline-dataset")) as f:
        for line in f:
            if line.startswith("digest "):
                return int(line.split()[1])
    raise AssertionError("no digest in the manifest of " + root)


def run_all(loader):
    """(keys, digest sum mod 2^64, batches) of every batch the loader delivers."""
    keys, digest, batches = [], 0, 0
    for b in loader:
        keys += b.keys
        digest = (digest + b.digest) % M64
        batches += 1
    return keys, digest, batches


def tool_env(**extra):
    """The environment for a tool that is not feedline (bash, node, nginx, aws-cli): without the
    sanitizer runtimes the asan build preloads into python3 for the native module."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
    env.update(extra)
    return env


class ServerGroup:
    """Servers started by a bash script that sources tests/servers/servers.sh and stays running
    until its stdin closes, then stops them (stop_servers, or whatever `cleanup` says) and exits.

    The script prints one line "ready WORDS..." once the servers answer; ``words`` holds them.
    Whatever ends this process (a failed test, a ctest timeout, SIGKILL), the pipe to the script
    closes, its `read` ends, and its EXIT trap stops the servers by pid: no orphans."""

    def __init__(self, name, body, cleanup="stop_servers", workdir=None, env=None):
        self.name = name
        self.log = os.path.join(workdir, name + ".supervisor.log") if workdir else os.devnull
        script = "\n".join([
            "set -u",
            "source %s/servers.sh" % SERVERS,
            "trap '%s' EXIT" % cleanup,
            "trap 'exit 130' INT",
            "trap 'exit 143' TERM",
            body,
            "read -r _ || true",  # until the test process closes our stdin (or dies)
        ])
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     env=env or tool_env(), start_new_session=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready"):
            self.stop()
            raise RuntimeError("%s did not start: %s" % (name, self.log_text()))
        self.words = line.split()[1:]

    def log_text(self):
        try:
            with open(self.log) as f:
                return f.read()[-4000:]
        except OSError:
            return "(no log)"

    def stop(self, timeout=60):
        """Closes the script's stdin and waits for it to stop its servers; kills its process
        group if it does not within timeout seconds (servers started with setsid, such as
        ganesha, are then left to the script's trap)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


def missing_tools(*names):
    """The names among `names` (commands, or absolute paths of files) that this machine lacks."""
    return [n for n in names if not (os.path.exists(n) if os.path.isabs(n) else shutil.which(n))]

