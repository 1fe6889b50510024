"""TRL's tool calling (`tools: [file.py:fn]`, `environment_factory`) on the engines."""
