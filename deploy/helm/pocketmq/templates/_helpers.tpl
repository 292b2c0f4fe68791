{{/*
Naming, labels and shared pod-spec pieces of the PocketMQ chart.
Object names are "<fullname>-<component>[-<group>]"; fullname is at most 40 characters so
"<fullname>-broker-a-headless" and the StatefulSet revision labels stay within Kubernetes limits.
*/}}

{{- define "pocketmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "pocketmq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pocketmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: (dict "ctx" $ "component" "namesrv|broker|test") */}}
{{- define "pocketmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pocketmq.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of every object: (dict "ctx" $ "component" "...") */}}
{{- define "pocketmq.labels" -}}
{{ include "pocketmq.selectorLabels" . }}
app.kubernetes.io/part-of: pocketmq
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "pocketmq.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* metadata.annotations block for commonAnnotations (indented by the caller). */}}
{{- define "pocketmq.commonAnnotations" -}}
{{- with .Values.commonAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Labels selecting every pod of this release (NetworkPolicy peers). */}}
{{- define "pocketmq.releasePodLabels" -}}
app.kubernetes.io/name: {{ include "pocketmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pocketmq.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "pocketmq.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A value as it must appear in a key=value file: integers without exponent notation. */}}
{{- define "pocketmq.confValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* ----- NameServer ----- */}}

{{- define "pocketmq.namesrv.fullname" -}}
{{- printf "%s-namesrv" (include "pocketmq.fullname" .) -}}
{{- end -}}

{{- define "pocketmq.namesrv.headless" -}}
{{- printf "%s-namesrv-headless" (include "pocketmq.fullname" .) -}}
{{- end -}}

{{- define "pocketmq.namesrv.serviceAccountName" -}}
{{- if .Values.namesrv.serviceAccount.create -}}
{{- default (include "pocketmq.namesrv.fullname" .) .Values.namesrv.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.namesrv.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* In-cluster address of the NameServer client Service (host:port). */}}
{{- define "pocketmq.namesrv.serviceAddr" -}}
{{- printf "%s.%s.svc.%s:%d" (include "pocketmq.namesrv.fullname" .) .Release.Namespace .Values.clusterDomain (int64 .Values.namesrv.containerPorts.grpc) -}}
{{- end -}}

{{/*
namesrvAddr for brokers: the headless Service name (Deployment; it resolves to every ready
NameServer pod and the broker registers with each address, re-resolving every round), every
NameServer by its stable name (StatefulSet), or broker.namesrvAddr when set.
*/}}
{{- define "pocketmq.namesrv.addr" -}}
{{- if .Values.broker.namesrvAddr -}}
{{- .Values.broker.namesrvAddr -}}
{{- else -}}
{{- $port := int64 .Values.namesrv.containerPorts.grpc -}}
{{- $headless := include "pocketmq.namesrv.headless" . -}}
{{- $suffix := printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- if eq .Values.namesrv.kind "StatefulSet" -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.namesrv.replicas) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s:%d" (include "pocketmq.namesrv.fullname" $) $i $headless $suffix $port) -}}
{{- end -}}
{{- join ";" $addrs -}}
{{- else -}}
{{- printf "%s.%s:%d" $headless $suffix $port -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* ----- Broker groups: (dict "ctx" $ "index" N) ----- */}}

{{/* brokerName of group N: broker-a, broker-b, ... */}}
{{- define "pocketmq.broker.groupName" -}}
{{- printf "broker-%c" (add 97 .index) -}}
{{- end -}}

{{- define "pocketmq.broker.fullname" -}}
{{- printf "%s-%s" (include "pocketmq.fullname" .ctx) (include "pocketmq.broker.groupName" .) -}}
{{- end -}}

{{- define "pocketmq.broker.headless" -}}
{{- printf "%s-headless" (include "pocketmq.broker.fullname" .) -}}
{{- end -}}

{{- define "pocketmq.broker.selectorLabels" -}}
{{ include "pocketmq.selectorLabels" (dict "ctx" .ctx "component" "broker") }}
pocketmq.io/broker-name: {{ include "pocketmq.broker.groupName" . }}
{{- end -}}

{{- define "pocketmq.broker.labels" -}}
{{ include "pocketmq.labels" (dict "ctx" .ctx "component" "broker") }}
pocketmq.io/broker-name: {{ include "pocketmq.broker.groupName" . }}
pocketmq.io/cluster: {{ .ctx.Values.broker.clusterName | quote }}
{{- end -}}

{{- define "pocketmq.broker.serviceAccountName" -}}
{{- if .Values.broker.serviceAccount.create -}}
{{- default (printf "%s-broker" (include "pocketmq.fullname" .)) .Values.broker.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.broker.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Keys the chart owns in broker.conf; broker.config may not set them. */}}
{{/* The Lease of a broker group under controllerMode kubernetes (<name>-members holds the
members' offsets). Takes (dict "ctx" $ "index" $i). */}}
{{- define "pocketmq.broker.leaseName" -}}
{{ include "pocketmq.broker.fullname" . }}-leader
{{- end -}}

{{- define "pocketmq.broker.reservedKeys" -}}
brokerClusterName brokerName brokerId brokerRole brokerIP1 namesrvAddr listenHost listenPort haListenPort metricsPort storePathRootDir flushDiskType haAuthSecret aclEnable aclConfigFile innerClientAuthenticationCredentials controllerMode controllerEtcdEndpoints controllerLeaseTtl controllerRenewInterval controllerK8sNamespace controllerK8sApiServer controllerK8sKubeconfig controllerK8sLeaseName {{ include "pocketmq.tlsKeys" . }}
{{- end -}}

{{/*
Name of the Secret holding the HA port's shared secret ("" = no HA authentication):
broker.haAuth.existingSecret, or "<fullname>-ha-auth" generated from broker.haAuth.value when
broker.haAuth.create. Contradictory values fail here.
*/}}
{{- define "pocketmq.broker.haAuthSecretName" -}}
{{- $a := .Values.broker.haAuth -}}
{{- if and $a.create $a.existingSecret -}}
{{- fail "broker.haAuth: set either existingSecret (recommended) or create, not both" -}}
{{- else if $a.existingSecret -}}
{{- if $a.value -}}
{{- fail "broker.haAuth.value is ignored with broker.haAuth.existingSecret; remove it" -}}
{{- end -}}
{{- $a.existingSecret -}}
{{- else if $a.create -}}
{{- if lt (len (trim $a.value)) 16 -}}
{{- fail "broker.haAuth.value must be at least 16 characters (random, e.g. openssl rand -hex 32) when broker.haAuth.create is true" -}}
{{- end -}}
{{- printf "%s-ha-auth" (include "pocketmq.fullname" .) -}}
{{- else if $a.value -}}
{{- fail "broker.haAuth.value is set but broker.haAuth.create is false: set create: true, or use existingSecret" -}}
{{- end -}}
{{- end -}}

{{/* broker.conf of one group (also hashed into the pod template's checksum annotation). */}}
{{- define "pocketmq.broker.conf" -}}
{{- $v := .ctx.Values.broker -}}
# broker.conf of broker group {{ include "pocketmq.broker.groupName" . }}, rendered by the pocketmq chart.
# Pod-specific keys come from the environment, not from this file:
#   brokerId   = the pod's StatefulSet ordinal; ordinals > 0 also get brokerRole=SLAVE
#                (python -m services.broker.k8s_env sets POCKETMQ_BROKER_ID / POCKETMQ_BROKER_ROLE)
#   brokerIP1  = POCKETMQ_BROKER_IP1 ({{ $v.advertise }})
#   controllerMode = POCKETMQ_CONTROLLER_MODE ({{ $v.controllerMode }}; under a controller the
#                brokerId is the ordinal + 1 and every pod starts as a slave of the elected master)
brokerClusterName={{ $v.clusterName }}
brokerName={{ include "pocketmq.broker.groupName" . }}
brokerRole={{ $v.masterRole }}
namesrvAddr={{ include "pocketmq.namesrv.addr" .ctx }}
listenHost=0.0.0.0
listenPort={{ int64 $v.containerPorts.grpc }}
haListenPort={{ int64 $v.containerPorts.ha }}
metricsPort={{ if .ctx.Values.metrics.enabled }}{{ int64 $v.containerPorts.metrics }}{{ else }}0{{ end }}
storePathRootDir=/data/store
flushDiskType={{ $v.flushDiskType }}
{{- if ne $v.controllerMode "none" }}
controllerLeaseTtl={{ int64 $v.controller.leaseTtl }}
controllerRenewInterval={{ int64 $v.controller.renewInterval }}
{{- end }}
{{- if eq $v.controllerMode "etcd" }}
controllerEtcdEndpoints={{ $v.controller.etcdEndpoints }}
{{- end }}
{{- if eq $v.controllerMode "kubernetes" }}
controllerK8sLeaseName={{ include "pocketmq.broker.leaseName" . }}
{{- end }}
{{- with include "pocketmq.tlsConf" (dict "ctx" .ctx "health" $v.containerPorts.health "broker" true) }}
{{ . }}
{{- end }}
{{- $reserved := splitList " " (include "pocketmq.broker.reservedKeys" .ctx) }}
{{- range $key, $value := $v.config }}
{{- if eq $key "haAuthSecret" }}
{{- fail "broker.config.haAuthSecret would put the secret in a ConfigMap; use broker.haAuth (a Secret) instead" }}
{{- else if has $key $reserved }}
{{- fail (printf "broker.config.%s is set by the chart; use the dedicated value instead" $key) }}
{{- end }}
{{ $key }}={{ include "pocketmq.confValue" $value }}
{{- end }}
{{- end -}}

{{/* namesrv.conf (listen and metricsPort are command-line flags). */}}
{{- define "pocketmq.namesrv.conf" -}}
# namesrv.conf, rendered by the pocketmq chart. listen and metricsPort are set by flags.
{{- $tlsKeys := splitList " " (include "pocketmq.tlsKeys" .) }}
{{- range $key, $value := .Values.namesrv.config }}
{{- if has $key (list "listen" "metricsPort") }}
{{- fail (printf "namesrv.config.%s is set by the chart; use namesrv.containerPorts instead" $key) }}
{{- end }}
{{- if has $key $tlsKeys }}
{{- fail (printf "namesrv.config.%s is set by the chart; use the tls values instead" $key) }}
{{- end }}
{{- if eq $key "readinessWarmUpMills" }}
{{- fail "namesrv.config.readinessWarmUpMills is set by the chart; use namesrv.readinessWarmUpSeconds instead" }}
{{- end }}
{{ $key }}={{ include "pocketmq.confValue" $value }}
{{- end }}
readinessWarmUpMills={{ mul (int64 .Values.namesrv.readinessWarmUpSeconds) 1000 }}
{{- with include "pocketmq.tlsConf" (dict "ctx" . "health" .Values.namesrv.containerPorts.health "broker" false) }}
{{ . }}
{{- end }}
{{- end -}}

{{/* ----- Pod-spec pieces ----- */}}

{{/* The keys tls.* sets (reserved in broker.config / namesrv.config). */}}
{{- define "pocketmq.tlsKeys" -}}
tlsEnable tlsServerMode tlsListenPort tlsServerCertPath tlsServerKeyPath tlsServerNeedClientAuth tlsServerTrustCertPath tlsClientTrustCertPath tlsClientCertPath tlsClientKeyPath tlsClientServerName healthListenPort haTlsEnable
{{- end -}}

{{/* Where the tls.existingSecret is mounted. */}}
{{- define "pocketmq.tlsDir" -}}/etc/pocketmq-tls{{- end -}}

{{/* The name certificates are checked for (tls.serverName, default the fullname). */}}
{{- define "pocketmq.tlsServerName" -}}
{{- default (include "pocketmq.fullname" .) .Values.tls.serverName -}}
{{- end -}}

{{/* conf lines of tls.*: (dict "ctx" $ "health" <port> "broker" true|false). */}}
{{- define "pocketmq.tlsConf" -}}
{{- $t := .ctx.Values.tls -}}
{{- if $t.enabled -}}
{{- if not $t.existingSecret }}{{ fail "tls.enabled needs tls.existingSecret (a Secret with tls.crt, tls.key and ca.crt)" }}{{ end -}}
{{- $dir := include "pocketmq.tlsDir" . }}
tlsEnable=true
tlsServerMode=enforcing
tlsServerCertPath={{ $dir }}/tls.crt
tlsServerKeyPath={{ $dir }}/tls.key
tlsServerTrustCertPath={{ $dir }}/ca.crt
tlsServerNeedClientAuth={{ if $t.requireClientCert }}require{{ else }}none{{ end }}
tlsClientServerName={{ include "pocketmq.tlsServerName" .ctx }}
healthListenPort={{ int64 .health }}
{{- if and .broker $t.ha }}
haTlsEnable=true
{{- end }}
{{- end -}}
{{- end -}}

{{/* The tls.existingSecret volume and its mount (nothing without tls.enabled). */}}
{{- define "pocketmq.tlsVolume" -}}
{{- if .Values.tls.enabled -}}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
{{- end -}}
{{- end -}}
{{- define "pocketmq.tlsVolumeMount" -}}
{{- if .Values.tls.enabled -}}
- name: tls
  mountPath: {{ include "pocketmq.tlsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The port probes use: the plaintext health port with TLS on, else the gRPC port. (dict "ctx" $ "v" <component values>) */}}
{{- define "pocketmq.probePort" -}}
{{- if .ctx.Values.tls.enabled }}{{ int64 .v.containerPorts.health }}{{ else }}{{ int64 .v.containerPorts.grpc }}{{ end -}}
{{- end -}}

{{/* A native gRPC probe on grpc.health.v1: (dict "probe" <values> "port" N ["service" name]) */}}
{{- define "pocketmq.grpcProbe" -}}
grpc:
  port: {{ int64 .port }}
  {{- with .service }}
  service: {{ . }}
  {{- end }}
periodSeconds: {{ int64 .probe.periodSeconds }}
timeoutSeconds: {{ int64 .probe.timeoutSeconds }}
failureThreshold: {{ int64 .probe.failureThreshold }}
{{- end -}}

{{/* Pod anti-affinity preset: (dict "preset" soft|hard|none "labels" <selector labels yaml>) */}}
{{- define "pocketmq.antiAffinity" -}}
{{- if eq .preset "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- .labels | nindent 12 }}
{{- else if eq .preset "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- .labels | nindent 10 }}
{{- end }}
{{- end -}}

{{/* Environment every PocketMQ container gets. */}}
{{- define "pocketmq.logEnv" -}}
- name: POCKETMQ_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: POCKETMQ_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
{{- end -}}

{{/* Name of the Secret with the ACL file and the brokers' credential ("" = access control off). */}}
{{- define "pocketmq.acl.secretName" -}}
{{- if .Values.acl.enabled -}}
{{- default (printf "%s-acl" (include "pocketmq.fullname" .)) .Values.acl.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* Where pods mount the ACL Secret (a directory: Secret updates reach it). */}}
{{- define "pocketmq.acl.mountPath" -}}/etc/pocketmq-acl{{- end -}}

{{/* Server flags turning access control on (NameServer and broker). */}}
{{- define "pocketmq.acl.args" -}}
{{- if .Values.acl.enabled -}}
- "--acl-enable"
- "true"
- "--acl-config-file"
- "{{ include "pocketmq.acl.mountPath" . }}/{{ .Values.acl.fileKey }}"
- "--acl-signature-window-mills"
- "{{ int64 .Values.acl.signatureWindowMills }}"
{{- end -}}
{{- end -}}

{{/* The ACL Secret's volume and mount (by name "acl"). */}}
{{- define "pocketmq.acl.volume" -}}
{{- with include "pocketmq.acl.secretName" . -}}
- name: acl
  secret:
    secretName: {{ . }}
{{- end -}}
{{- end -}}
{{- define "pocketmq.acl.volumeMount" -}}
{{- if .Values.acl.enabled -}}
- name: acl
  mountPath: {{ include "pocketmq.acl.mountPath" . }}
  readOnly: true
{{- end -}}
{{- end -}}
