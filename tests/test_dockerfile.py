"""The Dockerfile, checked without a Docker engine (none runs on this machine): what it copies
exists and is not excluded by .dockerignore, it is multi-stage and non-root, its entrypoint is the
`mirrorgate` console script, and it is the image the Helm chart runs by default."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` (or a folder above it) out of the build context."""
    parts = Path(path.rstrip("/")).parts
    result = False
    for entry in patterns:
        negate = entry.startswith("!")
        pattern = entry.removeprefix("!").rstrip("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(
                prefix, pattern.removeprefix("**/")
            ):
                result = not negate
    return result


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_path_it_copies_exists_and_is_in_the_build_context() -> None:
    copies = [args for keyword, args in instructions() if keyword == "COPY"]
    sources = [src for args in copies if not args.startswith("--from") for src in args.split()[:-1]]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source, dockerignore()), f"{source} is excluded by .dockerignore"


def test_it_copies_every_package_of_the_distribution() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    ]
    copied = {
        source.rstrip("/")
        for keyword, args in instructions()
        if keyword == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    assert set(packages) <= copied
    assert pyproject["project"]["readme"] in copied  # the build reads it


def test_multi_stage_non_root_and_the_mirrorgate_entrypoint() -> None:
    steps = instructions()
    stages = [args for keyword, args in steps if keyword == "FROM"]
    assert len(stages) >= 2
    final = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    runtime = steps[final:]
    assert any(k == "COPY" and a.startswith("--from=build") for k, a in runtime)
    (user,) = [args for keyword, args in runtime if keyword == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    (entrypoint,) = [json.loads(args) for keyword, args in runtime if keyword == "ENTRYPOINT"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert entrypoint == ["mirrorgate"]
    assert pyproject["project"]["scripts"]["mirrorgate"] == "proxy.cli:main"
    # Two malloc arenas: the worker threads' own arenas made a soak's memory grow.
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert "MALLOC_ARENA_MAX=2" in env


def test_it_is_the_image_the_chart_runs() -> None:
    steps = instructions()
    chart = yaml.safe_load((ROOT / "helm" / "mirrorgate" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm" / "mirrorgate" / "values.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    labels = " ".join(args for keyword, args in steps if keyword == "LABEL")
    assert 'org.opencontainers.image.title="mirrorgate"' in labels
    # `docker build -t mirrorgate:<version> .` gives image.repository:appVersion.
    assert values["image"]["repository"] == "mirrorgate" and values["image"]["tag"] == ""
    assert chart["appVersion"] == pyproject["project"]["version"]
    (user,) = [args for keyword, args in steps if keyword == "USER"]
    assert values["securityContext"]["runAsUser"] == int(user.split(":")[0])
    (expose,) = [args for keyword, args in steps if keyword == "EXPOSE"]
    assert int(expose) == values["port"]
    (cmd,) = [json.loads(args) for keyword, args in steps if keyword == "CMD"]
    # All interfaces inside the container, whatever server.host the mounted file says: a
    # published port reaches the container's interface, never its loopback.
    assert cmd == ["serve", "--config", "/etc/mirrorgate/mirrorgate.yaml", "--host", "0.0.0.0"]


def test_the_base_image_is_a_build_argument_with_the_official_slim_image_by_default() -> None:
    steps = instructions()
    first_from = next(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    args = dict(a.partition("=")[::2] for keyword, a in steps[:first_from] if keyword == "ARG")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", args["BASE"]), args
    stages = [args.split() for keyword, args in steps if keyword == "FROM"]
    assert stages == [["${BASE}", "AS", "build"], ["${BASE}", "AS", "runtime"]]


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    patterns = dockerignore()
    for path in (".venv/bin/python", ".git/config", "mirrorgate.db", "mirrorgate.yaml",
                 "proxy/__pycache__/app.cpython-311.pyc", "tests/conftest.py"):  # fmt: skip
        assert ignored(path, patterns), path
    assert not ignored("proxy/cli/main.py", patterns)
