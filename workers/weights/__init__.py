"""Weight sync, one home: how the learner's weights reach every rollout engine.

transport.py is the interface and its report; object_store.py (any cluster) and nccl.py (NCCL, or gloo)
each hold a transport's learner side, engine side and driver-side coordinator; rounds.py ends every
sync by one deadline; buckets.py, staging.py and vllm_worker.py carry the bytes into vLLM's workers;
receiving.py is what an engine does with what arrives, and loading.py its pause -> load -> resume;
delta.py sends only what changed since the engines' last verified weights.
The driver picks a transport in factory.py.
"""
