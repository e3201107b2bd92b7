{{/* The chart name, or nameOverride. */}}
{{- define "countersign.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: fullnameOverride, or "<release>-<name>" (just the
release name when it already contains the chart name). Kept to 48 characters so that
"-worker-metrics" still fits a 63-character name.
*/}}
{{- define "countersign.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "countersign.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select one component's pods. Takes (dict "root" $ "component" "api"). */}}
{{- define "countersign.selectorLabels" -}}
app.kubernetes.io/name: {{ include "countersign.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every label of one component's resources. Takes (dict "root" $ "component" "api"). */}}
{{- define "countersign.labels" -}}
helm.sh/chart: {{ include "countersign.chart" .root }}
{{ include "countersign.selectorLabels" . }}
app.kubernetes.io/part-of: countersign
app.kubernetes.io/version: {{ include "countersign.imageTag" .root | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* Labels shared by the whole release (ConfigMap, ServiceAccount, ServiceMonitor). */}}
{{- define "countersign.releaseLabels" -}}
helm.sh/chart: {{ include "countersign.chart" . }}
app.kubernetes.io/name: {{ include "countersign.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: countersign
app.kubernetes.io/version: {{ include "countersign.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "countersign.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "countersign.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "countersign.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "countersign.image" -}}
{{- required "image.repository: name the Countersign image" .Values.image.repository }}:{{ include "countersign.imageTag" . }}
{{- end }}

{{/* Where countersign.toml is mounted. */}}
{{- define "countersign.configPath" -}}
/etc/countersign/countersign.toml
{{- end }}

{{/*
One environment variable read from an existing Secret.
Takes (dict "env" "COUNTERSIGN_DATABASE_URL" "secret" NAME "key" KEY "field" "database").
*/}}
{{- define "countersign.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "%s.existingSecret: name the Secret that holds %s" .field .env) .secret | quote }}
      key: {{ required (printf "%s: name the key of %s in the Secret" .keyField .env) .key | quote }}
{{- end }}

{{/* The database and Redis URLs of api and worker pods, from their Secrets. */}}
{{- define "countersign.backendEnv" -}}
{{ include "countersign.secretEnv" (dict "env" "COUNTERSIGN_DATABASE_URL" "secret" .Values.database.existingSecret "key" .Values.database.urlKey "field" "database" "keyField" "database.urlKey") }}
{{ include "countersign.secretEnv" (dict "env" "COUNTERSIGN_REDIS_URL" "secret" .Values.redis.existingSecret "key" .Values.redis.urlKey "field" "redis" "keyField" "redis.urlKey") }}
{{- end }}

{{/* OpenTelemetry export (include it only when otel.endpoint is set). Takes (dict "root" $ "component" "api"). */}}
{{- define "countersign.otelEnv" -}}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .root.Values.otel.endpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ default (printf "%s-%s" (include "countersign.fullname" .root) .component) .root.Values.otel.serviceName | quote }}
{{- end }}

{{/* config.shutdown.grace in whole seconds ("30s", "2m"); fails on any other form. */}}
{{- define "countersign.graceSeconds" -}}
{{- $grace := .Values.config.shutdown.grace }}
{{- if not (kindIs "string" $grace) }}
{{- fail (printf "config.shutdown.grace: expected a duration string like \"30s\" or \"2m\", got %v" $grace) }}
{{- end }}
{{- if regexMatch "^[0-9]+s$" $grace }}
{{- trimSuffix "s" $grace }}
{{- else if regexMatch "^[0-9]+m$" $grace }}
{{- mul (trimSuffix "m" $grace | int) 60 }}
{{- else }}
{{- fail (printf "config.shutdown.grace: expected whole seconds or minutes like \"30s\" or \"2m\", got %q" $grace) }}
{{- end }}
{{- end }}

{{/* A duration value of countersign.toml, as a TOML string; fails naming the key otherwise. */}}
{{- define "countersign.duration" -}}
{{- if not (and (kindIs "string" .value) (regexMatch "^[0-9]+(ms|s|m|h|d)$" .value)) }}
{{- fail (printf "%s: expected a duration like \"500ms\", \"30s\", \"5m\", \"1h\" or \"7d\", got %v" .field .value) }}
{{- end }}
{{- .value | toJson }}
{{- end }}

{{/* A positive integer value of countersign.toml; fails naming the key otherwise. */}}
{{- define "countersign.positiveInt" -}}
{{- if not (and (or (kindIs "float64" .value) (kindIs "int" .value) (kindIs "int64" .value)) (ge (int .value) 1) (eq (float64 (int .value)) (float64 .value))) }}
{{- fail (printf "%s: expected a whole number of at least 1, got %v" .field .value) }}
{{- end }}
{{- int .value }}
{{- end }}

{{/* A whole number (0 or more) of countersign.toml; fails naming the key otherwise. */}}
{{- define "countersign.wholeNumber" -}}
{{- if not (and (or (kindIs "float64" .value) (kindIs "int" .value) (kindIs "int64" .value)) (ge (int .value) 0) (eq (float64 (int .value)) (float64 .value))) }}
{{- fail (printf "%s: expected a whole number of at least 0, got %v" .field .value) }}
{{- end }}
{{- int .value }}
{{- end }}

{{/* Checks that span several values; included by the ConfigMap. */}}
{{- define "countersign.validate" -}}
{{- $grace := include "countersign.graceSeconds" . | int }}
{{- if le (int .Values.terminationGracePeriodSeconds) $grace }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed config.shutdown.grace (%ds), or Kubernetes kills pods mid-drain" .Values.terminationGracePeriodSeconds $grace) }}
{{- end }}
{{- if not (has .Values.config.log.format (list "json" "text")) }}
{{- fail (printf "config.log.format: expected \"json\" or \"text\", got %v" .Values.config.log.format) }}
{{- end }}
{{- range $role := list "api" "worker" }}
{{- $scaling := (index $.Values $role).autoscaling }}
{{- if and $scaling.enabled (gt (int $scaling.minReplicas) (int $scaling.maxReplicas)) }}
{{- fail (printf "%s.autoscaling.minReplicas (%v) exceeds %s.autoscaling.maxReplicas (%v)" $role $scaling.minReplicas $role $scaling.maxReplicas) }}
{{- end }}
{{- end }}
{{- end }}
