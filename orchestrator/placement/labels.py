"""The names that tie cluster nodes to the roles they play in a run.

Rollout engines (one vLLM engine each) and the learner run on different
nodes, so that rollout capacity can grow or shrink without touching the
learner. Nodes say which role they serve in two ways:

* **Ray node labels** (Ray 2.49 and later): a node started with
  ``ray start --labels role=rollout`` carries the label ``role=rollout``, and
  an actor created with ``label_selector={ROLE_LABEL: ROLLOUT_ROLE}`` is only
  ever placed there. The Ray autoscaler (v2) also adds nodes from the matching
  worker group when such an actor is waiting. This is the primary mechanism.
* **Custom resources** (the fallback for older clusters without labels): the
  same node also advertises one unit of ``rollout_node``
  (``ray start --resources '{"rollout_node": 1}'``). The resource marks the
  node rather than counting anything, so an actor asks for a small fraction
  of it and any number of actors can share one node.

The KubeRay manifests in ``deploy/`` and the bare-metal instructions in
``deploy/README.md`` use exactly these names; ``tests/deploy`` checks that
they agree with this module, so change a name here and nowhere else.
"""

ROLE_LABEL = "role"
"""Node label key whose value is the role the node serves."""

ROLLOUT_ROLE = "rollout"
"""Label value of nodes that host rollout engines."""

LEARNER_ROLE = "learner"
"""Label value of nodes that host the learner."""

REWARD_ROLE = "reward"
"""Label value of nodes that host the reward-model workers (orchestrator/rewards/models.py)."""

ROLLOUT_RESOURCE = "rollout_node"
"""Custom resource advertised (1 unit) by rollout nodes: the label fallback."""

LEARNER_RESOURCE = "learner_node"
"""Custom resource advertised (1 unit) by learner nodes: the label fallback."""
