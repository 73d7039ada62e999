{{/* The install notes (NOTES.txt prints them; a test renders them with and without the Prometheus
     Operator's API, which `helm install --dry-run` cannot fake). */}}
{{- define "gbe.notes" -}}
{{- $ns := include "gbe.namespace" . -}}
{{- $name := include "gbe.fullname" . -}}
gpu-bottleneck-exporter {{ .Chart.AppVersion }} runs as DaemonSet {{ $ns }}/{{ $name }}
on {{ if or .Values.nodeSelector .Values.affinity }}the GPU nodes its affinity and node selector match{{ else }}every node{{ end }}.

Installed:
  - DaemonSet and {{ if .Values.service.enabled }}Service {{ $ns }}/{{ $name }} (port {{ .Values.service.port }}, "metrics"){{ else }}no Service{{ end }}
{{- if include "gbe.serviceMonitor" . }}
  - ServiceMonitor {{ .Values.serviceMonitor.namespace | default $ns }}/{{ $name }}{{ with .Values.serviceMonitor.additionalLabels }} labelled {{ include "gbe.labelList" . }}{{ end }}
{{- else if include "gbe.podMonitor" . }}
  - PodMonitor {{ .Values.podMonitor.namespace | default $ns }}/{{ $name }}{{ with .Values.podMonitor.additionalLabels }} labelled {{ include "gbe.labelList" . }}{{ end }}
{{- end }}
{{- if include "gbe.rules" . }}
  - PrometheusRule {{ .Values.prometheusRule.namespace | default $ns }}/{{ $name }}{{ if eq .Values.prometheusRule.scope "split" }} and {{ $name }}-global{{ end }}{{ with .Values.prometheusRule.additionalLabels }} labelled {{ include "gbe.labelList" . }}{{ end }}: the recording rules and the alerts
    Each alert links its runbook at {{ .Values.prometheusRule.runbookBaseUrl }}<AlertName>.md: to link a copy of docs/runbooks/ of your own, set prometheusRule.runbookBaseUrl once
{{- end }}
{{- if .Values.dashboards.enabled }}
  - Dashboards: ConfigMaps labelled {{ .Values.dashboards.label }}={{ .Values.dashboards.labelValue }} in {{ .Values.dashboards.namespace | default $ns }} for the Grafana sidecar
    (fleet overview, node and GPU detail, job view); kube-prometheus-stack's Grafana loads them
{{- end }}
{{- if include "gbe.scrapeAnnotations" . }}
  - prometheus.io/scrape annotations on the pods
{{- end }}
{{- $driver := include "gbe.driver" . | fromJson }}
  - NVML (libnvidia-ml.so.1) for a pod that requests no GPU: {{ if $driver.hostPath }}the node's {{ $driver.hostPath }}, mounted at {{ $driver.mountPath }}{{ if $driver.runtimeClassName }}, and RuntimeClass {{ $driver.runtimeClassName }}{{ end }}{{ else if $driver.runtimeClassName }}RuntimeClass {{ $driver.runtimeClassName }}{{ else }}the node's default runtime, when it is the NVIDIA runtime{{ end }} (driver.platform={{ .Values.driver.platform }}; also gke-cos, gpu-operator, eks-al2, eks-bottlerocket, runtime-class).
    Where it found it, or why not: kubectl exec -n {{ $ns }} ds/{{ $name }} -c exporter -- gpu-bottleneck-exporter doctor
{{- if not (include "gbe.operator" .) }}

This cluster does not serve the Prometheus Operator's API (monitoring.coreos.com/v1), so no ServiceMonitor
and no PrometheusRule were created.
{{- if include "gbe.scrapeAnnotations" . }} A Prometheus that scrapes pods annotated prometheus.io/scrape (the
prometheus chart's kubernetes-pods job) finds the exporters, but under its own job name and, unless it copies
__meta_kubernetes_pod_node_name, without the `node` label the dashboards and alerts use.{{ end }}
The job the dashboards and alerts expect, for prometheus.yml{{ if include "gbe.scrapeAnnotations" . }} (then set scrapeAnnotations.enabled=false, or each
exporter is scraped twice){{ end }}:

  scrape_configs:
    - job_name: {{ include "gbe.job" . }}
      kubernetes_sd_configs: [{role: pod, namespaces: {names: [{{ $ns }}]}}]
      {{- if eq (include "gbe.scheme" .) "https" }}
      scheme: https
      {{- end }}
      relabel_configs:
        - {source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name], regex: {{ include "gbe.name" . }}, action: keep}
        - {source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_instance], regex: {{ .Release.Name }}, action: keep}
        - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
        - {source_labels: [__meta_kubernetes_pod_node_name], target_label: node}

