"""helm/mirrorgate: linted and rendered by real Helm (helm-python-sdk, Helm 4 inside), every
manifest validated against the Kubernetes schemas (kubernetes-validate, offline), the rendered
config checked by `mirrorgate check-config`, the PrometheusRule's groups by promtool."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from proxy.cli.main import main
from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mirrorgate"
KUBE_VERSIONS = ("1.25.0", "1.37.0")
"""The oldest and newest Kubernetes releases kubernetes-validate has schemas for."""
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
"""prometheus-operator kinds: no schema offline (the PrometheusRule is checked by promtool)."""
POSTGRES = {"config": {"store": {"url": "postgresql+psycopg://mirrorgate@db/mirrorgate"}}}
MONITORING = {
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
}


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: the same documents as `yaml.safe_load_all`, twenty
times faster on the ~1 MB a render makes (the dashboards' ConfigMap)."""


@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads and parses a kind's schema and the ~1 MB of shared definitions
    from its files on every `validate` (~5 ms each): here each file is read once per module. The
    validator only reads what it gets, and the files do not change."""
    with pytest.MonkeyPatch.context() as patch:
        cached = functools.cache(kubernetes_validate.utils.schema_contents)
        patch.setattr(kubernetes_validate.utils, "schema_contents", cached)
        yield


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    helm_python.disable_logging()
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The manifests Helm renders (NOTES.txt aside), each parsed as YAML."""
    out = chart.render(values or {}, name="shop", namespace="prod")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.load_all(text, Loader=SAFE_LOADER) if doc)
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def validate(docs: list[dict[str, Any]]) -> None:
    """Every non-CRD manifest against the Kubernetes schemas, unknown fields refused."""
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def gateway_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "mirrorgate"]
    return container


# --- lint and render -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [{}, {"mode": "sidecar"}, {**POSTGRES, **MONITORING, "autoscaling": {"enabled": True}}],
    ids=["defaults", "sidecar", "everything-on"],
)
def test_chart_lints_strict(values: dict[str, Any]) -> None:
    for version in KUBE_VERSIONS:
        report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{version}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == [] and problems == [], report


def test_defaults_render_a_standalone_gateway(chart: helm_python.Chart) -> None:
    docs = render(chart)
    validate(docs)
    kinds = by_kind(docs)
    assert sorted(kinds) == [
        "ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceAccount",
    ]  # fmt: skip
    assert len(kinds["ConfigMap"]) == 2  # the config and the dashboards
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    container = gateway_container(deployment["spec"]["template"]["spec"])
    assert container["image"] == f"mirrorgate:{chart.metadata['appVersion']}"
    assert container["args"] == ["serve", "--config", "/etc/mirrorgate/mirrorgate.yaml"]
    service = one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_probes_resources_and_restricted_security(chart: helm_python.Chart) -> None:
    docs = render(chart)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = gateway_container(pod)
    port = container["ports"][0]["name"]
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    # The only writable paths are emptyDirs: the SQLite file's folder, the journal and /tmp.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/data"]] and "emptyDir" in volumes[mounts["/tmp"]]
    journal = "/var/lib/mirrorgate/journal"  # outlives a container restart (an OOM kill)
    assert "emptyDir" in volumes[mounts[journal]]
    config = yaml.safe_load(one(docs, "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"])
    assert config["store"]["journal_dir"] == journal
    assert volumes[mounts["/etc/mirrorgate"]]["configMap"]["name"] == "shop-mirrorgate"


def test_standalone_with_autoscaling_renders_an_hpa(chart: helm_python.Chart) -> None:
    docs = render(chart, {**POSTGRES, "autoscaling": {"enabled": True, "maxReplicas": 4}})
    validate(docs)
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    assert hpa["spec"]["maxReplicas"] == 4
    assert "replicas" not in one(docs, "Deployment")["spec"]  # the HPA owns it
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_several_replicas_on_sqlite_are_refused(chart: helm_python.Chart) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"config\.store\.url"):
        chart.render({"replicaCount": 3}, name="shop", namespace="prod")


