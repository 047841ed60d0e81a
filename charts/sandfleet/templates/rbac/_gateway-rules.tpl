{{- /*
The gateway's permissions: exactly the rules of manifests/rbac/gateway-cluster-role.yaml, in
the same order (a unit test renders this chart and compares). Least privilege: each rule is
one thing the gateway does. Called with a dict:
  reviews: true     -> the two review rules (cluster-scoped kinds: only a ClusterRole grants
                       them; they let the gateway ask questions, not read or change objects);
  namespaced: true  -> the rules on objects in the served namespaces.
*/}}
{{- define "sandfleet.gateway.rules" -}}
{{- if .reviews }}
# Who is calling: a tenant's bearer token is checked with a TokenReview.
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
# May they: a SubjectAccessReview (create, delete or patch sandboxsessions in the namespace).
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}
{{- if .namespaced }}
# Pool pods: watched for the idle-pod index, claimed by one precondition patch, deleted when a
# claim fails after the patch (the pool refills).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
# Sessions: watched for their pods' addresses, created once per claim, deleted on release,
# patched (spec.suspend) to suspend one (Suspend) and to resume it (Connect, on access).
- apiGroups: [sandfleet.dev]
  resources: [sandboxsessions]
  verbs: [get, list, watch, create, patch, delete]
# Pools and templates: what a claim names.
- apiGroups: [sandfleet.dev]
  resources: [sandboxpools, sandboxtemplates]
  verbs: [get, list, watch]
# Pool token Secrets (binding a claimed warm pod) and the token Secrets of cold claims.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
{{- end }}
