{{- define "sandfleet.serve.name" -}}
{{- printf "%s-serve" (include "sandfleet.fullname" .) }}
{{- end }}

{{- define "sandfleet.serve.selectorLabels" -}}
app.kubernetes.io/name: sandfleet-serve
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandfleet.serve.labels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet-serve
app.kubernetes.io/component: serve
{{- end }}

{{- /* "true" when serve also serves the tenants' ServedModel objects (identity client only: a
tenant sees those of the namespaces its own token may list servedmodels in). */}}
{{- define "sandfleet.serve.watchesServedModels" -}}
{{- if and .Values.serve.servedModels (eq .Values.serve.identity "client") }}true{{ end }}
{{- end }}

{{- /* The tenant namespace serve claims sandboxes in (checked: a tenant, so the chart made
its sandfleet-session-editor Role there). */}}
{{- define "sandfleet.serve.namespace" -}}
{{- $namespace := required "serve.namespace is required: the tenant namespace whose sandboxes serve claims" .Values.serve.namespace }}
{{- $known := list }}
{{- range (include "sandfleet.tenants" . | fromYamlArray) }}
{{- $known = append $known .namespace }}
{{- end }}
{{- if not (has $namespace $known) }}
{{- fail (printf "serve.namespace %s is not a tenant namespace (tenants, or operator.watchNamespaces): serve's ServiceAccount is bound to the sandfleet-session-editor Role there" $namespace) }}
{{- end }}
{{- $namespace }}
{{- end }}
