"""Escape attempts against the default sandbox (bubblewrap), each its own test and each contained: the
network, writes outside the work dir, secrets, fork and memory bombs, endless loops, killing the parent or
everything, leftover children, huge output, and faking a pass through the code reward's result channel.

Payloads that would be dangerous outside a sandbox (kill -1, fork bombs) first check that they run as an
unprivileged uid in their own pid namespace and refuse otherwise, so a broken sandbox fails these tests
instead of hurting the machine.
"""

from __future__ import annotations

import functools
import json
import os
import select
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import rllm
from rllm.rewards.code import make_code_reward
from rllm.rewards.types import RewardFn
from rllm.sandbox import run_python

_GUARD = (
    "import os, sys\n"
    "if os.getuid() == 0 or os.getpid() > 5:\n"
    "    sys.exit('refusing: not an unprivileged process in a pid namespace of its own')\n"
)


@functools.cache
def _reward() -> RewardFn:  # built on first use: without bubblewrap it refuses, and the fixture skips first
    return make_code_reward(timeout_s=3.0, memory_mb=256, max_parallel=2)


pytestmark = pytest.mark.usefixtures("bubblewrap")


def _closed_by_everyone(read_fd: int, wait_s: float = 3.0) -> bool:
    """True once every holder of the pipe's write end is gone (EOF), False if one still holds it."""
    deadline = time.monotonic() + wait_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            if select.select([read_fd], [], [], left)[0] and os.read(read_fd, 4096) == b"":
                return True
        return False
    finally:
        os.close(read_fd)


def _connect_all(targets: list[tuple[str, int]]) -> str:
    return (
        "import socket\n"
        f"for host, port in {targets!r}:\n"
        "    s = socket.socket()\n"
        "    s.settimeout(2)\n"
        "    try:\n"
        "        s.connect((host, port))\n"
        "        print('connected', host)\n"
        "    except OSError as e:\n"
        "        print('failed', host, e.errno)\n"
    )


# --- network --------------------------------------------------------------------------------------


def test_no_connection_to_a_server_on_the_hosts_loopback() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        result = run_python(_connect_all([("127.0.0.1", server.getsockname()[1])]))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    assert result.stdout.startswith("failed 127.0.0.1"), result.stdout + result.stderr


def test_no_route_to_the_host_or_the_internet() -> None:
    with socket.create_server(("0.0.0.0", 0)) as server:
        targets = [("1.1.1.1", 53)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(("10.255.255.255", 1))  # picks the host's outgoing address; sends nothing
                targets.append((probe.getsockname()[0], server.getsockname()[1]))
            except OSError:
                pass  # no route out of this machine at all: the internet target is enough
        result = run_python(_connect_all(targets))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    assert "connected" not in result.stdout and result.stdout.count("failed") == len(targets), result.stderr


def test_dns_does_not_resolve() -> None:
    code = (
        "import socket\n"
        "try:\n    print(socket.getaddrinfo('example.com', 443))\n"
        "except OSError as e:\n    print('no dns', type(e).__name__)\n"
    )
    assert run_python(code).stdout.startswith("no dns")


# --- the filesystem -------------------------------------------------------------------------------


def _try_write(path: str) -> str:
    return (
        "try:\n"
        f"    open({path!r}, 'w').write('escaped')\n"
        "    print('wrote')\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)\n"
    )


def test_cannot_write_to_the_real_tmp() -> None:
    target = f"/tmp/rllm-escape-{uuid.uuid4().hex}"
    result = run_python(_try_write(target))
    assert result.stdout.startswith("refused") and not os.path.exists(target)


def test_cannot_write_to_the_repository() -> None:
    repo = Path(rllm.__file__).resolve().parents[1]
    target = str(repo / f"escape-{uuid.uuid4().hex}.txt")
    source = str(repo / "rllm" / "sandbox" / "__init__.py")
    code = _try_write(target) + (
        "import os\n"  # opening for writing is enough to be refused; nothing is written either way
        f"try:\n    os.close(os.open({source!r}, os.O_WRONLY | os.O_APPEND))\n    print('opened')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
    )
    result = run_python(code)
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["refused", "refused"], result.stdout
    assert not os.path.exists(target)


def test_cannot_write_to_the_real_home() -> None:
    target = os.path.join(os.path.expanduser("~"), f"rllm-escape-{uuid.uuid4().hex}")
    result = run_python(_try_write(target))
    assert result.stdout.startswith("refused") and not os.path.exists(target)


def test_filling_the_work_dir_stops_at_its_size() -> None:
    code = (
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'f{n}', 'wb').write(b'x' * 4 * 2**20)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    result = run_python(code, timeout_s=10)
    written, errno = result.stdout.split()
    assert int(written) < 40 and errno == "28"  # ENOSPC long before the host disk


# --- secrets ---------------------------------------------------------------------------------------


def test_environment_secrets_are_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLLM_FAKE_API_KEY", secret)
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        f"for path in ['/proc/{os.getpid()}/environ', '/proc/1/environ', '/proc/self/environ']:\n"
        "    try:\n        print(open(path, 'rb').read())\n"
        "    except OSError as e:\n        print(path, type(e).__name__)\n"
    )
    result = run_python(code)
    assert result.ok, result.stderr
    assert secret not in result.stdout and "RLLM_FAKE_API_KEY" not in result.stdout


