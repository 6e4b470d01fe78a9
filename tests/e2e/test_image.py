"""The container image, built from the repository's Dockerfile and run: buildah builds it on a
local Debian base (scripts/image_base.sh; no registry here), podman runs it in a pod whose ports
are published on 127.0.0.1 only, next to `mirrorgate mock-upstream` from the same image.

What a user of `docker run -p` relies on: the gateway answers through the published port (so it
listens on the container's interface, not its loopback), proxies to the model, runs as uid 10001,
and refuses to start without the admin token that listening on 0.0.0.0 requires.

Slow (the first run debootstraps the base, a build installs the distribution from PyPI): marked
`image`; skipped without podman and buildah, failed under MIRRORGATE_REQUIRE_SERVICES=1."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import require_service, wait_until
from tests.e2e.conftest import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.image]

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("MIRRORGATE_BASE_IMAGE", "localhost/mirrorgate-base:bookworm")
IMAGE = "localhost/mirrorgate:image-test"
TOKEN = "image-test-admin-t0ken"
UID = 10001
# The mock listens on the pod's loopback: only the gateway, in the same pod, reaches it.
MOCK_PORT = 9999
CONFIG = {
    "models": {
        "echo": {
            "provider": "openai",
            "base_url": f"http://127.0.0.1:{MOCK_PORT}/v1",
            "model": "echo",
        }
    },
    "routes": {"echo": {"primary": "echo"}},
}


# How podman and buildah run on a CI machine like this one (itself a container), each a
# documented option (docs/container.md, "On a machine without a container engine"):
# - runc: crun refuses the cgroup layout here (v1 controllers beside an empty v2 hierarchy,
#   "cgroups in hybrid mode not supported");
# - explicit rlimits: podman's rootful defaults (nofile 1048576, nproc 4194304) are above the
#   hard limits, which a process without CAP_SYS_RESOURCE cannot raise;
# - slirp4netns for the pod: netavark's bridge needs iptables and, to publish a port, turns on
#   the host's IP forwarding and adds NAT rules to its firewall, on a machine others share;
#   slirp4netns changes nothing on the host, publishes on 127.0.0.1 and delivers to the
#   container's interface (never its loopback), so the published port still proves the 0.0.0.0
#   listener;
# - the build's RUN steps in a chroot (OCI isolation would want a netavark network too), with
#   the host's CA bundle mounted (not committed into the image): PyPI is reached through a
#   TLS-inspecting proxy whose CA only the host trusts.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
POD_NETWORK = "slirp4netns:port_handler=slirp4netns"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_ENV: dict[str, str] = {}


def run(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout_s, check=False,
        env={**os.environ, **_ENV},
    )  # fmt: skip


def checked(*args: str, timeout_s: float = 120) -> str:
    result = run(*args, timeout_s=timeout_s)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Dockerfile built on the local base (made first when missing); its name."""
    for tool in ("podman", "buildah", "runc", "slirp4netns", "debootstrap"):
        require_service(tool, shutil.which(tool) is not None, "see .ci/run for the packages")
    conf = tmp_path_factory.mktemp("containers") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    _ENV.update(CONTAINERS_CONF=str(conf), MIRRORGATE_BASE_IMAGE=BASE)
    checked(str(ROOT / "scripts" / "image_base.sh"), timeout_s=1200)
    iidfile = conf.parent / "image-id"
    checked(
        "buildah", "bud", "--layers", "--isolation", "chroot", "--iidfile", str(iidfile),
        "--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
        "--build-arg", f"BASE={BASE}", "--tag", IMAGE,
        "--file", str(ROOT / "Dockerfile"), str(ROOT),
        timeout_s=900,
    )  # fmt: skip
    # Run by ID: another checkout building at the same time may move the tag meanwhile.
    yield iidfile.read_text().strip()
    _ENV.clear()


