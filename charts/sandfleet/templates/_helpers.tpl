{{- /*
Names, labels and the small decisions several templates share. Names are made here only, so
that the operator's settings (its Service, its pod labels, the peering object) always name
what the chart actually created.
*/}}

{{- define "sandfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /*
The prefix of every object name. Release "sandfleet" gives "sandfleet", so the operator's
Service is "sandfleet-operator" as `sandfleet trajectory` expects by default; release "prod"
gives "prod-sandfleet". Cut to 47 characters: the longest suffix added is "-binpack-scheduler"
(16) and names of Deployments' pods must stay within 63.
*/}}
{{- define "sandfleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := include "sandfleet.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sandfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Labels of every object; call with the root context. */}}
{{- define "sandfleet.labels" -}}
helm.sh/chart: {{ include "sandfleet.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandfleet
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sandfleet.operator.name" -}}
{{- printf "%s-operator" (include "sandfleet.fullname" .) }}
{{- end }}

{{- /*
The operator pods' selector labels. The operator is told them (operator_pod_labels): every
sandbox's NetworkPolicy admits ingress only from pods with exactly these labels in the release
namespace, so they must not drift from the pod template's labels.
*/}}
{{- define "sandfleet.operator.selectorLabels" -}}
app.kubernetes.io/name: sandfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandfleet.operator.labels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet-operator
app.kubernetes.io/component: operator
{{- end }}

{{- /* Labels of the objects the chart puts into tenant namespaces; add a component. */}}
{{- define "sandfleet.tenantLabels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet
{{- end }}

{{- define "sandfleet.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "sandfleet.operator.name" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sandfleet.operator.image" -}}
{{- $image := .Values.operator.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{- /* "true" when the operator serves every namespace (ClusterRole mode), "" otherwise. */}}
{{- define "sandfleet.clusterwide" -}}
{{- if not .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{- /* kopf's peering name: set only with more than one replica (standalone otherwise). */}}
{{- define "sandfleet.peeringName" -}}
{{- if gt (int .Values.operator.replicas) 1 }}{{ include "sandfleet.fullname" . }}{{ end }}
{{- end }}

{{- /*
The tenants as a YAML list, each with every key set: the default template and pool go to each
of them. Without tenants: the served namespaces (namespace-scoped mode), else the release
namespace (no editors bound).
*/}}
{{- define "sandfleet.tenants" -}}
{{- $tenants := list }}
{{- range .Values.tenants }}
{{- $tenants = append $tenants (dict
    "namespace" .namespace
    "runtimeClassName" (default $.Values.template.runtimeClassName .runtimeClassName)
    "egress" (default $.Values.template.egress .egress)
    "poolReplicas" (default $.Values.pool.replicas .poolReplicas)
    "sessionEditors" (default list .sessionEditors)) }}
{{- end }}
{{- if not $tenants }}
{{- range (.Values.operator.watchNamespaces | default (list .Release.Namespace)) }}
{{- $tenants = append $tenants (dict
    "namespace" .
    "runtimeClassName" $.Values.template.runtimeClassName
    "egress" $.Values.template.egress
    "poolReplicas" $.Values.pool.replicas
    "sessionEditors" list) }}
{{- end }}
{{- end }}
{{- with .Values.operator.watchNamespaces }}
{{- range $tenants }}
{{- if not (has .namespace $.Values.operator.watchNamespaces) }}
{{- fail (printf "tenant namespace %s is not in operator.watchNamespaces: the operator would never serve its sessions" .namespace) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $tenants }}
{{- end }}

{{- define "sandfleet.sandboxImage" -}}
{{- printf "%s:%s" .Values.sandboxes.image.repository (default .Chart.AppVersion .Values.sandboxes.image.tag) }}
{{- end }}

{{- define "sandfleet.trajectoryClaimName" -}}
{{- if eq .Values.trajectoryStore.type "existingClaim" }}
{{- required "trajectoryStore.existingClaim is required with trajectoryStore.type existingClaim" .Values.trajectoryStore.existingClaim }}
{{- else }}
{{- printf "%s-trajectories" (include "sandfleet.fullname" .) }}
{{- end }}
{{- end }}

{{- define "sandfleet.snapshotClaimName" -}}
{{- if eq .Values.snapshots.volume.type "existingClaim" }}
{{- required "snapshots.volume.existingClaim is required with snapshots.volume.type existingClaim" .Values.snapshots.volume.existingClaim }}
{{- else }}
{{- printf "%s-snapshots" (include "sandfleet.fullname" .) }}
{{- end }}
{{- end }}

{{- define "sandfleet.gateway.name" -}}
{{- printf "%s-gateway" (include "sandfleet.fullname" .) }}
{{- end }}

{{- /*
The gateway pods' selector labels. The operator is told them (gateway_pod_labels): every
sandbox's NetworkPolicy admits ingress on the runtime port from these pods too.
*/}}
{{- define "sandfleet.gateway.selectorLabels" -}}
app.kubernetes.io/name: sandfleet-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandfleet.gateway.labels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet-gateway
app.kubernetes.io/component: gateway
{{- end }}

{{- define "sandfleet.gateway.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- default (include "sandfleet.gateway.name" .) .Values.gateway.serviceAccount.name }}
{{- else }}
{{- required "gateway.serviceAccount.name is required when gateway.serviceAccount.create is false" .Values.gateway.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* The gateway runs from the operator image unless told otherwise (same package). */}}
{{- define "sandfleet.gateway.image" -}}
{{- $op := .Values.operator.image }}
{{- $gw := .Values.gateway.image }}
{{- $repository := default $op.repository $gw.repository }}
{{- $digest := ternary $gw.digest $op.digest (or (not (empty $gw.repository)) (not (empty $gw.digest)) (not (empty $gw.tag))) }}
{{- if $digest }}
{{- printf "%s@%s" $repository $digest }}
{{- else }}
{{- printf "%s:%s" $repository (default (default .Chart.AppVersion $op.tag) $gw.tag) }}
{{- end }}
{{- end }}

{{- /* The Secret holding the session key (key "session-key"). */}}
{{- define "sandfleet.sessionKeySecretName" -}}
{{- default (printf "%s-session-key" (include "sandfleet.fullname" .)) .Values.sessionKey.existingSecret }}
{{- end }}

{{- /* Where the operator and the gateway read the session key. */}}
{{- define "sandfleet.sessionKeyFile" -}}
/etc/sandfleet/session-key/session-key
{{- end }}

{{- /* A WARNING for the install notes when the chart's trajectory claim will stay Pending: it
names no StorageClass and the cluster has no default one, or it names one the cluster lacks.
Looked up only when helm talks to a cluster (install, upgrade; `helm template` looks up
nothing) and only in cluster-wide mode, whose installer may read StorageClasses. */}}
{{- define "sandfleet.storageClassWarning" -}}
{{- $pvc := .Values.trajectoryStore.persistentVolumeClaim }}
{{- if and (eq .Values.trajectoryStore.type "persistentVolumeClaim") (include "sandfleet.clusterwide" .) }}
{{- $classes := lookup "storage.k8s.io/v1" "StorageClass" "" "" }}
{{- if $classes }}
{{- $default := "" }}
{{- $named := false }}
{{- range $classes.items }}
{{- $annotations := .metadata.annotations | default dict }}
{{- if or (eq (index $annotations "storageclass.kubernetes.io/is-default-class" | default "") "true") (eq (index $annotations "storageclass.beta.kubernetes.io/is-default-class" | default "") "true") }}
{{- $default = .metadata.name }}
{{- end }}
{{- if eq .metadata.name $pvc.storageClassName }}
{{- $named = true }}
{{- end }}
{{- end }}
{{- if and (not $pvc.storageClassName) (not $default) }}

WARNING: the cluster has no default StorageClass, so the trajectory claim
{{ include "sandfleet.trajectoryClaimName" . }} stays Pending and the operator never starts. Name a class
(trajectoryStore.persistentVolumeClaim.storageClassName), use trajectoryStore.existingClaim, or, for a
trial, trajectoryStore.type=emptyDir.
{{- else if and $pvc.storageClassName (not $named) }}

WARNING: the cluster has no StorageClass "{{ $pvc.storageClassName }}", so the trajectory claim
{{ include "sandfleet.trajectoryClaimName" . }} stays Pending and the operator never starts.
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
A NetworkPolicy peer: every pod in every namespace except sandboxes (the operator labels them
app.kubernetes.io/component=sandbox; the code in them is untrusted and holds no Kubernetes
token). Prometheus, tenants' clients and the control plane's pods match.
*/}}
{{- define "sandfleet.nonSandboxPods" -}}
- namespaceSelector: {}
  podSelector:
    matchExpressions:
      - key: app.kubernetes.io/component
        operator: NotIn
        values: [sandbox]
{{- end }}
