"""Agent sessions: each engine's OpenAI-compatible gateway and the user's agent programs that call it."""
