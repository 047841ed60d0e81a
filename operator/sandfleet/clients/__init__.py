"""The SDK's gRPC clients, its only users of grpc: the runtime client (runtime/: one sandbox's
runtime agent, directly or through the gateway's proxy) and the gateway client (gateway/:
claims, connects and releases, and where the gateway and the caller's token come from).
Import the public names from `sandfleet`; these modules are internal."""
