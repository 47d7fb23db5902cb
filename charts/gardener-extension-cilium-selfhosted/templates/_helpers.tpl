{{- /*
SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors

SPDX-License-Identifier: Apache-2.0
*/ -}}
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

{{- /*
webhookAddress: where each kube-apiserver calls the extension's webhooks, host:port on its own node's loopback.
*/ -}}
{{- define "webhookAddress" -}}
127.0.0.1:{{ .Values.webhookConfig.port }}
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

{{- /*
blockWithin (list BLOCK CIDR): CEL that the pool block BLOCK (a cidr, or start and stop) lies in the CIDR CIDR.
*/ -}}
{{- define "blockWithin" -}}
{{- $b := index . 0 }}{{ $c := index . 1 -}}
(isCIDR({{ $c }}) && (has({{ $b }}.cidr) ?
  isCIDR({{ $b }}.cidr) && cidr({{ $c }}).containsCIDR(cidr({{ $b }}.cidr).masked()) :
  isIP({{ $b }}.?start.orValue('')) && isIP({{ $b }}.?stop.orValue({{ $b }}.start)) &&
    cidr({{ $c }}).containsIP({{ $b }}.start) && cidr({{ $c }}).containsIP({{ $b }}.?stop.orValue({{ $b }}.start))))
{{- end -}}

{{- /*
declaredExposure: the providerConfig the Shoot declares for its exposure
(spec.provider.workers[].controlPlane.exposure.extension.providerConfig), as JSON, {} when it declares none. gardenlet
and gardenadm give the chart the Shoot as gardener.shoot (controllerinstallation reconciler) and render it again when
the Shoot changes, out of reach of the extension's token.
*/ -}}
{{- define "declaredExposure" -}}
{{- $cfg := dict -}}
{{- range (dig "shoot" "spec" "provider" "workers" list (.Values.gardener | default dict)) -}}
{{- $cfg = dig "controlPlane" "exposure" "extension" "providerConfig" $cfg . -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{- /*
poolBounds: the blocks the exposures' pools may take, as JSON maps of cidr, or start and stop: the chart value
exposurePoolCIDRs when the operator sets it, else the pool the Shoot declares.
*/ -}}
{{- define "poolBounds" -}}
{{- $bounds := list -}}
{{- if .Values.exposurePoolCIDRs -}}
{{- range .Values.exposurePoolCIDRs }}{{ $bounds = append $bounds (dict "cidr" .) }}{{ end -}}
{{- else -}}
{{- $pool := dig "pool" dict (include "declaredExposure" . | fromJson) -}}
{{- range (dig "cidrs" list $pool) }}{{ $bounds = append $bounds (dict "cidr" .) }}{{ end -}}
{{- range (dig "ranges" list $pool) }}{{ $bounds = append $bounds (dict "start" (dig "start" "" .) "stop" (dig "stop" "" .)) }}{{ end -}}
{{- end -}}
{{- toJson $bounds -}}
{{- end -}}

{{- /*
endpointBounds: the CIDRs the exposures' EndpointSlices may name: the chart value exposureEndpointCIDRs when the
operator sets it, else the Shoot's node network (spec.networking.nodes, comma-separated when dual-stack).
*/ -}}
{{- define "endpointBounds" -}}
{{- $bounds := list -}}
{{- if .Values.exposureEndpointCIDRs -}}
{{- $bounds = .Values.exposureEndpointCIDRs -}}
{{- else -}}
{{- $bounds = include "nodeNetwork" . | fromJsonArray -}}
{{- end -}}
{{- toJson $bounds -}}
{{- end -}}

{{- /*
nodeNetwork: the Shoot's node network (spec.networking.nodes, comma-separated when dual-stack), as a JSON list.
*/ -}}
{{- define "nodeNetwork" -}}
{{- $cidrs := list -}}
{{- range (splitList "," (dig "shoot" "spec" "networking" "nodes" "" (.Values.gardener | default dict))) }}{{ if trim . }}{{ $cidrs = append $cidrs (trim .) }}{{ end }}{{ end -}}
{{- toJson $cidrs -}}
{{- end -}}

{{- /*
l2InNodeNetwork: "true" when the pools are bounded by what the Shoot declares (no exposurePoolCIDRs) and it declares
an L2 announcement (the default): its VIP must then lie in the node network too, where clients look for it by ARP and
NDP. An operator who routes a VIP range onto the segment says so with exposurePoolCIDRs.
*/ -}}
{{- define "l2InNodeNetwork" -}}
{{- and (not .Values.exposurePoolCIDRs) (eq (dig "announcement" "L2" (include "declaredExposure" . | fromJson)) "L2") -}}
{{- end -}}

{{- /*
peerBounds: the BGP peers the exposures may peer with, as JSON maps of cidr, or address and asn: the chart value
exposurePeerCIDRs when the operator sets it, else the peers the Shoot declares (bgp.peers).
*/ -}}
{{- define "peerBounds" -}}
{{- $bounds := list -}}
{{- if .Values.exposurePeerCIDRs -}}
{{- range .Values.exposurePeerCIDRs }}{{ $bounds = append $bounds (dict "cidr" .) }}{{ end -}}
{{- else -}}
{{- range (dig "bgp" "peers" list (include "declaredExposure" . | fromJson)) }}{{ $bounds = append $bounds (dict "address" (dig "address" "" .) "asn" (printf "%d" (dig "asn" 0 . | int64))) }}{{ end -}}
{{- end -}}
{{- toJson $bounds -}}
{{- end -}}

{{- /*
authSecretBounds: the Secrets the exposures' BGP peers may name for their password: those the Shoot declares.
*/ -}}
{{- define "authSecretBounds" -}}
{{- $bounds := list -}}
{{- range (dig "bgp" "peers" list (include "declaredExposure" . | fromJson)) }}{{ with (dig "authSecretRef" "" .) }}{{ $bounds = append $bounds . }}{{ end }}{{ end -}}
{{- toJson $bounds -}}
{{- end -}}

{{- /*
kubeletLabels, kubeletLabelNamespaces: the Node labels a kubelet may set on its own Node under NodeRestriction
(k8s.io/kubelet pkg/apis KubeletLabels, KubeletLabelNamespaces); a test holds them equal.
*/ -}}
{{- define "kubeletLabels" -}}
["beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os", "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone", "kubernetes.io/arch", "kubernetes.io/hostname", "kubernetes.io/os", "node.kubernetes.io/instance-type", "topology.kubernetes.io/region", "topology.kubernetes.io/zone"]
{{- end -}}
{{- define "kubeletLabelNamespaces" -}}
["kubelet.kubernetes.io", "node.kubernetes.io"]
{{- end -}}

{{- /*
protectedNodeLabel KEY: CEL that no kubelet may set the Node label KEY on its own Node (Gardener's
kubernetesutils.IsNodeLabelAllowedForKubelet, which the providerConfig's validation uses, negated).
*/ -}}
{{- define "protectedNodeLabel" -}}
{{- $ns := printf "%s.split('/')[0]" . -}}
(size({{ . }}.split('/')) == 2 && ({{ $ns }} == 'node-restriction.kubernetes.io' || {{ $ns }}.endsWith('.node-restriction.kubernetes.io') ||
  ({{ $ns }} in ['kubernetes.io', 'k8s.io'] || {{ $ns }}.endsWith('.kubernetes.io') || {{ $ns }}.endsWith('.k8s.io')) &&
  !({{ . }} in {{ include "kubeletLabels" . }}) && !{{ include "kubeletLabelNamespaces" . }}.exists(n, {{ $ns }} == n || {{ $ns }}.endsWith('.' + n))))
{{- end -}}
