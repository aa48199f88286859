"""The deployment files (docker/, deploy/), checked offline: what can be checked without a container
runtime, a Kubernetes cluster or Slurm (docs/deploy.md says what was run beyond this, and what was not).

- Dockerfiles: they install rllm through scripts/setup.sh with the torch version setup.sh pins, the
  extras they name exist, every COPY source is in the build context, they end as a non-root user with
  ``rllm`` as entrypoint, and the CUDA one's torch / vLLM pairing is the one docs/deploy.md states;
  ``hadolint`` clean (the ``deploy-tests`` extra ships it).
- The healthcheck script: which command lines it probes, and its answer for a /health that is up, down
  or refusing.
- The KubeRay RayJob: its fields against the ray.io/v1 RayJob structure (written here from KubeRay's
  documentation, not copied from its CRD), its pod templates and the PVC against the ``kubernetes``
  client's models (unknown keys, types, required fields), and its entrypoint is an ``rllm train`` whose
  config loads and whose ranks fit the GPUs of the worker group.
- The Slurm script: ``shellcheck`` clean (tests/distributed/test_slurm_script.py runs it).

Tests that need the ``deploy-tests`` extra skip without it, but fail when ``$RLLM_TEST_EXTRAS`` names it, as
CI's extras tier, which installs it, does (the fast tier runs this file too, without the extra).
"""

from __future__ import annotations

import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ci_support import skip_or_fail

from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = [ROOT / "docker" / "Dockerfile.cpu", ROOT / "docker" / "Dockerfile.cuda"]
RAYJOB = ROOT / "deploy" / "kuberay" / "rayjob.yaml"
SBATCH = ROOT / "deploy" / "slurm" / "rllm_ray.sbatch"
EXTRA = "deploy-tests"

sys.path.insert(0, str(ROOT / "docker"))
import healthcheck  # docker/healthcheck.py: a script beside the Dockerfiles, not a package


def require(module: str) -> Any:
    """Import ``module`` from the deploy-tests extra: skip without it, fail when it must be there."""
    try:
        return __import__(module)
    except ImportError:
        _missing(module)


