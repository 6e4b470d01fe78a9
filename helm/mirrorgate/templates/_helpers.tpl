{{/* Names, labels and the rendered mirrorgate.yaml, shared by every template. */}}

{{- define "mirrorgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release-qualified name of every object; the release name alone when it already says
mirrorgate. */}}
{{- define "mirrorgate.fullname" -}}
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

{{- define "mirrorgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mirrorgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mirrorgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mirrorgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "mirrorgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "mirrorgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mirrorgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* mirrorgate.yaml: the `config` values with the listening address, port and admin token
variable that the container is given, (standalone) the Service's DNS names in
server.allowed_hosts, and the crash journal in its own emptyDir. */}}
{{- define "mirrorgate.configYaml" -}}
{{- $config := deepCopy .Values.config }}
{{- $server := deepCopy (get $config "server" | default dict) }}
{{- $_ := set $server "host" "0.0.0.0" }}
{{- $_ = set $server "port" (int .Values.port) }}
{{- $_ = set $server "admin_token_env" .Values.adminToken.env }}
{{- if eq .Values.mode "standalone" }}
{{- /* State-changing admin calls are answered only under a name of the gateway: add the Service's. */}}
{{- $svc := include "mirrorgate.fullname" . }}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) }}
{{- $_ = set $server "allowed_hosts" (concat (get $server "allowed_hosts" | default list) $names | uniq) }}
{{- end }}
{{- $_ = set $config "server" $server }}
{{- $store := deepCopy (get $config "store" | default dict) }}
{{- $_ = set $store "journal_dir" "/var/lib/mirrorgate/journal" }}
{{- $_ = set $config "store" $store }}
{{- toYaml $config }}
{{- end }}

{{/* Refuse configurations that cannot work, with the reason. */}}
{{- define "mirrorgate.validate" -}}
{{- if not (has .Values.mode (list "standalone" "sidecar")) }}
{{- fail (printf "mode must be standalone or sidecar, not %q" .Values.mode) }}
{{- end }}
{{- $store := get .Values.config "store" | default dict }}
{{- $url := get $store "url" | default "sqlite:///mirrorgate.db" }}
{{- if and (eq .Values.mode "standalone") (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) (hasPrefix "sqlite" $url) }}
{{- fail "several replicas (replicaCount > 1 or autoscaling.enabled) need a shared store: set config.store.url to a postgresql+psycopg:// URL (each pod would otherwise keep its own SQLite file and its own rollout state)" }}
{{- end }}
{{- end }}
