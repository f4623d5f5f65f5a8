"""The user's own ``gui`` package: the name every RL / LLM-agent project uses; Ringscope must not take it."""

OWNER = "user-project"