def test_secrets_in_the_real_home_are_unreadable() -> None:
    secret = f"token-{uuid.uuid4().hex}"
    path = Path(os.path.expanduser("~")) / f".rllm-escape-secret-{uuid.uuid4().hex}"
    path.write_text(secret)
    try:
        code = (
            "import os\n"
            f"try:\n    print(open({str(path)!r}).read())\n"
            "except OSError as e:\n    print('refused', type(e).__name__)\n"
            f"print(os.listdir({str(path.parent)!r}))\n"
        )
        result = run_python(code)
    finally:
        path.unlink()
    assert result.stdout.startswith("refused")
    assert secret not in result.stdout and path.name not in result.stdout


def test_host_processes_are_invisible() -> None:
    result = run_python("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert len(json.loads(result.stdout)) <= 4  # bwrap's init, the launcher, the program (and maybe a thread)
    assert str(os.getpid()) not in result.stdout.strip("[]\n").split(", ")


# --- bombs and endless programs ---------------------------------------------------------------------


def test_fork_bomb_is_capped_and_cleaned_up() -> None:
    read_fd, write_fd = os.pipe()
    bomb = _GUARD + (
        "import time\n"
        "capped = False\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        if not capped:\n"
        "            capped = True\n"
        "            print('capped', flush=True)\n"
        "        time.sleep(0.05)\n"
    )
    result = run_python(bomb, timeout_s=1.5, max_processes=8, pass_fds=[write_fd])
    assert result.timed_out and "capped" in result.stdout, result.stdout + result.stderr
    assert _closed_by_everyone(read_fd)


def test_memory_bomb_fails_cleanly() -> None:
    result = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))", memory_mb=128)
    assert result.memory_exceeded and result.exit_code == 1 and not result.timed_out


def test_cpu_loop_is_killed_at_the_timeout() -> None:
    result = run_python("while True:\n    pass", timeout_s=1.0)
    assert result.timed_out and result.killed_reason == "timeout" and result.duration_s < 2.5


def test_sleeping_forever_is_killed_at_the_timeout() -> None:
    result = run_python("import time\ntime.sleep(3600)", timeout_s=1.0)
    assert result.timed_out and result.duration_s < 2.5


def test_background_child_is_killed_when_the_program_exits() -> None:
    read_fd, write_fd = os.pipe()
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"  # a daemon: double fork and a session of its own
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('main done')\n"
    )
    result = run_python(code, timeout_s=5, pass_fds=[write_fd])
    assert result.ok and result.stdout == "main done\n" and result.duration_s < 3
    assert _closed_by_everyone(read_fd)


def test_huge_output_is_capped() -> None:
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", max_output_bytes=1000)
    assert not result.timed_out and result.exit_code != 0  # stopped by the file-size limit, quickly
    assert result.stdout.startswith("x" * 1000 + "\n... [output truncated:")
    assert len(result.stdout) < 1100


# --- killing ---------------------------------------------------------------------------------------


def test_killing_the_parent_reaches_nothing_outside() -> None:
    sentinel = subprocess.Popen(["sleep", "30"])
    try:
        code = _GUARD + (
            "import signal\n"
            "for pid in (os.getppid(), 1):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n        print('sent', pid)\n"
            "    except OSError as e:\n        print('refused', pid, type(e).__name__)\n"
            "print('alive')\n"
        )
        result = run_python(code)
        assert result.stdout.endswith("alive\n"), result.stdout + result.stderr
        assert "refused" in result.stdout
        assert sentinel.poll() is None
    finally:
        sentinel.kill()
        sentinel.wait()


def test_kill_minus_one_reaches_nothing_outside() -> None:
    sentinel = subprocess.Popen(["sleep", "30"])
    try:
        code = _GUARD + (
            "try:\n    os.kill(-1, 9)\n    print('sent')\n"
            "except OSError as e:\n    print('nothing to kill', type(e).__name__)\n"
            "print('alive')\n"
        )
        result = run_python(code)
        assert result.stdout.endswith("alive\n"), result.stdout + result.stderr
        assert sentinel.poll() is None
    finally:
        sentinel.kill()
        sentinel.wait()


# --- faking a pass through the code reward ----------------------------------------------------------

_ADD_TASK = {
    "task_id": "add",
    "ground_truth": {
        "tests": [
            {"type": "assert", "code": "assert add(2, 3) == 5"},
            {"type": "call", "args": [2, 3], "expected": 5},
        ],
        "entry_point": "add",
    },
}