class Pod:
    """A podman pod with the gateway's and the mock's ports published on 127.0.0.1."""

    def __init__(self, config: Path) -> None:
        self.name = f"mirrorgate-image-test-{uuid.uuid4().hex[:8]}"
        self.config = config
        self.port = free_port()
        self.mock_port = free_port()
        checked(
            "podman", "pod", "create", "--name", self.name, "--network", POD_NETWORK,
            "--publish", f"127.0.0.1:{self.port}:8080",
            "--publish", f"127.0.0.1:{self.mock_port}:{MOCK_PORT}",
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, name: str, *args: str) -> str:
        container = f"{self.name}-{name}"
        checked("podman", "run", "--detach", "--pod", self.name, "--name", container, *args)
        return container

    def logs(self, container: str) -> str:
        result = run("podman", "logs", container)
        return result.stdout + result.stderr

    def remove(self) -> None:
        run("podman", "pod", "rm", "--force", "--time", "5", self.name)


def get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return None


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "mirrorgate.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    path.chmod(0o644)  # read by uid 10001 inside
    return path


@pytest.fixture
def pod(config_file: Path) -> Iterator[Pod]:
    created = Pod(config_file)
    yield created
    created.remove()


def test_the_image_serves_proxies_and_runs_as_non_root_on_all_interfaces(
    image: str, pod: Pod
) -> None:
    mock = pod.start("mock", image, "mock-upstream", "--host", "0.0.0.0", "--port", str(MOCK_PORT))
    wait_until(
        lambda: (r := get(f"http://127.0.0.1:{pod.mock_port}/_mock/stats")) and r.is_success,
        timeout_s=60,
        what=f"the mock in the image:\n{pod.logs(mock)}",
    )
    # The image's own command: `serve --config /etc/mirrorgate/mirrorgate.yaml --host 0.0.0.0`.
    gateway = pod.start(
        "gateway",
        "--volume", f"{pod.config}:/etc/mirrorgate/mirrorgate.yaml:ro",
        "--env", f"MIRRORGATE_ADMIN_TOKEN={TOKEN}",
        image,
    )  # fmt: skip
    health = wait_until(
        lambda: (r := get(pod.url + "/healthz")) and r.status_code == 200 and r,
        timeout_s=60,
        what=f"/healthz through the published port:\n{pod.logs(gateway)}",
    )
    assert health.status_code == 200

    answer = httpx.post(
        pod.url + "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "hello from podman"}]},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"].startswith(
        "You said: hello from podman"
    )
    assert answer.headers["x-mirrorgate-request-id"]

    # Non-root: the user the image sets, and the gateway process (PID 1) itself.
    assert checked("podman", "exec", gateway, "id", "-u").strip() == str(UID)
    status = checked("podman", "exec", gateway, "cat", "/proc/1/status")
    (uids,) = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
    assert uids == [str(UID)] * 4
    # Listening on 0.0.0.0:8080 inside (0A is LISTEN in /proc/net/tcp).
    sockets = checked("podman", "exec", gateway, "cat", "/proc/net/tcp").splitlines()[1:]
    listening = {line.split()[1] for line in sockets if line.split()[3] == "0A"}
    assert "00000000:1F90" in listening, listening
    # ... which is why the admin API wants the token.
    assert httpx.get(pod.url + "/admin/routes", timeout=10).status_code == 401
    authorised = httpx.get(
        pod.url + "/admin/routes", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert authorised.status_code == 200, authorised.text
    assert "echo" in authorised.text


def test_without_the_admin_token_the_image_refuses_to_start(image: str, config_file: Path) -> None:
    result = run(
        "podman", "run", "--rm", "--network", "none",
        "--volume", f"{config_file}:/etc/mirrorgate/mirrorgate.yaml:ro",
        image,
        timeout_s=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "server.admin_token_env: MIRRORGATE_ADMIN_TOKEN must be set when listening on 0.0.0.0"
        in result.stderr
    ), result.stderr
