"""The SDK's backends, each opening sandboxes behind sandfleet.sandbox.backend's interface:
local/ (embedded: runtime agent processes in namespaces on this machine), gateway (claims
through the sandfleet gateway) and direct (SandboxSessions made with the caller's own
Kubernetes rights). They know nothing of each other nor of the Sandbox classes."""
