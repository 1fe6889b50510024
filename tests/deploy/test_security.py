"""The deploy files read as an attacker on the cluster's network, or code in a pod, would: Ray's token
and where its dashboard listens, what a pod may do, who may connect to it, and what the image holds.
Offline, like test_manifests.py, whose loaders these share."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.deploy.test_manifests import (
    DEPLOY_DIR,
    DOCKERFILE,
    MANIFESTS,
    REPO_ROOT,
    cluster_spec,
    groups,
    load_manifest,
    load_yaml,
)

PART_OF = ("app.kubernetes.io/part-of", "grpo-orchestrator")
CREDENTIALS = {"HF_TOKEN", "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN", "RAY_AUTH_TOKEN"}


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_rays_control_plane_needs_its_token_and_the_dashboard_is_not_on_the_service(kind):
    doc = load_manifest(kind)
    spec = cluster_spec(doc)
    assert spec["authOptions"] == {"mode": "token"}
    host = spec["headGroupSpec"]["rayStartParams"]["dashboard-host"]
    if kind == "RayCluster":  # users reach it through kubectl port-forward, which connects inside the pod
        assert host == "127.0.0.1"
    else:  # the operator submits and watches the job through it: token-guarded, and only it and the pods may connect
        assert doc["spec"]["submissionMode"] == "SidecarMode"
        assert _operator_rule()["ports"] == [{"protocol": "TCP", "port": 8265}]


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_every_pod_runs_unprivileged_with_no_api_token_and_takes_credentials_from_a_secret(kind):
    user = int(re.search(r"^USER\s+(\d+)", DOCKERFILE.read_text(encoding="utf-8"), flags=re.M).group(1))
    for name, group in groups(load_manifest(kind)):
        template = group["template"]
        assert template["metadata"]["labels"][PART_OF[0]] == PART_OF[1], name
        pod = template["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == user != 0, name
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            own = container["securityContext"]
            assert own["allowPrivilegeEscalation"] is False and own["capabilities"]["drop"] == ["ALL"], name
            assert {"secretRef": {"name": "grpo-credentials", "optional": True}} in container["envFrom"], name
            assert not CREDENTIALS & {variable["name"] for variable in container.get("env", [])}, f"{name}: a credential inline"
            resources = container["resources"]
            assert resources["requests"]["ephemeral-storage"] == resources["limits"]["ephemeral-storage"], name
        data = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/data")
        assert data.get("readOnly", False) is (name == "rollout"), f"{name}: /data read-only only where nothing writes"


def _network_policy() -> dict:
    return load_yaml(DEPLOY_DIR / "networkpolicy.yaml")


def _operator_rule() -> dict:
    (rule,) = [rule for rule in _network_policy()["spec"]["ingress"] if "namespaceSelector" in rule["from"][0]]
    return rule


def test_the_network_policy_admits_only_the_clusters_pods_and_the_operators_dashboard_calls():
    policy = _network_policy()
    assert policy["kind"] == "NetworkPolicy" and policy["apiVersion"] == "networking.k8s.io/v1"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": dict([PART_OF])} and spec["policyTypes"] == ["Ingress"]
    own, operator = spec["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": dict([PART_OF])}}]}
    assert operator == _operator_rule()
    assert operator["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}}]
    assert "--namespace kuberay-system" in (DEPLOY_DIR / "README.md").read_text(encoding="utf-8")


def test_the_image_context_is_an_allowlist_of_what_the_project_installs():
    lines = [
        line.strip()
        for line in (DEPLOY_DIR / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the context filter must leave everything out first"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {name.rstrip("*") for name in meta["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", meta["project"]["readme"], *meta["project"]["license-files"], "configs"} <= allowed
    assert not allowed & {".git", ".venv", "runs", ".env"}
