{{/* A HorizontalPodAutoscaler on CPU; pass (dict "root" $ "name" <deployment> "component" c "autoscaling" <values>). */}}
{{- define "engram.hpa" }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .name }}
  labels:
    {{- include "engram.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .name }}
  minReplicas: {{ .autoscaling.minReplicas }}
  maxReplicas: {{ .autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .autoscaling.targetCPUUtilizationPercentage }}
{{- end }}

{{/* A PodDisruptionBudget; pass (dict "root" $ "name" n "component" c "pdb" <values>). */}}
{{- define "engram.pdb" }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "engram.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  maxUnavailable: {{ .pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "engram.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}

{{/* A KEDA ScaledObject: one redis list-length trigger per Celery queue and priority step (Celery's Redis
     transport keeps each queue as one list per step: the queue's name, then "<queue>\x06\x16<step>" for steps
     1-9, workers/fairness.py; the autoscaler follows the longest list); pass (dict "root" $ "name" n
     "component" c "autoscaling" a "queues" q). */}}
{{- define "engram.scaledObject" }}
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {{ .name }}
  labels:
    {{- include "engram.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .name }}
  pollingInterval: {{ .root.Values.keda.pollingInterval }}
  cooldownPeriod: {{ .root.Values.keda.cooldownPeriod }}
  minReplicaCount: {{ .autoscaling.minReplicas }}
  maxReplicaCount: {{ .autoscaling.maxReplicas }}
  triggers:
    {{- range $queue := splitList "," .queues }}
    {{- range $step := until 10 }}
    - type: redis
      metadata:
        address: {{ printf "%s:%v" $.root.Values.redis.host $.root.Values.redis.port | quote }}
        databaseIndex: {{ $.root.Values.redis.brokerDb | quote }}
        listName: {{ if $step }}{{ printf "%s\x06\x16%d" $queue $step | quote }}{{ else }}{{ $queue | quote }}{{ end }}
        listLength: {{ $.autoscaling.listLength | quote }}
      {{- if eq (include "engram.redisAuth" $.root) "true" }}
      authenticationRef:
        name: {{ include "engram.fullname" $.root }}-redis
      {{- end }}
    {{- end }}
    {{- end }}
{{- end }}
