{{- /*
The operator's permissions: exactly the rules of manifests/rbac/cluster-role.yaml, in the same
order (a unit test renders this chart and compares). Called with a dict:
  clusterwide: true  -> all of them, for the ClusterRole;
  clusterwide: false -> the namespaced ones, for a Role in each served namespace (no CRD or
                        namespace discovery and no ClusterKopfPeering: kopf works without
                        them when it is given its namespaces by name);
  reviews: true      -> the two review rules, alone when clusterwide is false (cluster-scoped
                        kinds: only a ClusterRole grants them).
*/}}
{{- define "sandfleet.operator.rules" -}}
{{- if or .clusterwide (not .reviews) }}
# The custom resources: watched by kopf, patched for finalizers and kopf's progress annotations.
- apiGroups: [sandfleet.dev]
  resources: [sandboxsessions, sandboxpools, sandboxtemplates]
  verbs: [get, list, watch, patch]
# ttlSecondsAfterFinished: a finished session is deleted by the operator.
- apiGroups: [sandfleet.dev]
  resources: [sandboxsessions]
  verbs: [delete]
# Status (phase, conditions, pool counts) is written only through the status subresource.
- apiGroups: [sandfleet.dev]
  resources: [sandboxsessions/status, sandboxpools/status]
  verbs: [get, patch]
# Owner references with blockOwnerDeletion on pods, Secrets and NetworkPolicies need update on
# the owner's finalizers subresource (the OwnerReferencesPermissionEnforcement admission check).
- apiGroups: [sandfleet.dev]
  resources: [sandboxsessions/finalizers, sandboxpools/finalizers]
  verbs: [update]
# Sandbox pods: created cold or warm, watched for readiness and loss, patched by a claim,
# deleted on reclaim.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
# Runtime token Secrets; get also reads apiKeySecretRef and files[].secretKeyRef, used only
# when labelled sandfleet.dev/model-credentials / session-files=true (RBAC cannot select by
# label: the operator checks it on the object it read).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, create, delete]
# files[].configMapKeyRef: read at bind time, used only when labelled session-files=true.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
# One NetworkPolicy per session and pool; listed by the orphan sweep.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, create, delete]
# Kubernetes events on phase transitions (core and events.k8s.io).
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if .clusterwide }}
# kopf peering (active/standby replicas); the peering object is created by this chart.
- apiGroups: [kopf.dev]
  resources: [kopfpeerings, clusterkopfpeerings]
  verbs: [get, list, watch, patch]
# kopf scans the CRDs to resolve the resources it serves and notices when they appear.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
# kopf discovers the namespaces to serve (cluster-wide operation) and follows new ones.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- else }}
# kopf peering in a served namespace (KopfPeering objects created by this chart).
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}
{{- if .reviews }}
# Who asks the HTTP port for a trajectory or /metrics: the bearer token's TokenReview.
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
# May they: a SubjectAccessReview (get sandboxsessions in the namespace, get /metrics).
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}
{{- end }}
