"""A Ray cluster on this machine whose nodes come and go by Ray's own autoscaler: `ray start --head
--autoscaling-config` with the fake multi-node provider, which starts a raylet on this machine for each
node the autoscaler launches and stops it when the autoscaler terminates the node. This is what
`ray.cluster_utils.AutoscalingCluster` does; that class is not used because the pinned wheel lacks the
example config it reads, and it runs `ray stop --force`, which stops every Ray on the machine (a
test session's own among them). This one stops only its own processes.

The head node hosts the learner (`learner_node`); a rollout node (one CPU, `rollout_node`) is launched
when an engine's placement group waits for one, and removed once idle for `idle_timeout_s`. The head
checks a token of its own (`RAY_AUTH_MODE=token`); `env` carries it and the address to the driver."""

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import ray

from orchestrator.placement.labels import LEARNER_RESOURCE, ROLLOUT_RESOURCE

_WATCH = """
import json, sys, time
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
while True:
    nodes = [n for n in ray.nodes() if n["Alive"] and sys.argv[2] in n["Resources"]]
    print(json.dumps({"time": time.time(), "rollout_nodes": len(nodes)}), flush=True)
    time.sleep(0.5)
"""


class FakeCloud:
    def __init__(self, folder: Path, head_cpus: int, most_rollout_nodes: int, idle_timeout_s: float):
        self.folder = folder
        self.head_cpus = head_cpus
        ip = ray.util.get_node_ip_address()  # the address Ray's own nodes register with
        with socket.socket() as probe:
            probe.bind((ip, 0))
            self.address = f"{ip}:{probe.getsockname()[1]}"
        token = folder / "token"
        token.write_text(secrets.token_hex(32))
        self.env = {
            **os.environ,
            "RAY_ADDRESS": self.address,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
        }
        self.config = {
            "cluster_name": "fake-cloud",
            "max_workers": most_rollout_nodes,
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
                "gcs_address": self.address,
            },
            "available_node_types": {
                "ray.head.default": {"resources": {"CPU": head_cpus, LEARNER_RESOURCE: 1}, "node_config": {}, "max_workers": 0},
                "rollout": {
                    "resources": {"CPU": 1, ROLLOUT_RESOURCE: 1},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": most_rollout_nodes,
                },
            },
            "head_node_type": "ray.head.default",
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": idle_timeout_s / 60,
            **{key: [] for key in ("initialization_commands", "setup_commands", "head_setup_commands")},
            **{key: [] for key in ("worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")},
            **{"auth": {}, "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "rsync_exclude": [], "rsync_filter": []},
            "file_mounts_sync_continuously": False,
        }
        self.watcher = None

    def start(self) -> None:
        config = self.folder / "autoscaling.json"
        config.write_text(json.dumps(self.config))
        port = self.address.rsplit(":", 1)[1]
        started = subprocess.run(
            [self._ray(), "start", "--head", f"--port={port}", f"--autoscaling-config={config}",
             f"--num-cpus={self.head_cpus}", f"--resources={json.dumps({LEARNER_RESOURCE: 1})}",
             "--include-dashboard=false", "--disable-usage-stats"],
            check=False, timeout=120, capture_output=True, text=True,
            env={**self.env, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"},
        )  # fmt: skip
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]

    def watch(self) -> Path:
        """Starts recording, every half second, how many rollout nodes are alive; returns the file (JSON lines)."""
        log = self.folder / "nodes.jsonl"
        with open(log, "w") as out:
            self.watcher = subprocess.Popen(
                [sys.executable, "-c", _WATCH, self.address, ROLLOUT_RESOURCE],
                stdout=out,
                stderr=subprocess.DEVNULL,
                env=self.env,
            )
        return log

    def shutdown(self) -> None:
        """Kills this cluster's processes: those naming its address or its GCS port, and everything they started."""
        if self.watcher is not None:
            self.watcher.kill()
        marks = (self.address, f"--gcs_server_port={self.address.rsplit(':', 1)[1]}")
        ours = [p for p in psutil.process_iter(["cmdline"]) if any(mark in " ".join(p.info["cmdline"] or []) for mark in marks)]
        for process in {child for p in ours for child in _descendants(p)} | set(ours):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(ours, timeout=10)

    def _ray(self) -> str:
        return str(Path(sys.executable).parent / "ray")


def _descendants(process) -> list:
    try:
        return process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
