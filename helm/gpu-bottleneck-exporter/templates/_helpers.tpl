{{/* The chart's name, overridable. */}}
{{- define "gbe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the release name alone when it already contains the chart's name. */}}
{{- define "gbe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gbe.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gbe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gbe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gbe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gbe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: gpu-bottleneck-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gbe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gbe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gbe.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The `job` label Prometheus gives the exporter's series: both monitors take it from the
     app.kubernetes.io/name label (jobLabel), so the rules can name it. */}}
{{- define "gbe.job" -}}
{{- default (include "gbe.name" .) .Values.prometheusRule.job -}}
{{- end -}}

{{/* A duration value (seconds: a number from a values file, or the string `--set` makes of a
     fraction), quoted for the exporter's environment. What the exporter would refuse at start fails
     here with one line naming the value, its range and why (the ranges: _durations.tpl).
     Call with (list $ "exporter.interval" .Values.exporter.interval). */}}
{{- define "gbe.seconds" -}}
{{- $name := index . 1 -}}
{{- $text := toString (index . 2) -}}
{{- $r := index (include "gbe.durationRanges" (index . 0) | fromYaml) $name -}}
{{- $lowest := ternary (printf "at least %v" $r.low) (printf "more than %v" $r.low) $r.lowAllowed -}}
{{- $range := printf "%s must be a number of seconds, %s and at most %v (%s)" $name $lowest $r.high $r.why -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?$" $text) -}}
{{- fail (printf "%s; got %s" $range $text) -}}
{{- end -}}
{{- $v := float64 $text -}}
{{- if or (lt $v $r.low) (and (eq $v $r.low) (not $r.lowAllowed)) (gt $v $r.high) -}}
{{- fail (printf "%s; got %s" $range $text) -}}
{{- end -}}
{{- $text | quote -}}
{{- end -}}

{{/* A number as PromQL reads it: integers without an exponent (Helm holds values as float64). */}}
{{- define "gbe.number" -}}
{{- if eq (float64 .) (float64 (int64 .)) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{/* Target relabelings of a monitor (pass the serviceMonitor or podMonitor values): the node the
     exporter runs on becomes `node`, and the target's own namespace/pod/container/service labels are
     dropped so that the exporter's namespace/pod/container (the pod that holds a GPU) arrive
     unrenamed instead of as exported_namespace/exported_pod. */}}
{{- define "gbe.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
  action: replace
{{- with .dropTargetLabels }}
- regex: {{ join "|" . }}
  action: labeldrop
{{- end }}
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The scheme /metrics is served with: https with TLS in the web config or behind kube-rbac-proxy. */}}
{{- define "gbe.scheme" -}}
{{- if or .Values.kubeRbacProxy.enabled (and .Values.webConfig.enabled .Values.webConfig.tls) -}}
https
{{- else -}}
http
{{- end -}}
{{- end -}}

{{/* A probe from values, following the web config: HTTPS with TLS; only the TCP port when clients must
present a certificate (the kubelet has none). Call with (list $ .Values.livenessProbe). */}}
{{- define "gbe.probe" -}}
{{- $root := index . 0 -}}
{{- $probe := deepCopy (index . 1) -}}
{{- if and $root.Values.webConfig.enabled $root.Values.webConfig.clientCertRequired $probe.httpGet -}}
{{- $_ := set $probe "tcpSocket" (dict "port" $probe.httpGet.port) -}}
{{- $_ := unset $probe "httpGet" -}}
{{- else if and $probe.httpGet (eq (include "gbe.scheme" $root) "https") -}}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{/* scheme, tlsConfig, basicAuth (and the service account token behind kube-rbac-proxy) of a monitor's
endpoint. Call with (list $ .Values.serviceMonitor "ServiceMonitor"). */}}
{{- define "gbe.scrapeAuth" -}}
{{- $root := index . 0 -}}
{{- $monitor := index . 1 -}}
scheme: {{ $monitor.scheme | default (include "gbe.scheme" $root) }}
{{- if $monitor.tlsConfig }}
tlsConfig:
  {{- toYaml $monitor.tlsConfig | nindent 2 }}
{{- else if $root.Values.kubeRbacProxy.enabled }}
tlsConfig:
  insecureSkipVerify: true
{{- end }}
{{- with $monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and $root.Values.kubeRbacProxy.enabled (eq (index . 2) "ServiceMonitor") (not $monitor.basicAuth) }}
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- end }}
{{- end -}}

{{/* Labels as k=v,k=v, for messages. */}}
{{- define "gbe.labelList" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* What the defaults install depends on the cluster: with the Prometheus Operator's API
     (monitoring.coreos.com/v1; `helm template` needs `--api-versions monitoring.coreos.com/v1` to see
     it) the monitor and the rules are custom resources; without it they would be refused, so they are
     left out and the pods carry the prometheus.io scrape annotations instead. Each is "true" or "". */}}
{{- define "gbe.operator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- end -}}

{{/* The ServiceMonitor: on unless turned off, or replaced by the PodMonitor. */}}
{{- define "gbe.serviceMonitor" -}}
{{- if and (include "gbe.operator" .) .Values.serviceMonitor.enabled (not .Values.podMonitor.enabled) }}true{{ end -}}
{{- end -}}

{{- define "gbe.podMonitor" -}}
{{- if and (include "gbe.operator" .) .Values.podMonitor.enabled }}true{{ end -}}
{{- end -}}

{{- define "gbe.rules" -}}
{{- if and (include "gbe.operator" .) .Values.prometheusRule.enabled }}true{{ end -}}
{{- end -}}

{{/* The prometheus.io annotations stand in for a monitor: only when no monitor is rendered. */}}
{{- define "gbe.scrapeAnnotations" -}}
{{- if and .Values.scrapeAnnotations.enabled (not (include "gbe.serviceMonitor" .)) (not (include "gbe.podMonitor" .)) }}true{{ end -}}
{{- end -}}

{{/* The pod's metrics port: kube-rbac-proxy's when it is in front. */}}
{{- define "gbe.metricsPort" -}}
{{- ternary .Values.kubeRbacProxy.port .Values.exporter.port .Values.kubeRbacProxy.enabled -}}
{{- end -}}

{{/* Where NVML (libnvidia-ml.so.1) reaches the pod on each platform (driver.platform), as JSON:
     runtimeClassName, the driver's host path and how it is mounted at /host/driver, and the
     directories under it put on LD_LIBRARY_PATH. The pod requests no GPU, so no device plugin hands it
     the library: the NVIDIA runtime injects it (generic, runtime-class, gpu-operator) or the node's
     driver directory is mounted. driver.hostPath overrides a preset's directory. */}}
{{- define "gbe.driver" -}}
{{- $presets := dict
  "generic" (dict)
  "runtime-class" (dict "runtimeClassName" "nvidia")
  "gpu-operator" (dict "runtimeClassName" "nvidia" "hostPath" "/run/nvidia/driver" "type" "DirectoryOrCreate" "propagation" "HostToContainer" "libDirs" (list "usr/lib64" "usr/lib/x86_64-linux-gnu" "usr/lib/aarch64-linux-gnu"))
  "gke-cos" (dict "hostPath" "/home/kubernetes/bin/nvidia" "type" "Directory" "libDirs" (list "lib64"))
  "eks-al2" (dict "hostPath" "/usr/lib64/libnvidia-ml.so.1" "type" "File" "mountPath" "/host/driver/lib64/libnvidia-ml.so.1" "libDirs" (list "lib64"))
  "eks-bottlerocket" (dict "hostPath" "/usr/lib/nvidia/tesla" "type" "Directory" "libDirs" (list "."))
-}}
{{- $d := .Values.driver -}}
{{- $preset := get $presets $d.platform -}}
{{- if not (hasKey $presets $d.platform) }}
{{- fail (printf "driver.platform %q: one of %s" $d.platform (keys $presets | sortAlpha | join ", ")) }}
{{- end -}}
{{- $out := deepCopy $preset -}}
{{- if $d.hostPath }}
{{- $_ := set $out "hostPath" $d.hostPath }}
{{- $_ := set $out "type" "Directory" }}
{{- $_ := unset $out "mountPath" }}
{{- end -}}
{{- if $d.libDirs }}
{{- $_ := set $out "libDirs" $d.libDirs }}
{{- end -}}
{{- if and $out.hostPath (not $out.libDirs) }}
{{- $_ := set $out "libDirs" (list ".") }}
{{- end -}}
{{- if $out.hostPath }}
{{- $_ := set $out "mountPath" ($out.mountPath | default "/host/driver") }}
{{- $dirs := list }}
{{- range $out.libDirs }}
{{- $dirs = append $dirs (clean (printf "/host/driver/%s" .)) }}
{{- end }}
{{- $_ := set $out "libraryPath" (join ":" $dirs) }}
{{- end -}}
{{- $_ := set $out "runtimeClassName" (.Values.runtimeClassName | default $out.runtimeClassName | default "") -}}
{{- toJson $out -}}
{{- end -}}

{{/* A ResourceQuota that admits the critical priority class outside kube-system ("true" or ""): some
     managed clusters (GKE) refuse system-node-critical and system-cluster-critical pods in any other
     namespace unless a quota scoped to that class covers them. */}}
{{- define "gbe.criticalQuota" -}}
{{- $critical := has .Values.priorityClassName (list "system-node-critical" "system-cluster-critical") -}}
{{- if and .Values.criticalPodsQuota.enabled $critical (ne (include "gbe.namespace" .) "kube-system") }}true{{ end -}}
{{- end -}}
