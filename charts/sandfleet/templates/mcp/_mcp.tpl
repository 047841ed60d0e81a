{{- define "sandfleet.mcp.name" -}}
{{- printf "%s-mcp" (include "sandfleet.fullname" .) }}
{{- end }}

{{- define "sandfleet.mcp.selectorLabels" -}}
app.kubernetes.io/name: sandfleet-mcp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandfleet.mcp.labels" -}}
{{ include "sandfleet.labels" . }}
app.kubernetes.io/name: sandfleet-mcp
app.kubernetes.io/component: mcp
{{- end }}
