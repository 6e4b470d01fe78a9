{{/*
The gateway container and its volumes, used by this chart's Deployment (standalone mode) and by
your application's chart (sidecar mode). In sidecar mode, add mirrorgate as a dependency of your
chart and, in your Deployment's pod template, include:

  metadata:
    annotations:
      {{- include "mirrorgate.sidecar.podAnnotations" .Subcharts.mirrorgate | nindent 8 }}
    labels:
      {{- include "mirrorgate.sidecar.podLabels" .Subcharts.mirrorgate | nindent 8 }}
  spec:
    containers:
      - name: app
        env: [{name: OPENAI_BASE_URL, value: "http://127.0.0.1:8080/v1"}]
      {{- include "mirrorgate.sidecar.container" .Subcharts.mirrorgate | nindent 6 }}
    volumes:
      {{- include "mirrorgate.sidecar.volumes" .Subcharts.mirrorgate | nindent 6 }}

docs/helm.md has the whole example.
*/}}

{{- define "mirrorgate.container" -}}
- name: mirrorgate
  image: {{ include "mirrorgate.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve", "--config", "/etc/mirrorgate/mirrorgate.yaml"]
  ports:
    - name: {{ .Values.portName }}
      containerPort: {{ .Values.port }}
      protocol: TCP
  env:
    - name: {{ .Values.adminToken.env }}
      valueFrom:
        secretKeyRef:
          name: {{ .Values.adminToken.secretName }}
          key: {{ .Values.adminToken.key }}
    {{- range $name, $ref := .Values.secretEnv }}
    - name: {{ $name }}
      valueFrom:
        secretKeyRef:
          name: {{ $ref.secretName }}
          key: {{ $ref.key }}
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.probes }}
  startupProbe:
    httpGet: {path: {{ .startup.path }}, port: {{ $.Values.portName }}}
    periodSeconds: {{ .startup.periodSeconds }}
    failureThreshold: {{ .startup.failureThreshold }}
    timeoutSeconds: {{ .startup.timeoutSeconds }}
  livenessProbe:
    httpGet: {path: {{ .liveness.path }}, port: {{ $.Values.portName }}}
    periodSeconds: {{ .liveness.periodSeconds }}
    failureThreshold: {{ .liveness.failureThreshold }}
    timeoutSeconds: {{ .liveness.timeoutSeconds }}
  readinessProbe:
    httpGet: {path: {{ .readiness.path }}, port: {{ $.Values.portName }}}
    periodSeconds: {{ .readiness.periodSeconds }}
    failureThreshold: {{ .readiness.failureThreshold }}
    timeoutSeconds: {{ .readiness.timeoutSeconds }}
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: mirrorgate-config
      mountPath: /etc/mirrorgate
      readOnly: true
    - name: mirrorgate-data
      mountPath: /data
    - name: mirrorgate-journal
      mountPath: /var/lib/mirrorgate/journal
    - name: mirrorgate-tmp
      mountPath: /tmp
{{- end }}

{{- define "mirrorgate.volumes" -}}
- name: mirrorgate-config
  configMap:
    name: {{ include "mirrorgate.fullname" . }}
- name: mirrorgate-data
  emptyDir:
    sizeLimit: {{ .Values.dataVolume.sizeLimit }}
- name: mirrorgate-journal
  emptyDir:
    sizeLimit: {{ .Values.journalVolume.sizeLimit }}
- name: mirrorgate-tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
{{- end }}

{{- define "mirrorgate.podAnnotations" -}}
checksum/mirrorgate-config: {{ include "mirrorgate.configYaml" . | sha256sum }}
{{- end }}

{{/* The sidecar API: stable names for applications' charts. */}}
{{- define "mirrorgate.sidecar.container" -}}
{{ include "mirrorgate.container" . }}
{{- end }}

{{- define "mirrorgate.sidecar.volumes" -}}
{{ include "mirrorgate.volumes" . }}
{{- end }}

{{- define "mirrorgate.sidecar.podAnnotations" -}}
{{ include "mirrorgate.podAnnotations" . }}
{{- end }}

{{/* Selects the application's pods for the PodMonitor. */}}
{{- define "mirrorgate.sidecar.podLabels" -}}
mirrorgate.io/sidecar: {{ include "mirrorgate.fullname" . }}
{{- end }}