def require_tool(name: str) -> str:
    """A command from the deploy-tests extra (in this venv's bin/), else from PATH: skip, or fail when the
    extra must be there."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        _missing(name)
    return found


def _missing(name: str) -> None:
    skip_or_fail(f"{name} is not installed: bash scripts/setup.sh {EXTRA}", extra=EXTRA)


# --- Dockerfiles ----------------------------------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if current.strip():
                joined.append(current.strip())
            current = ""
    return [
        (text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in joined
    ]


def _args(path: Path) -> dict[str, str]:
    return dict(a.split("=", 1) if "=" in a else (a, "") for kind, a in _instructions(path) if kind == "ARG")


def _setup_default(name: str, script: str = "setup.sh") -> str:
    match = re.search(
        rf'^{name}="\$\{{[A-Z_]+:-([^}}]+)\}}"', (ROOT / "scripts" / script).read_text(), re.MULTILINE
    )
    assert match, f"scripts/{script} no longer sets {name}"
    return match.group(1)


def test_the_cpu_image_takes_torch_from_setup_shs_cpu_index() -> None:
    args = _args(ROOT / "docker" / "Dockerfile.cpu")
    assert args["RLLM_TORCH_INDEX_URL"] == _setup_default("TORCH_CPU_INDEX_URL", "_torch.sh")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_rllm_as_setup_sh_does(dockerfile: Path) -> None:
    instructions = _instructions(dockerfile)
    args = _args(dockerfile)
    assert args["RLLM_TORCH_VERSION"] == _setup_default("TORCH_VERSION"), (
        "torch differs from scripts/setup.sh's"
    )
    runs = " ".join(a for kind, a in instructions if kind == "RUN")
    assert "bash /opt/rllm/src/scripts/setup.sh ${RLLM_EXTRAS}" in runs
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in args["RLLM_EXTRAS"].split():
        assert extra in extras, f"{dockerfile.name} installs extra {extra!r}, which pyproject.toml lacks"
    assert "rllm model pull smollm2-135m" in runs
    # Every COPY source is in the build context (the repository root) and not excluded by .dockerignore.
    ignored = {line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"}
    for kind, a in instructions:
        if kind == "COPY":
            *sources, _dest = [p for p in a.split() if not p.startswith("--")]
            for source in sources:
                assert (ROOT / source).exists() and source not in ignored, (
                    f"COPY {source}: not in the context"
                )
    assert {".git", ".venv", ".venv-*", "runs"} <= ignored
    # Ends as a non-root user, numeric so Kubernetes' runAsNonRoot can check it, with rllm as entrypoint.
    users = [a for kind, a in instructions if kind == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    assert ("ENTRYPOINT", '["rllm"]') in instructions
    health = [a for kind, a in instructions if kind == "HEALTHCHECK"]
    assert len(health) == 1 and "/opt/rllm/src/docker/healthcheck.py" in health[0]


def test_cuda_dockerfile_states_the_documented_pairing() -> None:
    args = _args(ROOT / "docker" / "Dockerfile.cuda")
    deploy_md = (ROOT / "docs" / "deploy.md").read_text()
    row = f"| {args['VLLM_VERSION']} | {args['RLLM_TORCH_VERSION']} | 13.0 |"
    assert row in deploy_md, f"docs/deploy.md's pairing table lacks the Dockerfile's pairing {row}"
    # The CPU vLLM venv (scripts/setup_vllm.sh) runs the same torch, so a model behaves alike in both.
    assert _setup_default("TORCH_VERSION", "setup_vllm.sh") == args["RLLM_TORCH_VERSION"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_hadolint_clean(dockerfile: Path) -> None:
    hadolint = require_tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the healthcheck ------------------------------------------------------------------------------------


def test_healthcheck_knows_the_gateways_ports() -> None:
    assert healthcheck.gateway_ports(["/opt/rllm/venv/bin/rllm", "gateway", "--model", "m"]) == [8000]
    assert healthcheck.gateway_ports(["rllm", "gateway", "--port=9000", "--workers", "3"]) == [
        9000,
        9001,
        9002,
    ]
    assert healthcheck.gateway_ports(["rllm", "--log-level", "INFO", "gateway", "--port", "1"]) == [1]
    assert healthcheck.gateway_ports(["rllm", "train", "trainer.steps=3"]) is None


class _FakeHealth(http.server.BaseHTTPRequestHandler):
    """FAKE /health (the real gateway's: tests/slow/test_deploy_healthcheck.py): answers the
    status the server was given, 401 without the expected key."""

    def do_GET(self) -> None:
        status = self.server.status  # type: ignore[attr-defined]
        if self.server.key and self.headers.get("Authorization") != f"Bearer {self.server.key}":  # type: ignore[attr-defined]
            status = 401
        self.send_response(status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_health() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeHealth)
    server.status, server.key = 200, None  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_healthcheck_probes_health(fake_health: http.server.HTTPServer) -> None:
    port = fake_health.server_address[1]
    assert healthcheck.probe(port, None) is None
    fake_health.status = 503  # type: ignore[attr-defined]
    assert healthcheck.probe(port, None) == f"port {port}: /health answered 503"
    fake_health.status, fake_health.key = 200, "k"  # type: ignore[attr-defined]
    assert healthcheck.probe(port, None) == f"port {port}: /health answered 401"
    assert healthcheck.probe(port, "k") is None
    fake_health.shutdown()
    fake_health.server_close()
    assert healthcheck.probe(port, "k").startswith(f"port {port}: ")  # nothing listens: refused


def test_healthcheck_passes_a_container_that_runs_no_gateway() -> None:
    # This test's own process is `python -m pytest ...`: not a gateway, so healthy without a probe.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docker" / "healthcheck.py"), "--pid", str(os.getpid())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("healthy: not a gateway"), (
        proc.stdout + proc.stderr
    )


# --- the KubeRay RayJob ---------------------------------------------------------------------------------

# The ray.io/v1 RayJob (KubeRay 1.3/1.4), as its documentation describes it: field -> type, where a type
# is a Python type, a nested dict (an object), [dict] (a list of objects), "pod" (a core/v1
# PodTemplateSpec, checked with the kubernetes client) or {str: str} (a string map).
STR_MAP = {str: str}
HEAD_GROUP = {"rayStartParams": STR_MAP, "template": "pod", "serviceType": str, "enableIngress": bool}
WORKER_GROUP = {
    "groupName": str,
    "replicas": int,
    "minReplicas": int,
    "maxReplicas": int,
    "numOfHosts": int,
    "idleTimeoutSeconds": int,
    "suspend": bool,
    "rayStartParams": STR_MAP,
    "template": "pod",
    "scaleStrategy": {"workersToDelete": [str]},
}
RAY_CLUSTER_SPEC = {
    "rayVersion": str,
    "enableInTreeAutoscaling": bool,
    "headServiceAnnotations": STR_MAP,
    "headGroupSpec": HEAD_GROUP,
    "workerGroupSpecs": [WORKER_GROUP],
    "suspend": bool,
}
RAYJOB_SPEC = {
    "entrypoint": str,
    "runtimeEnvYAML": str,
    "jobId": str,
    "submissionMode": ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"),
    "shutdownAfterJobFinishes": bool,
    "ttlSecondsAfterFinished": int,
    "activeDeadlineSeconds": int,
    "backoffLimit": int,
    "entrypointNumCpus": float,
    "entrypointNumGpus": float,
    "entrypointResources": str,
    "rayClusterSpec": RAY_CLUSTER_SPEC,
    "clusterSelector": STR_MAP,
    "submitterPodTemplate": "pod",
    "suspend": bool,
    "managedBy": str,
}
REQUIRED = {"worker group": ("groupName", "template"), "head group": ("template",), "spec": ("entrypoint",)}


def _check_fields(node: Any, schema: Any, where: str, pods: list[tuple[str, dict]]) -> None:
    """Unknown keys and wrong types under ``where``; pod templates collected into ``pods``."""
    if schema == "pod":
        assert isinstance(node, dict), f"{where}: a pod template is an object"
        pods.append((where, node))
    elif isinstance(schema, tuple):
        assert node in schema, f"{where}: {node!r} is not one of {schema}"
    elif schema == STR_MAP:
        assert isinstance(node, dict), f"{where}: expected a map"
        bad = {k: v for k, v in node.items() if not isinstance(v, str)}
        assert not bad, f"{where}: KubeRay takes strings here (quote them): {bad}"
    elif isinstance(schema, list):
        assert isinstance(node, list), f"{where}: expected a list"
        for i, item in enumerate(node):
            _check_fields(item, schema[0], f"{where}[{i}]", pods)
    elif isinstance(schema, dict):
        assert isinstance(node, dict), f"{where}: expected an object"
        unknown = set(node) - set(schema)
        assert not unknown, f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(schema)}"
        for key, value in node.items():
            _check_fields(value, schema[key], f"{where}.{key}", pods)
    elif schema is float:
        assert isinstance(node, (int, float)) and not isinstance(node, bool), f"{where}: expected a number"
    else:
        assert isinstance(node, schema) and not (schema is int and isinstance(node, bool)), (
            f"{where}: expected {schema.__name__}, got {node!r}"
        )


def _rayjob() -> tuple[dict, list[dict]]:
    docs = list(yaml.safe_load_all(RAYJOB.read_text()))
    jobs = [d for d in docs if d.get("kind") == "RayJob"]
    assert len(jobs) == 1
    return jobs[0], [d for d in docs if d.get("kind") != "RayJob"]


def test_rayjob_matches_the_ray_io_v1_structure() -> None:
    job, _ = _rayjob()
    assert job["apiVersion"] == "ray.io/v1" and set(job) == {"apiVersion", "kind", "metadata", "spec"}
    pods: list[tuple[str, dict]] = []
    _check_fields(job["spec"], RAYJOB_SPEC, "spec", pods)
    cluster = job["spec"]["rayClusterSpec"]
    for key in REQUIRED["spec"]:
        assert key in job["spec"]
    for key in REQUIRED["head group"]:
        assert key in cluster["headGroupSpec"]
    for group in cluster["workerGroupSpecs"]:
        for key in REQUIRED["worker group"]:
            assert key in group
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert len(pods) == 1 + len(cluster["workerGroupSpecs"])
    # Every pod runs the same image, so Ray, torch and rllm match across the cluster.
    images = {c["image"] for _, pod in pods for c in pod["spec"]["containers"]}
    assert len(images) == 1
    distributed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert distributed["distributed"] == ["ray>=2.40"]
    assert cluster["rayVersion"] in (ROOT / "pyproject.toml").read_text()  # "verified with ray X"


def test_the_structure_check_refuses_mistakes() -> None:
    pods: list[tuple[str, dict]] = []
    with pytest.raises(AssertionError, match="unknown field"):
        _check_fields({"entrypoint": "x", "shutdownAfterJobFinish": True}, RAYJOB_SPEC, "spec", pods)
    with pytest.raises(AssertionError, match="quote them"):
        _check_fields({"rayStartParams": {"num-gpus": 0}}, HEAD_GROUP, "head", pods)
    with pytest.raises(AssertionError, match="expected int"):
        _check_fields({"replicas": "2"}, WORKER_GROUP, "worker", pods)


def _unknown_keys(data: Any, model: Any, where: str) -> list[str]:
    """Keys the kubernetes client's model ``model`` does not have, anywhere under ``data`` (its from_dict
    drops them silently)."""
    client = sys.modules["kubernetes.client"]
    if not isinstance(data, dict):
        return []
    wire_to_name = {wire: name for name, wire in model.attribute_map.items()}
    problems = [f"{where}.{k}" for k in data if k not in wire_to_name]
    for key, value in data.items():
        if key not in wire_to_name:
            continue
        kind = model.openapi_types[wire_to_name[key]]
        # "List[V1Container]", "Dict[str, str]", "V1PodSpec" (older clients: "list[...]", "dict(str, ...)")
        inner = re.fullmatch(r"[Ll]ist\[(\w+)\]|[Dd]ict[\[(]str, (\w+)[\])]|(\w+)", kind)
        sub = getattr(client, next(g for g in inner.groups() if g), None) if inner else None
        if not hasattr(sub, "attribute_map"):  # a str, int, bool, object: nothing nested to check
            continue
        if kind.lower().startswith("list"):
            for i, item in enumerate(value or []):
                problems += _unknown_keys(item, sub, f"{where}.{key}[{i}]")
        elif kind.lower().startswith("dict"):
            for k, item in (value or {}).items():
                problems += _unknown_keys(item, sub, f"{where}.{key}.{k}")
        else:
            problems += _unknown_keys(value, sub, f"{where}.{key}")
    return problems


def test_rayjob_pods_and_volume_claim_are_valid_kubernetes_objects() -> None:
    require("kubernetes")
    import kubernetes.client as k8s
    from kubernetes.utils import parse_quantity

    job, others = _rayjob()
    pods: list[tuple[str, dict]] = []
    _check_fields(job["spec"], RAYJOB_SPEC, "spec", pods)
    for where, template in pods:
        assert not _unknown_keys(template, k8s.V1PodTemplateSpec, where)
        pod = k8s.V1PodTemplateSpec.from_dict(template)  # types and required fields
        claims = {v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
        assert claims <= {d["metadata"]["name"] for d in others if d["kind"] == "PersistentVolumeClaim"}
        for container in pod.spec.containers:
            for amount in (container.resources.requests or {}).values():
                parse_quantity(amount)
            mounts = {m.name for m in container.volume_mounts or []}
            assert mounts <= {v.name for v in pod.spec.volumes}, f"{where}: a mount names no volume"
    assert pods[0][1]["spec"]["securityContext"]["runAsUser"] != 0
    (claim,) = others
    assert not _unknown_keys(claim, k8s.V1PersistentVolumeClaim, "pvc")
    assert k8s.V1PersistentVolumeClaim.from_dict(claim).spec.access_modes == ["ReadWriteMany"]


def test_unknown_key_check_finds_a_typo() -> None:
    require("kubernetes")
    import kubernetes.client as k8s

    template = {"spec": {"containers": [{"name": "c", "image": "i", "resoures": {}}]}}
    assert _unknown_keys(template, k8s.V1PodTemplateSpec, "pod") == ["pod.spec.containers[0].resoures"]


def test_rayjob_entrypoint_is_a_valid_rllm_train() -> None:
    job, _ = _rayjob()
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["rllm", "train"]
    config = load_config(TrainConfig, None, argv[2:])
    dist = config.backend.distributed
    assert config.backend.name == "distributed" and dist.ray_address == "auto"
    assert config.backend.device == "cuda" and config.trainer.run_dir.startswith("/work")
    # The ranks fit the worker group's GPUs, and none is placed on the head (its GPU is vLLM's).
    cluster = job["spec"]["rayClusterSpec"]
    gpus = sum(
        g["replicas"] * int(g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        for g in cluster["workerGroupSpecs"]
    )
    assert dist.world_size * dist.gpus_per_rank == gpus
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert int(head["resources"]["limits"]["nvidia.com/gpu"]) >= config.inference.vllm.num_servers


# --- the Slurm script -----------------------------------------------------------------------------------


def test_slurm_script_is_shellcheck_clean() -> None:
    shellcheck = require_tool("shellcheck")
    proc = subprocess.run(
        [shellcheck, "--shell=bash", str(SBATCH)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_slurm_script_asks_for_one_task_per_node() -> None:
    directives = dict(
        line.removeprefix("#SBATCH --").split("=", 1)
        for line in SBATCH.read_text().splitlines()
        if line.startswith("#SBATCH --") and "=" in line
    )
    assert directives["ntasks-per-node"] == "1"  # one `ray start` per node
    assert int(directives["nodes"]) >= 1
