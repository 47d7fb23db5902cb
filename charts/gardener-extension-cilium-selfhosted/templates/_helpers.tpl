{{- define "name" -}}
gardener-extension-cilium-selfhosted
{{- end -}}

{{- /*
apiserverPort: kube-apiserver's port on a self-hosted shoot, which Gardener writes into every exposure's spec.port
(pkg/component/kubernetes/apiserver/constants Port, pkg/component/extensions/selfhostedshootexposure); a test holds
them equal.
*/ -}}
{{- define "apiserverPort" -}}
443
{{- end -}}

{{- define "labels" -}}
app.kubernetes.io/name: {{ include "name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /*
nameOf (list NAME STEM): CEL that NAME is the name the extension derives from STEM (pkg/exposure/resources dnsLabel):
STEM itself, or, for a STEM longer than a DNS label, its first characters and a 10-digit hash.
*/ -}}
{{- define "nameOf" -}}
({{ index . 0 }} == {{ index . 1 }} || size({{ index . 1 }}) > 63 && {{ include "hashedFrom" . }})
{{- end -}}

{{- /*
nameUnder (list NAME STEM): CEL that NAME is derived from STEM and a suffix of its own (a BGP peer config's peer).
*/ -}}
{{- define "nameUnder" -}}
({{ index . 0 }}.startsWith({{ index . 1 }} + '-') || {{ include "hashedFrom" . }} || size({{ index . 0 }}) <= 63 && {{ index . 0 }}.matches('-[0-9a-f]{10}$') && {{ index . 0 }}.substring(0, size({{ index . 0 }}) - 11).startsWith({{ index . 1 }} + '-'))
{{- end -}}

{{- define "hashedFrom" -}}
(size({{ index . 0 }}) <= 63 && {{ index . 0 }}.matches('^cilium-exposure-.+-[0-9a-f]{10}$') && {{ index . 1 }}.startsWith({{ index . 0 }}.substring(0, size({{ index . 0 }}) - 11)))
{{- end -}}
