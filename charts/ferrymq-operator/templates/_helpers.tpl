{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "ferrymq-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name used for every object of the chart. */}}
{{- define "ferrymq-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ferrymq-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferrymq-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ferrymq-operator.labels" -}}
{{ include "ferrymq-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ferrymq
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ferrymq-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ferrymq-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* policy/v1 from Kubernetes 1.21; 1.20 serves only policy/v1beta1. */}}
{{- define "ferrymq-operator.pdbApiVersion" -}}
{{- if or (.Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget") (.Capabilities.APIVersions.Has "policy/v1") -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{/*
batch/v1 CronJob from Kubernetes 1.21; 1.20 serves CronJob only in batch/v1beta1 (its batch/v1 has
Jobs only, so the check must name the kind). Kept for the audit CronJobs of a later release.
*/}}
{{- define "ferrymq-operator.cronJobApiVersion" -}}
{{- if .Capabilities.APIVersions.Has "batch/v1/CronJob" -}}
batch/v1
{{- else -}}
batch/v1beta1
{{- end -}}
{{- end -}}

{{/*
Rules for the namespaced resources the operator manages; used by the ClusterRole (all namespaces)
or by one Role per watched namespace. Delete verbs only where the operator removes something the
spec no longer asks for (removed slaves' claims on opt-in, the audit CronJob); everything else is
removed by the garbage collector through ownerReferences.
*/}}
{{- define "ferrymq-operator.namespacedRules" -}}
- apiGroups: ["ferrymq.io"]
  resources: ["nameservers", "brokers", "consoles"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ferrymq.io"]
  resources: ["nameservers/status", "brokers/status", "consoles/status"]
  verbs: ["get", "patch", "update"]
# Topic and ConsumerGroup: patch also sets and removes the operator's finalizer.
- apiGroups: ["ferrymq.io"]
  resources: ["topics", "consumergroups"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ferrymq.io"]
  resources: ["topics/status", "consumergroups/status"]
  verbs: ["get", "patch", "update"]
# delete: a broker group's StatefulSet, ConfigMap and PDB once a drained scale-in removed it.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# A Console's rocketmq-dashboard.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# spec.acl/spec.tls: read the user's Secrets; create the namespace's operator account and create
# and renew the CA and certificate Secrets (those garbage-collected with their owner).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "create", "patch", "update"]
# spec.tls.issuerRef: a cert-manager Certificate per NameServer/Broker (when cert-manager is used).
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "list", "create", "patch", "update"]
# spec.networkPolicy: one NetworkPolicy per broker group.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# delete: the rolling update deletes one pod at a time (StatefulSets use updateStrategy OnDelete).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete"]
# The audit claim of spec.audit; patch also grows the store claims (storage.size); delete only
# with storage.deleteClaimOnScaleDown (removed slaves).
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "create", "patch", "delete"]
# The audit CronJob of spec.audit (deleted when spec.audit is removed).
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# spec.failover controller: the controller's ServiceAccount, Role and RoleBinding; the operator
# holds the Lease verbs it grants there (RBAC lets no one grant what it does not hold).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end -}}
