"""Deployment files (Docker cannot be built here): valid YAML, loopback-only host ports, and every
entry point, module, config and file they name exists."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"


def _yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _resolve_import_path(import_path: str):
    module, _, attr = import_path.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _cli_commands() -> set[str]:
    import typer.main

    from inferencegym.cli import app

    return {c.name or c.callback.__name__ for c in app.registered_commands} | \
        set(typer.main.get_command(app).commands)


def _check_entrypoint(cmd: str) -> None:
    """``python -m MODULE ...`` / ``inferencegym CMD ...``: the module or command exists, and every
    --config / --sweep file it names is in the repo."""
    argv = shlex.split(cmd)
    if argv[:2] == ["python", "-m"]:
        assert importlib.util.find_spec(argv[2]) is not None, f"module {argv[2]} not found"
    elif argv[0] == "inferencegym":
        assert argv[1] in _cli_commands(), f"no `inferencegym {argv[1]}` command"
    else:
        pytest.fail(f"unexpected entrypoint {cmd!r}")
    for flag in ("--config", "--sweep"):
        if flag in argv:
            assert (REPO / argv[argv.index(flag) + 1]).is_file(), f"{flag} file missing in {cmd!r}"


def test_dockerfile():
    text = (DOCKER / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and froms[0].startswith("rayproject/ray:2.60.0") and froms[0].endswith("-cpu")
    import ray

    assert froms[0].split(":")[1].startswith(ray.__version__)  # image matches the pinned Ray
    for line in re.findall(r"^COPY\s+(.+)$", text, re.M):
        parts = [p for p in line.split() if not p.startswith("--")]
        for src in parts[:-1]:
            assert (REPO / src).exists(), f"Dockerfile copies {src}, which is not in the repo"
    assert "torch==2.13.0" in text and "-c constraints.txt" in text


def test_compose():
    (compose,) = _yaml_docs(DOCKER / "docker-compose.yml")
    services = compose["services"]
    assert {"ray-head", "ray-worker", "mlflow"} <= set(services)
    assert "--head" in services["ray-head"]["command"]
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
    assert services["mlflow"]["command"].split()[:2] == ["mlflow", "server"]
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    head_env = services["ray-head"]["environment"]
    assert head_env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert "${RAY_AUTH_TOKEN" in head_env["RAY_AUTH_TOKEN"]  # secret from the environment, not the file
    assert services["ray-head"]["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / services["ray-head"]["build"]["context"] / "docker" / "Dockerfile").is_file()


@pytest.mark.parametrize("name", ["rayjob-train.yaml", "rayjob-sweep.yaml"])
def test_rayjobs(name):
    (job,) = _yaml_docs(DOCKER / "kuberay" / name)
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    _check_entrypoint(spec["entrypoint"])
    assert yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]["MLFLOW_TRACKING_URI"].startswith("http")
    cluster = spec["rayClusterSpec"]
    import ray

    assert cluster["rayVersion"] == ray.__version__
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert cluster["workerGroupSpecs"][0]["replicas"] >= 1


def _check_serve_config(cfg: dict) -> None:
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(cfg) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(cfg)
    (app,) = cfg["applications"]
    builder = _resolve_import_path(app["import_path"])
    assert callable(builder)
    bound = builder(dict(app["args"]))  # binding validates the args; nothing is loaded yet
    from ray import serve

    assert isinstance(bound, serve.Application)
    with pytest.raises(ValueError, match="unknown serve args"):
        builder({**app["args"], "colour": "red"})


def test_rayservice():
    (svc,) = _yaml_docs(DOCKER / "kuberay" / "rayservice.yaml")
    assert svc["kind"] == "RayService"
    _check_serve_config(yaml.safe_load(svc["spec"]["serveConfigV2"]))


def test_serve_config_and_entry():
    cfg = yaml.safe_load((REPO / "serve" / "config.yaml").read_text())
    assert cfg["http_options"]["host"] == "127.0.0.1"
    _check_serve_config(cfg)
    spec = importlib.util.spec_from_file_location("serve_app_entry", REPO / "serve" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from ray import serve

    assert isinstance(mod.app, serve.Application)


def test_cli_commands_of_this_area_exist():
    assert {"tune", "serve", "dashboard"} <= _cli_commands()