def test_provider_keys_and_admin_token_come_from_existing_secrets(
    chart: helm_python.Chart,
) -> None:
    values = {
        "secretEnv": {
            "OPENAI_API_KEY": {"secretName": "llm-keys", "key": "openai"},
            "ANTHROPIC_API_KEY": {"secretName": "llm-keys", "key": "anthropic"},
        },
        "adminToken": {"secretName": "gw-admin", "key": "token", "env": "GW_TOKEN"},
    }
    docs = render(chart, values)
    assert "Secret" not in by_kind(docs)  # never created by the chart
    env = {
        e["name"]: e
        for e in gateway_container(one(docs, "Deployment")["spec"]["template"]["spec"])["env"]
    }
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "llm-keys",
        "key": "openai",
    }
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "anthropic"
    assert env["GW_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "gw-admin", "key": "token"}
    config = yaml.safe_load(one(docs, "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"])
    assert config["server"]["admin_token_env"] == "GW_TOKEN"


# --- the config the chart renders ----------------------------------------------------------------


@dataclass(frozen=True)
class CheckConfigResult:
    returncode: int
    stdout: str
    stderr: str


CheckConfig = Callable[[str, dict[str, str]], CheckConfigResult]


@pytest.fixture
def check_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CheckConfig:
    """`mirrorgate check-config` (in process) on a config text, with only the given variables
    among the provider keys: what a pod with just its Secrets would see."""

    def run(text: str, env: dict[str, str]) -> CheckConfigResult:
        path = tmp_path / "mirrorgate.yaml"
        path.write_text(text)
        for name in [k for k in os.environ if k.endswith("_API_KEY")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = main(["check-config", str(path)])
        out, err = capsys.readouterr()
        return CheckConfigResult(code, out, err)

    return run


def test_rendered_config_passes_check_config(
    chart: helm_python.Chart, check_config: CheckConfig
) -> None:
    docs = render(chart)
    text = one(docs, "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"]
    config = yaml.safe_load(text)
    assert config["server"]["host"] == "0.0.0.0" and config["server"]["port"] == 8080
    # State-changing admin calls through the Service's DNS name are answered (Host check).
    assert config["server"]["allowed_hosts"] == [
        "shop-mirrorgate", "shop-mirrorgate.prod", "shop-mirrorgate.prod.svc",
        "shop-mirrorgate.prod.svc.cluster.local",
    ]  # fmt: skip
    # The container gets every variable the config names, as the pod would from its Secrets.
    container = gateway_container(one(docs, "Deployment")["spec"]["template"]["spec"])
    given = {e["name"] for e in container["env"]}
    needed = {m["api_key_env"] for m in config["models"].values() if m.get("api_key_env")}
    assert needed | {config["server"]["admin_token_env"]} <= given
    result = check_config(text, {name: "from-a-secret" for name in given})
    assert result.returncode == 0, result.stderr
    assert "ok (1 models, 1 routes, 0 rules)" in result.stdout


def test_a_bad_config_value_is_named_by_check_config(
    chart: helm_python.Chart, check_config: CheckConfig
) -> None:
    values = {"config": {"routes": {"default": {"primary": "no-such-model"}}}}
    text = one(render(chart, values), "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"]
    result = check_config(text, {"OPENAI_API_KEY": "k", "MIRRORGATE_ADMIN_TOKEN": "t"})
    assert result.returncode == 1
    assert "routes.default.primary: model 'no-such-model' is not defined" in result.stderr


def test_your_allowed_hosts_are_kept_beside_the_service_names(chart: helm_python.Chart) -> None:
    values = {"config": {"server": {"allowed_hosts": ["gw.example.org"]}}}
    text = one(render(chart, values), "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"]
    hosts = yaml.safe_load(text)["server"]["allowed_hosts"]
    assert hosts[0] == "gw.example.org" and "shop-mirrorgate.prod.svc" in hosts


def test_config_changes_roll_the_pods(chart: helm_python.Chart) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = one(render(chart, values), "Deployment")
        return str(
            deployment["spec"]["template"]["metadata"]["annotations"]["checksum/mirrorgate-config"]
        )

    text = one(render(chart), "ConfigMap", "shop-mirrorgate")["data"]["mirrorgate.yaml"]
    assert checksum({}) == hashlib.sha256(text.rstrip("\n").encode()).hexdigest()
    assert checksum({}) == checksum({})
    assert checksum({"config": {"store": {"retention_days": 30}}}) != checksum({})


# --- monitoring ----------------------------------------------------------------------------------


def test_monitoring_objects_are_off_by_default(chart: helm_python.Chart) -> None:
    assert not CRD_KINDS & set(by_kind(render(chart)))


def test_service_monitor_and_prometheus_rule(chart: helm_python.Chart, tmp_path: Path) -> None:
    docs = render(chart, MONITORING)
    validate(docs)
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"] == one(docs, "Service")["spec"]["selector"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == one(docs, "Service")["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "mirrorgate"}]

    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    source = yaml.safe_load((ROOT / "prometheus" / "mirrorgate-rules.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    promtool = shutil.which("promtool")
    require_service("promtool", promtool is not None, "apt-get install prometheus")
    assert promtool is not None
    path = tmp_path / "from-chart.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_runbook_links_can_point_at_your_copy(chart: helm_python.Chart) -> None:
    values = {"prometheusRule": {"enabled": True, "runbookBaseUrl": "https://git.example/ops/"}}
    rule = one(render(chart, values), "PrometheusRule")
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert urls and all(u.startswith("https://git.example/ops/docs/runbook.md#") for u in urls)


@pytest.mark.parametrize("labels", [{}, None], ids=["empty", "null"])
def test_service_monitor_without_labels_is_still_valid(
    chart: helm_python.Chart, labels: dict[str, str] | None
) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": labels}}}
    out = chart.render(values, name="shop", namespace="prod")
    (text,) = [t for p, t in out.items() if p.endswith("servicemonitor.yaml")]
    monitor = yaml.safe_load(text)  # parses: no dangling key, no empty mapping
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/name"] == "mirrorgate"
    assert all(isinstance(v, str) for v in monitor["metadata"]["labels"].values())


def test_dashboards_ship_as_a_grafana_sidecar_configmap(chart: helm_python.Chart) -> None:
    configmap = one(render(chart), "ConfigMap", "shop-mirrorgate-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboards = ROOT / "grafana" / "dashboards"
    assert sorted(configmap["data"]) == sorted(p.name for p in dashboards.glob("*.json"))
    for name, text in configmap["data"].items():
        assert text == (dashboards / name).read_text()
        assert json.loads(text)["uid"].startswith("mirrorgate-")


def test_chart_files_are_the_repository_sources() -> None:
    # One source of truth: the chart's copies are links to prometheus/ and grafana/.
    rules = CHART / "files" / "mirrorgate-rules.yml"
    assert rules.is_symlink() and (CHART / "dashboards").is_symlink()
    assert rules.read_bytes() == (ROOT / "prometheus" / "mirrorgate-rules.yml").read_bytes()
    for path in (ROOT / "grafana" / "dashboards").glob("*.json"):
        assert (CHART / "dashboards" / path.name).read_bytes() == path.read_bytes()


# --- sidecar mode --------------------------------------------------------------------------------

APP_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      annotations:
        {{- include "mirrorgate.sidecar.podAnnotations" .Subcharts.mirrorgate | nindent 8 }}
      labels:
        app: shop
        {{- include "mirrorgate.sidecar.podLabels" .Subcharts.mirrorgate | nindent 8 }}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: app
          image: shop:1.0
          env:
            - {name: OPENAI_BASE_URL, value: "http://127.0.0.1:8080/v1"}
        {{- include "mirrorgate.sidecar.container" .Subcharts.mirrorgate | nindent 8 }}
      volumes:
        - {name: cache, emptyDir: {}}
        {{- include "mirrorgate.sidecar.volumes" .Subcharts.mirrorgate | nindent 8 }}
"""


@pytest.fixture(scope="module")
def app_chart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[helm_python.Chart]:
    """An application's chart with mirrorgate as a dependency in sidecar mode (docs/helm.md)."""
    folder = tmp_path_factory.mktemp("app-chart") / "shop"
    (folder / "templates").mkdir(parents=True)
    (folder / "Chart.yaml").write_text(
        "apiVersion: v2\nname: shop\nversion: 1.0.0\n"
        "dependencies:\n  - {name: mirrorgate, version: 0.1.0}\n"
    )
    (folder / "values.yaml").write_text(
        yaml.safe_dump({"mirrorgate": {"mode": "sidecar", **POSTGRES, **MONITORING}})
    )
    (folder / "templates" / "deployment.yaml").write_text(APP_DEPLOYMENT)
    shutil.copytree(CHART, folder / "charts" / "mirrorgate", symlinks=False)
    with helm_python.Chart.load(folder) as loaded:
        yield loaded


def test_sidecar_mode_renders_no_workload_of_its_own(chart: helm_python.Chart) -> None:
    docs = render(chart, {"mode": "sidecar"})
    validate(docs)
    assert sorted(by_kind(docs)) == ["ConfigMap"]


def test_sidecar_templates_add_the_gateway_to_an_application_pod(
    app_chart: helm_python.Chart,
) -> None:
    docs = render(app_chart)
    validate(docs)
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "shop-shop"  # the application's own
    pod = deployment["spec"]["template"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app", "mirrorgate"]
    gateway = gateway_container(pod["spec"])
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {m["name"] for m in gateway["volumeMounts"]} <= volumes
    config = one(docs, "ConfigMap", "shop-mirrorgate")
    config_volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "mirrorgate-config")
    assert config_volume["configMap"]["name"] == config["metadata"]["name"]
    assert "checksum/mirrorgate-config" in pod["metadata"]["annotations"]
    # The PodMonitor selects exactly the pods that carry the sidecar.
    monitor = one(docs, "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == gateway["ports"][0]["name"]
    assert not {"Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} & set(by_kind(docs))


# --- bad values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values_file", "where"),
    [
        ("replicaCount: three\n", "/replicaCount"),
        ("service:\n  port: http\n", "/service/port"),
        (
            "metrics:\n  serviceMonitor:\n    enabled: yes please\n",
            "/metrics/serviceMonitor/enabled",
        ),
        ("mode: daemonset\n", "/mode"),
        ("replicas: 3\n", "replicas"),  # a typo of replicaCount
    ],
)
def test_a_values_file_with_a_wrong_value_is_rejected_naming_the_key(
    chart: helm_python.Chart, values_file: str, where: str
) -> None:
    values = helm_python.values_from_yaml(values_file)  # as `helm install -f FILE` reads it
    with pytest.raises(helm_python.HelmValuesError, match=where):
        chart.validate_schema(values)
    with pytest.raises(helm_python.HelmValuesError, match=where):
        chart.render(values, name="shop", namespace="prod")
