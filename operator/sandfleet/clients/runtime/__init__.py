"""RuntimeClient (client) over the runtime agent's gRPC services: its rollout calls (rollouts),
the translation of gRPC failures (calls) and the results it returns (results)."""
