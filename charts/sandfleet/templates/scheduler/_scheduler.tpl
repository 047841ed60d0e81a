{{- define "sandfleet.scheduler.name" -}}
{{- printf "%s-binpack-scheduler" (include "sandfleet.fullname" .) }}
{{- end }}

{{- define "sandfleet.scheduler.selectorLabels" -}}
app.kubernetes.io/name: sandfleet-binpack-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandfleet.scheduler.labels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet-binpack-scheduler
app.kubernetes.io/component: scheduler
{{- end }}

{{- /*
The scheduler must match the control plane's minor version; without a tag the cluster's own
version is used, minus build metadata ("v1.37.2+k3s1" -> "v1.37.2").
*/}}
{{- define "sandfleet.scheduler.image" -}}
{{- $image := .Values.binpackScheduler.image }}
{{- $tag := default (regexReplaceAll "\\+.*$" .Capabilities.KubeVersion.Version "") $image.tag }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
