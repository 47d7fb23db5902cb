{{- define "name" -}}
gardener-extension-cilium-selfhosted
{{- end -}}

{{- define "labels" -}}
app.kubernetes.io/name: {{ include "name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* "true" when the self-hosted shoot's control plane is highly available (several control-plane nodes). */ -}}
{{- define "controlPlaneHighlyAvailable" -}}
{{- $shoot := .Values.gardener.shoot | default dict -}}
{{- if dig "controlPlane" "highAvailability" "" ($shoot.spec | default dict) -}}
true
{{- end -}}
{{- end -}}
