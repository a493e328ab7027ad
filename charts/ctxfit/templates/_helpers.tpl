{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "ctxfit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: "<release>-<chart>", or just "<release>" when it already contains the chart name.
*/}}
{{- define "ctxfit.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "ctxfit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object of the chart carries.
*/}}
{{- define "ctxfit.labels" -}}
helm.sh/chart: {{ include "ctxfit.chart" . }}
{{ include "ctxfit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ctxfit
{{- end }}

{{/*
Labels that select the operator pods (stable across upgrades: never add to these).
*/}}
{{- define "ctxfit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ctxfit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "ctxfit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ctxfit.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator image reference: repository@digest, or repository:tag (tag defaults to appVersion).
*/}}
{{- define "ctxfit.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
"true" when leader election (peering) is on: peering.enabled, or (when that is null) replicaCount > 1; else "".
*/}}
{{- define "ctxfit.peeringEnabled" -}}
{{- if kindIs "bool" .Values.peering.enabled }}
{{- if .Values.peering.enabled }}true{{ end }}
{{- else if gt (int .Values.replicaCount) 1 }}true
{{- end }}
{{- end }}

{{/*
Namespaces the engine PodMonitor looks in: its own list, else watchNamespaces, else all.
*/}}
{{- define "ctxfit.engineNamespaces" -}}
{{- $ns := .Values.engineMonitoring.podMonitor.namespaces | default .Values.watchNamespaces }}
{{- if $ns }}
matchNames:
{{- range $ns }}
  - {{ . | quote }}
{{- end }}
{{- else }}
any: true
{{- end }}
{{- end }}

{{/*
PromQL shared by the PrometheusRule, the Grafana-managed alerts and (by name) the dashboards.
Engine series carry `namespace` (the pod's) and `server` (from the pod label ctxfit.io/server, added by
the engine PodMonitor); `server!=""` keeps engines ctxfit does not manage out.
*/}}

{{/*
KV-cache use of a server's hottest engine, 0..1: vLLM kv_cache_usage_perc, falling back to the
pre-0.10 name gpu_cache_usage_perc (`or` keeps a series only where the newer one is absent), and
SGLang token_usage.
*/}}
{{- define "ctxfit.expr.kvCacheUsage" -}}
max by (namespace, server) (
  vllm:kv_cache_usage_perc{server!=""}
  or vllm:gpu_cache_usage_perc{server!=""}
  or sglang:token_usage{server!=""}
)
{{- end }}

{{/*
Requests queued in a server (all its engines): vLLM num_requests_waiting, SGLang num_queue_reqs.
*/}}
{{- define "ctxfit.expr.requestsWaiting" -}}
sum by (namespace, server) (
  vllm:num_requests_waiting{server!=""}
  or sglang:num_queue_reqs{server!=""}
)
{{- end }}

{{/*
vLLM preemptions per second of a server. Argument: the rate window (e.g. "5m").
*/}}
{{- define "ctxfit.expr.preemptionRate" -}}
sum by (namespace, server) (rate(vllm:num_preemptions_total{server!=""}[{{ . }}]))
{{- end }}

{{/*
Common annotations of an alert: summary, description, runbook text, and runbook_url when a base URL
is set. Call with (dict "ctx" $ "alert" "Name" "summary" "..." "description" "..." "runbook" "...").
*/}}
{{- define "ctxfit.alertAnnotations" -}}
summary: {{ .summary | quote }}
description: {{ .description | quote }}
runbook: {{ .runbook | quote }}
{{- with .ctx.Values.prometheusRule.runbookBaseURL }}
runbook_url: {{ printf "%s#%s" (trimSuffix "/" .) (lower $.alert) | quote }}
{{- end }}
{{- end }}

{{/*
Labels of a prometheus-operator object: monitoring.labels (shared; e.g. `release: kube-prometheus-stack`,
which that stack's Prometheus selects by), overridden by the object's own labels. Call with
(dict "ctx" $ "own" .Values.<object>.labels).
*/}}
{{- define "ctxfit.monitoringLabels" -}}
{{- $labels := merge (deepCopy (.own | default dict)) (deepCopy (.ctx.Values.monitoring.labels | default dict)) -}}
{{- with $labels }}
{{- toYaml . }}
{{- end }}
{{- end }}
