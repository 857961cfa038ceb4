{{/* Names. The release "baton" gives baton-master-0.baton-master-headless, the names docs/kubernetes.md and the compose profile use. */}}
{{- define "baton.fullname" -}}
{{- if contains "baton" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-baton" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "baton.master" -}}{{ include "baton.fullname" . }}-master{{- end -}}
{{- define "baton.masterHeadless" -}}{{ include "baton.master" . }}-headless{{- end -}}
{{- define "baton.rs" -}}{{ include "baton.fullname" . }}-rs{{- end -}}
{{- define "baton.rsHeadless" -}}{{ include "baton.rs" . }}-headless{{- end -}}

{{/* The DNS suffix of a pod of a headless service: .<svc>.<ns>.svc.<domain> */}}
{{- define "baton.masterDomain" -}}{{ include "baton.masterHeadless" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}{{- end -}}
{{- define "baton.rsDomain" -}}{{ include "baton.rsHeadless" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}{{- end -}}

{{- define "baton.labels" -}}
app.kubernetes.io/name: baton
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "baton.masterSelector" -}}
app.kubernetes.io/name: baton
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: master
{{- end -}}

{{- define "baton.rsSelector" -}}
app.kubernetes.io/name: baton
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: regionserver
{{- end -}}

{{- define "baton.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{/* TLS is on with cert-manager or with existing Secrets; both at once is a mistake. */}}
{{- define "baton.tls" -}}
{{- $ex := .Values.tls.existingSecrets -}}
{{- $hasEx := or (gt (len $ex.masters) 0) (gt (len $ex.regionServers) 0) -}}
{{- if and .Values.tls.certManager.enabled $hasEx -}}
{{- fail "tls: set tls.certManager.enabled or tls.existingSecrets, not both" -}}
{{- end -}}
{{- if or .Values.tls.certManager.enabled $hasEx -}}true{{- end -}}
{{- end -}}

{{/*
cert-manager's CSI driver issues each pod its own key in the pod (no
Secret), the default with cert-manager: see README.md, "TLS".
*/}}
{{- define "baton.csi" -}}
{{- if and .Values.tls.certManager.enabled .Values.tls.certManager.csiDriver -}}true{{- end -}}
{{- end -}}

{{/* Where a pod's ca.crt, tls.crt and tls.key are: its own CSI volume, or its directory in the projected Secrets. */}}
{{- define "baton.tlsDir" -}}
{{- if include "baton.csi" . -}}/tls{{- else -}}/tls/$(POD_NAME){{- end -}}
{{- end -}}

{{/*
The tls volume of cert-manager's CSI driver for role .role (master or
regionserver). .dnsNames are the certificate's DNS names; the driver
expands ${POD_NAME} and ${POD_NAMESPACE} in them and in the URI (the
kubelet does not: these are not args).
*/}}
{{- define "baton.csiVolume" -}}
{{- $cm := .root.Values.tls.certManager -}}
{{- $issuer := include "baton.issuerRef" .root | fromYaml -}}
- name: tls
  csi:
    driver: csi.cert-manager.io
    readOnly: true
    volumeAttributes:
      csi.cert-manager.io/issuer-name: {{ $issuer.name | quote }}
      csi.cert-manager.io/issuer-kind: {{ $issuer.kind | quote }}
      csi.cert-manager.io/issuer-group: {{ $issuer.group | quote }}
      csi.cert-manager.io/uri-sans: {{ printf "baton://%s/${POD_NAME}" .role | quote }}
      csi.cert-manager.io/dns-names: {{ join "," .dnsNames | quote }}
      {{- with .ipSANs }}
      csi.cert-manager.io/ip-sans: {{ join "," . | quote }}
      {{- end }}
      # Masters dial each other and region servers dial masters: each
      # certificate serves and is presented as a client.
      csi.cert-manager.io/key-usages: "digital signature,server auth,client auth"
      csi.cert-manager.io/duration: {{ $cm.duration | quote }}
      csi.cert-manager.io/renew-before: {{ $cm.renewBefore | quote }}
      csi.cert-manager.io/key-algorithm: {{ $cm.privateKey.algorithm | quote }}
      {{- if ne (lower (toString $cm.privateKey.algorithm)) "ed25519" }}
      csi.cert-manager.io/key-size: {{ $cm.privateKey.size | quote }}
      {{- end }}
      {{- with .root.Values.masters.securityContext.fsGroup }}
      # The files are the pod's group's (0640 by the driver) rather than
      # world-readable.
      csi.cert-manager.io/fs-group: {{ . | quote }}
      {{- end }}
{{- end -}}

{{/* The Issuer that signs the pods' and clients' certificates: the values', or the chart's own CA. */}}
{{- define "baton.issuerRef" -}}
{{- $i := .Values.tls.certManager.issuerRef -}}
{{- if $i.name -}}
name: {{ $i.name }}
kind: {{ $i.kind | default "Issuer" }}
group: {{ $i.group | default "cert-manager.io" }}
{{- else -}}
name: {{ include "baton.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end -}}
{{- end -}}

{{/* The Secret holding master ordinal .i's certificate. */}}
{{- define "baton.masterTLSSecret" -}}
{{- if .root.Values.tls.certManager.enabled -}}
{{ include "baton.master" .root }}-{{ .i }}-tls
{{- else -}}
{{ index .root.Values.tls.existingSecrets.masters .i }}
{{- end -}}
{{- end -}}

{{- define "baton.rsTLSSecret" -}}
{{- if .root.Values.tls.certManager.enabled -}}
{{ include "baton.rs" .root }}-{{ .i }}-tls
{{- else -}}
{{ index .root.Values.tls.existingSecrets.regionServers .i }}
{{- end -}}
{{- end -}}

{{- define "baton.prometheusTLSSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{ include "baton.fullname" . }}-client-prometheus-tls
{{- else -}}
{{ .Values.tls.existingSecrets.prometheus }}
{{- end -}}
{{- end -}}

{{/* Checks every render makes: an odd master count, a Secret per pod. */}}
{{- define "baton.validate" -}}
{{- $n := int .Values.masters.replicas -}}
{{- if lt $n 1 -}}
{{- fail (printf "masters.replicas must be at least 1, got %d" $n) -}}
{{- end -}}
{{- if eq (mod $n 2) 0 -}}
{{- fail (printf "masters.replicas must be odd (1, 3, 5, 7): %d masters tolerate no more failures than %d and need one more for a quorum" $n (sub $n 1)) -}}
{{- end -}}
{{- if include "baton.tls" . -}}
{{- if not .Values.tls.certManager.enabled -}}
{{- if lt (len .Values.tls.existingSecrets.masters) $n -}}
{{- fail (printf "tls.existingSecrets.masters names %d Secrets for %d masters: one per pod" (len .Values.tls.existingSecrets.masters) $n) -}}
{{- end -}}
{{- if lt (len .Values.tls.existingSecrets.regionServers) (int .Values.regionServers.replicas) -}}
{{- fail (printf "tls.existingSecrets.regionServers names %d Secrets for %d region servers: one per pod" (len .Values.tls.existingSecrets.regionServers) (int .Values.regionServers.replicas)) -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.tls.existingSecrets.prometheus) -}}
{{- fail "serviceMonitor with tls.existingSecrets needs tls.existingSecrets.prometheus (a baton://client/prometheus certificate)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The masters' disruption budget: Consul's formula (values.yaml), never above floor((n-1)/2). */}}
{{- define "baton.masterMaxUnavailable" -}}
{{- $n := int .Values.masters.replicas -}}
{{- $safe := div (sub $n 1) 2 -}}
{{- $v := .Values.masters.podDisruptionBudget.maxUnavailable -}}
{{- if ne (toString $v) "" -}}
{{- if gt (int $v) (int $safe) -}}
{{- fail (printf "masters.podDisruptionBudget.maxUnavailable %d would let a drain take %d of %d masters: a quorum needs %d (at most %d)" (int $v) (int $v) $n (add (div $n 2) 1) $safe) -}}
{{- end -}}
{{- int $v -}}
{{- else if le $n 1 -}}0
{{- else if le $n 4 -}}1
{{- else -}}{{ sub (div $n 2) 1 }}
{{- end -}}
{{- end -}}

{{/* The region servers' --masters: the client Service's admin address (any ready master; the leader found by its hints), the same whatever the replicas. */}}
{{- define "baton.masterAddrs" -}}
{{- printf "%s.%s.svc.%s:7070" (include "baton.master" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "baton.grants" -}}
{{- $out := list -}}
{{- range $k, $v := .Values.acl.initialGrants -}}
{{- $out = append $out (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "baton.otelEnv" -}}
{{- if .Values.otlp.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otlp.endpoint | quote }}
{{- if .Values.otlp.protocol }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .Values.otlp.protocol | quote }}
{{- end }}
{{- end }}
{{- with .Values.otlp.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Affinity: .sel the selector labels, .aa the antiAffinity values. */}}
{{- define "baton.affinity" -}}
{{- $node := .aa.node -}}
{{- $zone := .aa.zone -}}
{{- if not (has $node (list "required" "preferred" "none")) -}}
{{- fail (printf "antiAffinity.node %q: required, preferred or none" $node) -}}
{{- end -}}
{{- if not (has $zone (list "preferred" "none")) -}}
{{- fail (printf "antiAffinity.zone %q: preferred or none" $zone) -}}
{{- end -}}
{{- if or (ne $node "none") (ne $zone "none") }}
podAntiAffinity:
  {{- if eq $node "required" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector:
        matchLabels:
          {{- .sel | nindent 10 }}
      topologyKey: kubernetes.io/hostname
  {{- end }}
  {{- if or (eq $node "preferred") (eq $zone "preferred") }}
  preferredDuringSchedulingIgnoredDuringExecution:
    {{- if eq $node "preferred" }}
    - weight: 100
      podAffinityTerm:
        labelSelector:
          matchLabels:
            {{- .sel | nindent 12 }}
        topologyKey: kubernetes.io/hostname
    {{- end }}
    {{- if eq $zone "preferred" }}
    - weight: 50
      podAffinityTerm:
        labelSelector:
          matchLabels:
            {{- .sel | nindent 12 }}
        topologyKey: topology.kubernetes.io/zone
    {{- end }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* How many ordinals' Secrets the masters' TLS volume lists. */}}
{{- define "baton.masterTLSOrdinals" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- max (int .Values.masters.replicas) (int .Values.tls.mountOrdinals) -}}
{{- else -}}
{{- len .Values.tls.existingSecrets.masters -}}
{{- end -}}
{{- end -}}

{{- define "baton.rsTLSOrdinals" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- max (int .Values.regionServers.replicas) (int .Values.tls.mountOrdinals) -}}
{{- else -}}
{{- len .Values.tls.existingSecrets.regionServers -}}
{{- end -}}
{{- end -}}

{{/*
--initial-cluster-size: how many members the cluster was installed with,
fixed for its life. It is a value, never looked up: under `helm template`
or a GitOps tool a lookup sees nothing, and a default of the replica count
would render 5 on a scale from 3 to 5, making pods 3 and 4 bootstrap a
second cluster instead of joining. Pods at or past it join through the
first ones; installing more replicas than it is safe (the rest join).
*/}}
{{- define "baton.initialClusterSize" -}}
{{- $v := .Values.masters.initialClusterSize -}}
{{- $s := int $v -}}
{{- $n := int .Values.masters.replicas -}}
{{- if lt $s 1 -}}
{{- fail (printf "masters.initialClusterSize must be at least 1, got %v: the number of masters the cluster was installed with (fixed for its life; pods at or past it join)" $v) -}}
{{- end -}}
{{- if eq (mod $s 2) 0 -}}
{{- fail (printf "masters.initialClusterSize must be odd (1, 3, 5, 7), got %d" $s) -}}
{{- end -}}
{{- if gt $s $n -}}
{{- fail (printf "masters.initialClusterSize %d is more than masters.replicas %d: the first %d pods bootstrap together, so they must all exist. Scaling below the initial size? Lower masters.initialClusterSize with the replicas (docs/kubernetes.md, \"Scale the masters\")" $s $n $s) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* Access control on, as the agent decides it: --acl, else on with TLS. */}}
{{- define "baton.aclOn" -}}
{{- if eq .Values.acl.mode "on" -}}true
{{- else if and (eq .Values.acl.mode "") (include "baton.tls" .) -}}true
{{- end -}}
{{- end -}}

{{/* The Secret holding the bootstrap token: the values' or the chart's. */}}
{{- define "baton.bootstrapTokenSecret" -}}
{{- .Values.acl.bootstrapToken.secretName | default (printf "%s-bootstrap-token" (include "baton.fullname" .)) -}}
{{- end -}}


{{/* The Secret holding the masters' cluster secret (TLS off): the values' or the chart's. */}}
{{- define "baton.clusterSecret" -}}
{{- .Values.clusterSecret.existingSecret | default (printf "%s-cluster-secret" (include "baton.fullname" .)) -}}
{{- end -}}

{{/*
GOMEMLIMIT for a container: .explicit if set, else 90% of .resources'
limits.memory in MiB (the rest is the runtime's own and the OS's), else
nothing (no limit, no GOMEMLIMIT). The downward API's resourceFieldRef
gives the limit itself or a divided one, never 90% of it, so the template
computes it. .what names the value for the error.
*/}}
{{- define "baton.goMemLimit" -}}
{{- if .explicit -}}
{{- .explicit -}}
{{- else -}}
{{- $lim := "" -}}
{{- with .resources -}}{{- with .limits -}}{{- with .memory -}}{{- $lim = toString . -}}{{- end -}}{{- end -}}{{- end -}}
{{- if $lim -}}
{{- $m := regexFind "^[0-9]+" $lim -}}
{{- $unit := trimPrefix $m $lim -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- if or (not $m) (not (hasKey $units $unit)) -}}
{{- fail (printf "%s.resources.limits.memory %q: the chart computes GOMEMLIMIT (90%% of it) from an integer with Ki, Mi, Gi, Ti, k, M, G or T; write it so, or set %s.goMemLimit yourself (e.g. 900MiB)" .what $lim .what) -}}
{{- end -}}
{{- $bytes := mul (int64 $m) (int64 (get $units $unit)) -}}
{{- printf "%dMiB" (div (div (mul $bytes 9) 10) 1048576) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* host:port, an IPv6 host in brackets (as net.JoinHostPort): (list host port). */}}
{{- define "baton.hostPort" -}}
{{- $h := index . 0 -}}
{{- if contains ":" $h -}}[{{ $h }}]:{{ index . 1 }}{{- else -}}{{ $h }}:{{ index . 1 }}{{- end -}}
{{- end -}}