and load the alert rules from alerts/gpu-bottleneck-exporter.rules.yml in the source. Installed the
Operator later? `helm upgrade` creates the ServiceMonitor and the PrometheusRule.
{{- else if or (include "gbe.serviceMonitor" .) (include "gbe.podMonitor" .) (include "gbe.rules" .) }}
{{- if not (or (and (include "gbe.serviceMonitor" .) .Values.serviceMonitor.additionalLabels) (and (include "gbe.podMonitor" .) .Values.podMonitor.additionalLabels) (and (include "gbe.rules" .) .Values.prometheusRule.additionalLabels)) }}

A Prometheus of the Operator loads monitors and rules only when its selectors match their labels:
  kubectl get prometheus -A -o custom-columns=NAME:.metadata.name,MONITORS:.spec.serviceMonitorSelector,RULES:.spec.ruleSelector
kube-prometheus-stack selects `release: <its release name>` unless installed with
...SelectorNilUsesHelmValues=false; add that label (here for release "kube-prometheus-stack"):
  helm upgrade {{ .Release.Name }} <this chart> -n {{ .Release.Namespace }} --reuse-values \
    --set serviceMonitor.additionalLabels.release=kube-prometheus-stack \
    --set prometheusRule.additionalLabels.release=kube-prometheus-stack
{{- end }}
{{- end }}
{{- if and (include "gbe.operator" .) (not (or (include "gbe.serviceMonitor" .) (include "gbe.podMonitor" .))) }}

No ServiceMonitor or PodMonitor was created: point Prometheus at the Service {{ $name }}:{{ .Values.service.port }}
(port "metrics") and give each target a `node` label, or set serviceMonitor.enabled=true.
{{- end }}

First look, a node's metrics and verdicts:
  kubectl -n {{ $ns }} port-forward ds/{{ $name }} {{ .Values.exporter.port }}
  {{- if and .Values.webConfig.enabled .Values.webConfig.tls }}
  curl -sk https://localhost:{{ .Values.exporter.port }}/metrics -u USER | grep '^gpu_bottleneck{'
  (TLS and authentication from the web config in Secret {{ .Values.webConfig.secretName }}; -u only with basic_auth_users,
  --cert/--key with client certificates; `kill -HUP 1` in the container re-reads it after the Secret changed)
  {{- else }}
  curl -s localhost:{{ .Values.exporter.port }}/metrics | grep '^gpu_bottleneck{'
  {{- end }}

First query, in Prometheus once it scrapes them: where each node's GPU time goes (seconds per second by state),
  sum by (node, state) (rate(gpu_time_seconds_total[5m]))
and what is wrong right now (empty while every GPU is fine):
  gpu_bottleneck == 1
{{- if not .Values.podResources.enabled }}

podResources.enabled=false: series carry no namespace/pod/container labels.
{{- end }}
{{- if not .Values.processOwners.enabled }}

GPUs shared by time-slicing or MPS are split per pod only with processOwners.enabled=true (it costs hostPID:
NVML names only the processes of the caller's PID namespace); MIG instances are split without it.
{{- end }}
{{- if .Values.kubeRbacProxy.enabled }}

kube-rbac-proxy serves https on port {{ .Values.kubeRbacProxy.port }}: a scraper needs a token allowed to GET the
non-resource URL /metrics (port-forwarding, as above, reaches the exporter directly on localhost).
{{- end }}
{{- if .Values.networkPolicy.enabled }}

NetworkPolicy: only pods labelled {{ include "gbe.labelList" .Values.networkPolicy.prometheusPodLabels }} in namespaces labelled {{ include "gbe.labelList" .Values.networkPolicy.prometheusNamespaceLabels }} reach the metrics port.
{{- if .Values.progressApi.enabled }}
Pushes to /v1/progress are admitted from {{ if .Values.networkPolicy.pushers.podLabels }}pods labelled {{ include "gbe.labelList" .Values.networkPolicy.pushers.podLabels }}{{ else }}any pod{{ end }} in {{ if .Values.networkPolicy.pushers.namespaceLabels }}namespaces labelled {{ include "gbe.labelList" .Values.networkPolicy.pushers.namespaceLabels }}{{ else }}any namespace{{ end }}; they share the port, so those pods can also read /metrics.
{{- end }}
{{- end }}
{{- if .Values.exporter.simulate }}

SIMULATED: exporter.simulate={{ .Values.exporter.simulate }}; these are not your GPUs.
{{- end }}
{{- end -}}
