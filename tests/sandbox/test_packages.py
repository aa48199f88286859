"""Explicitly allowed packages (``packages=``): numpy, once named, imports and computes inside the bubblewrap
sandbox while the rest of site-packages stays hidden; without the name it does not import; names that
cannot be let in (``rllm``, unknown, standard library, a project directory on ``sys.path``) are refused in
one line, by the sandbox, the code reward and the python tool alike; the program runs as it would as a
plain script; without bubblewrap the packages come from the host's site-packages as they are.

numpy is installed in the project's venv (with torch), which lies inside the repository: the sandbox must
get numpy's own directories from it and nothing else.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os

import pytest

from rllm.rewards.code import make_code_reward
from rllm.sandbox import PackageNotAllowed, SandboxResult, protections, run_python
from rllm.tools.builtin import make_python_tool

pytestmark = pytest.mark.usefixtures("bubblewrap")

SITE_DIR = "/opt/rllm-sandbox-site"
NUMPY_DIR = os.path.realpath(importlib.util.find_spec("numpy").submodule_search_locations[0])
VENV_SITE = os.path.dirname(NUMPY_DIR)
NUMPY_VERSION = importlib.metadata.version("numpy")

_SOLVE = (
    "import numpy as np\n"
    "a = np.array([[3.0, 1.0], [1.0, 2.0]])\n"
    "x = np.linalg.solve(a, np.array([9.0, 8.0]))\n"  # BLAS/LAPACK from numpy.libs
    "print(x.tolist(), int(np.arange(10).sum()))\n"
)


def _run_json(code: str, **kwargs: object) -> tuple[SandboxResult, object]:
    result = run_python(code, **kwargs)
    assert result.ok, result.stderr
    return result, json.loads(result.stdout.splitlines()[-1])


def test_numpy_imports_and_computes_when_allowed() -> None:
    result = run_python(
        _SOLVE + "import importlib.metadata as m\nprint(m.version('numpy'))\n", packages=("numpy",)
    )
    assert result.ok, result.stderr
    solved, version = result.stdout.splitlines()
    assert solved == "[2.0, 3.0] 45"
    assert version == NUMPY_VERSION  # its .dist-info came along, for importlib.metadata
    assert result.protections["isolation"] == "bwrap"
    assert "numpy (numpy, " in result.protections["packages"] and SITE_DIR in result.protections["packages"]


def test_numpy_does_not_import_when_not_allowed() -> None:
    result = run_python(_SOLVE)
    assert result.exit_code == 1 and "ModuleNotFoundError: No module named 'numpy'" in result.stderr
    assert result.protections["packages"] == "none: the standard library only"


def test_with_numpy_allowed_the_rest_of_site_packages_stays_hidden() -> None:
    code = (
        "import json, os, sys, importlib.metadata as m\n"
        "import numpy\n"
        f"sys.path[:0] = [{VENV_SITE!r}, {os.path.dirname(VENV_SITE)!r}]\n"  # the host's paths: not there
        "out = {'path_tail': sys.path[-1], 'numpy_at': numpy.__path__[0]}\n"
        "out['site'] = sorted(os.listdir(os.path.dirname(numpy.__path__[0])))\n"
        "out['opt'] = sorted(os.listdir('/opt'))\n"
        "for name in ('torch', 'sortedcontainers', 'pydantic', 'rllm'):\n"
        "    try:\n        __import__(name)\n        out[name] = 'imported'\n"
        "    except ImportError as e:\n        out[name] = type(e).__name__\n"
        "try:\n    out['torch_metadata'] = m.version('torch')\nexcept m.PackageNotFoundError:\n"
        "    out['torch_metadata'] = 'not found'\n"
        f"for path in [{VENV_SITE!r}, {os.path.join(VENV_SITE, 'torch')!r}, numpy.__path__[0] + '/../torch']:\n"
        "    try:\n        out[path] = os.listdir(path)\n    except OSError as e:\n        out[path] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    assert importlib.util.find_spec("torch") is not None  # there on the host, next to numpy
    _, out = _run_json(code, packages=("numpy",))
    assert out["path_tail"] == SITE_DIR and out["numpy_at"] == f"{SITE_DIR}/numpy"
    assert out["site"] == sorted(["numpy", "numpy.libs", f"numpy-{NUMPY_VERSION}.dist-info"])
    assert out["opt"] == ["rllm-sandbox-site"]
    assert {out[n] for n in ("torch", "sortedcontainers", "pydantic", "rllm")} == {"ModuleNotFoundError"}
    assert out["torch_metadata"] == "not found"
    for path in (VENV_SITE, os.path.join(VENV_SITE, "torch"), f"{SITE_DIR}/numpy/../torch"):
        assert out[path] == "FileNotFoundError", (path, out[path])


def test_the_allowed_package_is_read_only() -> None:
    code = (
        "import numpy, os\n"
        "for path in (numpy.__file__, os.path.join(os.path.dirname(numpy.__file__), 'planted.py')):\n"
        "    try:\n        open(path, 'a').close()\n        print('wrote', path)\n"
        "    except OSError as e:\n        print('refused', type(e).__name__)\n"
    )
    result = run_python(code, packages=("numpy",))
    lines = result.stdout.splitlines()  # PermissionError (not the file's owner) or EROFS (read-only bind)
    assert len(lines) == 2 and all(line.startswith("refused") for line in lines), (
        result.stdout + result.stderr
    )
    assert not os.path.exists(os.path.join(NUMPY_DIR, "planted.py"))


@pytest.mark.parametrize(
    ("packages", "message"),
    [
        (("rllm",), "'rllm' cannot be allowed into the sandbox: it is the project"),
        (("no_such_package_xyz",), "'no_such_package_xyz' is not installed in"),
        (("json",), "'json' is part of the standard library"),
        (("sys",), "'sys' is part of the standard library"),
        (("numpy.linalg",), "is not a top-level package name; name the top-level package 'numpy'"),
        (("sandbox_support",), "not installed in a site-packages directory"),  # tests/sandbox, in the repo
        (("numpy", "rllm"), "'rllm' cannot be allowed"),
    ],
)
def test_packages_that_cannot_be_let_in_are_refused_in_one_line(
    packages: tuple[str, ...], message: str
) -> None:
    for attempt in (
        lambda: run_python("print(1)", packages=packages),
        lambda: protections(packages=packages),
        lambda: make_code_reward(packages=packages),
        lambda: make_python_tool(packages=packages),
    ):
        with pytest.raises(PackageNotAllowed) as caught:
            attempt()
        assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_bare_string_is_refused_rather_than_read_letter_by_letter() -> None:
    with pytest.raises(TypeError, match=r"packages must be a sequence of names, e\.g\. \('numpy',\)"):
        run_python("print(1)", packages="numpy")


def test_a_project_directory_on_sys_path_is_refused_although_importable_here() -> None:
    # sandbox_support is importable here (pytest put tests/sandbox on sys.path), as an editable install
    # would be: its origin lies in the repository, which must never be bound.
    origin = importlib.util.find_spec("sandbox_support").origin
    assert origin is not None and "site-packages" not in origin
    with pytest.raises(PackageNotAllowed, match="an editable install or a sys.path entry into a project"):
        protections(packages=("sandbox_support",))


def test_the_program_runs_as_the_same_script_with_packages_allowed() -> None:
    """The bootstrap that extends sys.path leaves no trace: names, argv, exit codes and tracebacks match."""
    probe = (
        "import json, os, sys\n"
        "print(json.dumps({'name': __name__, 'file': os.path.basename(__file__), 'argv': sys.argv,\n"
        "                  'globals': sorted(k for k in globals() if not k.startswith('__')),\n"
        "                  'blas': os.environ.get('OPENBLAS_NUM_THREADS')}))\n"
    )
    _, plain = _run_json(probe, args=["x", "--y"])
    _, allowed = _run_json(probe, args=["x", "--y"], packages=("numpy",))
    assert plain == {
        "name": "__main__",
        "file": "main.py",
        "argv": ["main.py", "x", "--y"],
        "globals": ["json", "os", "sys"],
        "blas": None,
    }
    assert allowed == {**plain, "blas": "1"}  # one BLAS thread: max_processes and memory_mb hold
    for failing in (
        "def f():\n    return 1 / 0\nf()\n",
        "def f(:\n",
        "print(sys)\n",
        "import sys\nsys.exit(3)\n",
    ):
        a, b = run_python(failing), run_python(failing, packages=("numpy",))
        assert (a.exit_code, a.stderr) == (b.exit_code, b.stderr), failing


def test_the_code_reward_grades_a_numpy_program_only_when_numpy_is_allowed() -> None:
    program = "```python\nimport numpy as np\n\ndef total(xs):\n    return int(np.sum(np.array(xs)))\n```"
    task = {
        "task_id": "total",
        "ground_truth": {
            "entry_point": "total",
            "tests": [
                {"type": "call", "args": [[1, 2, 3]], "expected": 6},
                {"type": "assert", "code": "import numpy\nassert total(numpy.arange(5).tolist()) == 10"},
                {"type": "stdio", "input": "", "output": ""},
            ],
        },
    }
    allowed = make_code_reward(timeout_s=10.0, max_parallel=2, packages=("numpy",))(task, program)
    assert allowed.reward == 1.0, allowed.info["tests"]
    assert "numpy" in allowed.info["protections"]["packages"]
    plain = make_code_reward(timeout_s=10.0, max_parallel=2)(task, program)
    assert plain.info["passed"] == 0, plain.info["tests"]
    call, check, stdio = plain.info["tests"]
    assert "No module named 'numpy'" in call.get("message", "") + call["stderr"]
    assert "No module named 'numpy'" in stdio["stderr"]
    assert check["error"] == "runtime_error"  # the program's sandbox died loading it; the checker saw that


def test_the_python_tool_runs_numpy_and_tells_the_model_it_is_there() -> None:
    tool = make_python_tool(timeout_s=10.0, packages=("numpy",))
    assert "The standard library and these packages are available: numpy." in tool.description
    assert asyncio.run(tool.call({"code": _SOLVE})) == "[2.0, 3.0] 45"
    plain = make_python_tool(timeout_s=10.0)
    assert "Only the standard library is available." in plain.description
    assert "No module named 'numpy'" in asyncio.run(plain.call({"code": _SOLVE}))


def test_without_bubblewrap_packages_come_from_the_hosts_site_packages_as_they_are() -> None:
    report = protections("none", packages=("numpy",))
    assert "as they are" in report["packages"] and VENV_SITE in report["packages"]
    assert "every other package in those directories is importable too" in report["packages"]
    result = run_python(
        _SOLVE + "import numpy\nprint(numpy.__file__)\n", isolation="none", packages=("numpy",)
    )
    if result.exit_code != 0 and "Permission denied" in result.stderr:
        pytest.skip(f"the leased uid cannot read this venv ({VENV_SITE}) under isolation='none'")
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["[2.0, 3.0] 45", os.path.join(NUMPY_DIR, "__init__.py")]


def test_a_module_file_and_a_pure_python_package_are_let_in_alongside() -> None:
    code = (
        "import json, os, sys, typing_extensions\n"
        "print(json.dumps([typing_extensions.__file__, sorted(os.listdir(sys.path[-1]))]))\n"
    )
    _, (where, listed) = _run_json(code, packages=("typing_extensions", "numpy"))
    assert where == f"{SITE_DIR}/typing_extensions.py"  # a top-level module: its file alone is bound
    assert "typing_extensions.py" in listed and "numpy" in listed
    assert not any(name.startswith(("pydantic", "torch")) for name in listed)


def test_dependencies_are_not_followed_each_package_is_named() -> None:
    code = "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nprint(A(x='3').x)\n"
    alone = run_python(code, packages=("pydantic",))
    assert alone.exit_code == 1 and "No module named 'pydantic_core'" in alone.stderr
    named = ("pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection")
    together = run_python(code, packages=named)
    assert together.ok and together.stdout == "3\n", together.stderr


def test_two_packages_of_one_distribution_share_its_dist_info() -> None:
    # setuptools installs setuptools and _distutils_hack, with one .dist-info; the venv has it (setup.sh).
    if importlib.util.find_spec("_distutils_hack") is None:
        pytest.skip("setuptools (with _distutils_hack) is not installed in this venv")
    code = (
        f"import json, os, _distutils_hack, setuptools\nprint(json.dumps(sorted(os.listdir({SITE_DIR!r}))))\n"
    )
    _, listed = _run_json(code, packages=("setuptools", "_distutils_hack"), timeout_s=20, memory_mb=1024)
    version = importlib.metadata.version("setuptools")
    assert listed == ["_distutils_hack", "setuptools", f"setuptools-{version}.dist-info"]