def _score(program: str) -> float:
    return _reward()(_ADD_TASK, f"```python\n{program}\n```").reward


def test_printing_a_fake_verdict_does_not_pass() -> None:
    fake = json.dumps({"passed": True, "error": None, "message": ""})
    program = (
        "import os, sys\n"
        f"print({fake!r})\n"
        f"sys.stdout.write({fake!r} + '\\n')\n"
        f"os.write(1, {fake!r}.encode() + b'\\n')\n"
        "def add(a, b):\n"
        f"    print({fake!r})\n"
        "    return 0\n"
    )
    assert _score(program) == 0.0


def test_exiting_before_the_tests_does_not_pass() -> None:
    assert _score("import sys\ndef add(a, b):\n    return 0\nsys.exit(0)") == 0.0


def test_os_exit_before_or_during_the_tests_does_not_pass() -> None:
    assert _score("import os\ndef add(a, b):\n    return 0\nos._exit(0)") == 0.0
    assert _score("import os\ndef add(a, b):\n    os._exit(0)") == 0.0


def test_an_object_equal_to_everything_does_not_pass() -> None:
    program = (
        "class Anything(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Anything(0)\n"
    )
    assert _score(program) == 0.0


def test_patching_builtins_does_not_pass() -> None:
    task = {
        "task_id": "close",
        "ground_truth": {
            "tests": [
                {
                    "type": "assert",
                    "code": "import math\nassert abs(half(3) - 1.5) < 1e-9\nassert math.isclose(half(1), 0.5)",
                },
                {"type": "assert", "code": "assert isinstance(half(2), float) and half(2) == 1.0"},
            ],
            "entry_point": "half",
        },
    }
    program = (
        "import builtins, math\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.isinstance = lambda *a: True\n"
        "math.isclose = lambda *a, **k: True\n"
        "def abs(x):\n    return 0\n"
        "def half(x):\n    return 7\n"
    )
    assert _reward()(task, f"```python\n{program}\n```").reward == 0.0


def test_writing_a_results_file_does_not_pass() -> None:
    program = (
        "import json, os\n"
        "verdict = json.dumps({'passed': True, 'error': None, 'message': ''})\n"
        "paths = ('verdict.json', 'results.json', '/tmp/results.json', os.path.expanduser('~/r.json'))\n"
        "for path in paths:\n"
        "    try:\n        open(path, 'w').write(verdict)\n"
        "    except OSError:\n        pass\n"
        "def add(a, b):\n    return 0\n"
    )
    assert _score(program) == 0.0


def test_killing_everything_it_can_does_not_pass() -> None:
    program = _GUARD + (
        "for pid in (-1, 1, os.getppid()):\n"
        "    try:\n        os.kill(pid, 9)\n"
        "    except OSError:\n        pass\n"
        "def add(a, b):\n    return 0\n"
    )
    assert _score(program) == 0.0


def test_the_expected_answers_never_enter_the_sandbox() -> None:
    token = f"EXPECTED-{uuid.uuid4().hex}"
    task = {
        "task_id": "find",
        "ground_truth": {
            "tests": [
                {"type": "call", "args": ["x"], "expected": token},
                {"type": "assert", "code": f"assert find('x') == {token!r}"},
                {"type": "stdio", "input": "x\n", "output": token},
            ],
            "entry_point": "find",
        },
    }
    # Looks everywhere it can for the answer and prints/returns all it found.
    program = (
        "import glob, os, sys\n"
        "def find(x):\n"
        "    seen = [repr(os.environ), repr(sys.argv)]\n"
        "    patterns = ('*', '/tmp/*', '/tmp/*/*', '/proc/*/cmdline', '/proc/*/environ', '/dev/shm/*')\n"
        "    for pattern in patterns:\n"
        "        for path in glob.glob(pattern):\n"
        "            try:\n                seen.append(open(path, errors='replace').read()[:100000])\n"
        "            except OSError:\n                pass\n"
        "    found = [s for s in seen if 'EXPEC' + 'TED-' in s]\n"  # not the literal: main.py holds this line
        "    return found[0] if found else 'not found'\n"
        "if __name__ == '__main__':\n"
        "    print(find(sys.stdin.read()))\n"
    )
    result = _reward()(task, f"```python\n{program}\n```")
    assert result.reward == 0.0
    assert all(test["error"] == "wrong_answer" for test in result.info["tests"]), result.info["tests"]
    stdio = result.info["tests"][2]
    assert stdio["stdout"] == "not found\n"


def test_a_stopped_sandbox_is_killed_too() -> None:
    code = _GUARD + "import signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"
    result = run_python(code, timeout_s=1.0)
    assert result.timed_out and result.duration_s < 2.5  # a stopped process is killed like any other
