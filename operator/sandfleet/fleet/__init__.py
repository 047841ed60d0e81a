"""The shared cluster layer, below both the operator and the gateway: object names, the pod,
Secret and claim builders, pool and template plans, the pod index, status conditions and the
SandboxSession bodies and reads. It speaks Kubernetes (sandfleet.kube) in the resource
vocabulary (sandfleet.api) and imports neither of its users (import contract
`fleet-below-operator-and-gateway`)."""
