{{/* Names, labels, images and the environment shared by every engram pod. */}}

{{- define "engram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "engram.fullname" -}}
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

{{/* Labels of every object; pass (dict "root" $ "component" "api"). */}}
{{- define "engram.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "engram.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: engram
{{- end -}}

{{/* Selector labels; pass (dict "root" $ "component" "api"). */}}
{{- define "engram.selectorLabels" -}}
app.kubernetes.io/name: {{ include "engram.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{- define "engram.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "engram.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "repository:tag" of one image of .Values.image; pass (dict "root" $ "image" .Values.image.api). */}}
{{- define "engram.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The Secret every pod reads its secret environment from: secrets.existingSecret or the chart's own. */}}
{{- define "engram.secretName" -}}
{{- default (printf "%s-secrets" (include "engram.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The Secret a pod reads ENGRAM_VAULT_KEY from, as "name/key": vault.existingSecret, else
     secrets.existingSecret, else the chart's Secret when secrets.vaultKey is given, else <fullname>-vault, which
     the vault-keygen hook Job makes once. Never a key made at render time. */}}
{{- define "engram.vaultKeyRef" -}}
{{- if .Values.vault.existingSecret -}}
{{- printf "%s/%s" .Values.vault.existingSecret .Values.vault.existingSecretKey -}}
{{- else if .Values.secrets.existingSecret -}}
{{- printf "%s/%s" .Values.secrets.existingSecret .Values.vault.existingSecretKey -}}
{{- else if .Values.secrets.vaultKey -}}
{{- printf "%s/ENGRAM_VAULT_KEY" (include "engram.secretName" .) -}}
{{- else -}}
{{- printf "%s-vault/ENGRAM_VAULT_KEY" (include "engram.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the vault-keygen hook Job makes the vault's Secret (no Secret named, no key given). */}}
{{- define "engram.vaultKeygen" -}}
{{- if not (or .Values.vault.existingSecret .Values.secrets.existingSecret .Values.secrets.vaultKey) -}}true{{- end -}}
{{- end -}}

{{/* "true" when Redis needs a password (from redis.existingSecret or redis.password). */}}
{{- define "engram.redisAuth" -}}
{{- if or .Values.redis.existingSecret .Values.redis.password -}}true{{- end -}}
{{- end -}}

{{/* (secret name, key) holding the Redis password, as "name/key". */}}
{{- define "engram.redisPasswordRef" -}}
{{- if .Values.redis.existingSecret -}}
{{- printf "%s/%s" .Values.redis.existingSecret .Values.redis.existingSecretPasswordKey -}}
{{- else -}}
{{- printf "%s/REDIS_PASSWORD" (include "engram.secretName" .) -}}
{{- end -}}
{{- end -}}

{{/* A Redis URL of database $db; the password is expanded by Kubernetes from REDIS_PASSWORD. */}}
{{- define "engram.redisUrl" -}}
{{- $auth := ternary ":$(REDIS_PASSWORD)@" "" (eq (include "engram.redisAuth" .root) "true") -}}
{{- printf "redis://%s%s:%v/%v" $auth (required "redis.host is required" .root.Values.redis.host) .root.Values.redis.port .db -}}
{{- end -}}

{{- define "engram.secretKeyRef" -}}
valueFrom:
  secretKeyRef:
    name: {{ .name }}
    key: {{ .key }}
{{- end -}}

{{/* The environment of every engram container: the Redis URLs (after the password they expand) and the
     secrets read from the official charts' own Secrets. Everything else comes from envFrom. */}}
{{- define "engram.env" -}}
{{- if eq (include "engram.redisAuth" .) "true" }}
{{- $ref := splitList "/" (include "engram.redisPasswordRef" .) }}
- name: REDIS_PASSWORD
  {{- include "engram.secretKeyRef" (dict "name" (index $ref 0) "key" (index $ref 1)) | nindent 2 }}
{{- end }}
{{- $vault := splitList "/" (include "engram.vaultKeyRef" .) }}
- name: ENGRAM_VAULT_KEY
  {{- include "engram.secretKeyRef" (dict "name" (index $vault 0) "key" (index $vault 1)) | nindent 2 }}
- name: ENGRAM_BROKER_URL
  value: {{ include "engram.redisUrl" (dict "root" . "db" .Values.redis.brokerDb) | quote }}
- name: ENGRAM_RESULT_BACKEND
  value: {{ include "engram.redisUrl" (dict "root" . "db" .Values.redis.resultDb) | quote }}
- name: ENGRAM_REDIS_URL
  value: {{ include "engram.redisUrl" (dict "root" . "db" .Values.redis.brokerDb) | quote }}
{{- with .Values.s3.existingSecret }}
- name: ENGRAM_S3_ACCESS_KEY
  {{- include "engram.secretKeyRef" (dict "name" . "key" $.Values.s3.existingSecretAccessKeyKey) | nindent 2 }}
- name: ENGRAM_S3_SECRET_KEY
  {{- include "engram.secretKeyRef" (dict "name" . "key" $.Values.s3.existingSecretSecretKeyKey) | nindent 2 }}
{{- end }}
{{- with .Values.qdrant.existingSecret }}
- name: ENGRAM_QDRANT_API_KEY
  {{- include "engram.secretKeyRef" (dict "name" . "key" $.Values.qdrant.existingSecretApiKeyKey) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A map of extra variables as an env list. */}}
{{- define "engram.envMap" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "engram.envFrom" -}}
- configMapRef:
    name: {{ include "engram.fullname" . }}-config
- secretRef:
    name: {{ include "engram.secretName" . }}
{{- end -}}

{{/* Pod annotations: checksums that roll the pods when settings change, and Prometheus scrape hints. */}}
{{- define "engram.podAnnotations" -}}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
checksum/secret: {{ include (print .root.Template.BasePath "/secret.yaml") .root | sha256sum }}
{{- if and .root.Values.metrics.enabled .root.Values.metrics.podAnnotations .port }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Scheduling, security and image-pull settings shared by the pod specs; pass (dict "root" $ "pod" <values>). */}}
{{- define "engram.podCommon" -}}
serviceAccountName: {{ include "engram.serviceAccountName" .root }}
automountServiceAccountToken: false
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .pod.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .pod.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .pod.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The queues a worker group serves: its own, plus perceive.gpu on the CPU group while no GPU group runs. */}}
{{- define "engram.workerQueues" -}}
{{- $group := index .root.Values.workers .name -}}
{{- $queues := $group.queues -}}
{{- if and (eq .name "cpu") $group.gpuFallback (not .root.Values.workers.gpu.enabled) (not (has "perceive.gpu" $queues)) -}}
{{- $queues = append $queues "perceive.gpu" -}}
{{- end -}}
{{- join "," $queues -}}
{{- end -}}

{{/* The worker groups, in DESIGN.md's order. */}}
{{- define "engram.workerGroups" -}}cpu gpu store query{{- end -}}
