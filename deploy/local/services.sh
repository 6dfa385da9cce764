#!/usr/bin/env bash
# Installs (where missing) and starts the services MaaS needs on one machine:
# PostgreSQL, Redis and RabbitMQ with its management, AMQP 1.0, MQTT, Prometheus and shovel
# plugins and MaaS's topic exchange type; and installs Prometheus's tools (started by no one here).
# Services already running are used as they are. Safe to run again.
set -euo pipefail

DB_NAME="${MAAS_DB_NAME:-maas}"
RABBITMQ_MQTT_PORT="${MAAS_RABBITMQ_MQTT_PORT:-1884}"   # 1883 usually belongs to Mosquitto
# RabbitMQ's TLS listeners; also read as the platform reads them (maas/settings.py). MQTTS is not
# 8883: that and 8886 are other MQTTS listeners of ours.
RABBITMQ_AMQPS_PORT="${MAAS_RABBITMQ_AMQPS_PORT:-${RABBITMQ_AMQPS_PORT:-5671}}"
RABBITMQ_MQTTS_PORT="${MAAS_RABBITMQ_MQTTS_PORT:-${RABBITMQ_MQTTS_PORT:-8884}}"

log() { printf '[services] %s\n' "$*" >&2; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 "${2:-60}"); do listening "$1" && return 0; sleep 1; done
  log "port $1 did not open"; return 1
}

apt_updated=""
need_pkg() {  # need_pkg COMMAND PACKAGE...
  command -v "$1" >/dev/null 2>&1 && return 0
  shift
  if [ "$(id -u)" != 0 ]; then log "missing $*: install it (needs root)"; exit 1; fi
  [ -n "$apt_updated" ] || { DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; }
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# PostgreSQL
if ! listening 5432; then
  need_pkg pg_ctlcluster postgresql
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  log "starting PostgreSQL $ver"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  wait_port 5432
fi
if ! psql -h 127.0.0.1 -U "${PGUSER:-postgres}" -d postgres -tAc "select 1 from pg_database where datname='$DB_NAME'" 2>/dev/null | grep -q 1; then
  if psql -h 127.0.0.1 -U "${PGUSER:-postgres}" -d postgres -tAc 'select 1' >/dev/null 2>&1; then
    createdb -h 127.0.0.1 -U "${PGUSER:-postgres}" "$DB_NAME" && log "created database $DB_NAME"
  else
    su postgres -c "psql -tAc \"do \\\$\\\$ begin if not exists (select from pg_roles where rolname='postgres') then create role postgres superuser login; end if; end \\\$\\\$\"" >/dev/null 2>&1 || true
    su postgres -c "createdb $DB_NAME" 2>/dev/null || true
  fi
fi

# Redis
if ! listening 6379; then
  need_pkg redis-server redis-server
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/maas.log
  wait_port 6379
fi

# RabbitMQ: MQTT must not take Mosquitto's port, also after a broker restart.
need_pkg rabbitmq-server rabbitmq-server
conf=/etc/rabbitmq/rabbitmq.conf
if [ -w /etc/rabbitmq ] && ! grep -q '^mqtt.listeners.tcp' "$conf" 2>/dev/null; then
  printf 'mqtt.listeners.tcp.default = 127.0.0.1:%s\n' "$RABBITMQ_MQTT_PORT" >> "$conf"
fi
# Statistics: the management agent copies every queue's, connection's and node's statistics
# (the "basic" and "global" tables) on the smallest sample interval of their retention policy,
# 5 s by default, whether anything changed or not: at 250 vhosts of 100 queues that is 38% of a
# core at rest, 14% at 30 s (docs/scale.md, "Broker statistics"). Metering's figures show a
# change up to this many seconds later (docs/storage.md, "Lag"). The channels' tables
# ("detailed") must be copied on the same interval: RabbitMQ 3.10 files an exchange's
# publish_in under the detailed interval and reads it under the basic one. The pool's nodes
# copy these lines (deploy/local/rabbitmq-nodes.sh); another MAAS_RABBITMQ_STATS_SECONDS
# rewrites them, and the broker is restarted once below to read them.
STATS_SECONDS="${MAAS_RABBITMQ_STATS_SECONDS:-30}"
if ! [[ "$STATS_SECONDS" =~ ^[0-9]+$ ]] || [ "$STATS_SECONDS" -lt 5 ] || [ "$STATS_SECONDS" -gt 30 ]; then
  # Each policy keeps a minute of samples: at 60 s a minute holds one, and RabbitMQ then never
  # showed a queue's counts (measured). 5 s is RabbitMQ's own default.
  log "MAAS_RABBITMQ_STATS_SECONDS=$STATS_SECONDS: give a whole number of seconds from 5 to 30"
  exit 1
fi
if [ -w /etc/rabbitmq ] && ! grep -qx "management.sample_retention_policies.basic.minute = $STATS_SECONDS" "$conf" 2>/dev/null; then
  sed -i -e '/^# MaaS: statistics copied every/,+1d' -e '/^management\.sample_retention_policies\./d' "$conf" 2>/dev/null || true
  cat >> "$conf" <<STATS
# MaaS: statistics copied every $STATS_SECONDS s (deploy/local/services.sh). All three policies are
# needed: one left out would be empty, and RabbitMQ's collectors refuse an empty policy.
management.sample_retention_policies.global.minute = $STATS_SECONDS
management.sample_retention_policies.global.hour = 60
management.sample_retention_policies.global.day = 1200
management.sample_retention_policies.basic.minute = $STATS_SECONDS
management.sample_retention_policies.basic.hour = 60
management.sample_retention_policies.detailed.minute = $STATS_SECONDS
STATS
fi
# The core metrics GC (every 2 min by default) deletes the counts a deleted queue left that the
# collectors have not copied yet. A topic receiver's temporary queue, expired 5 s after its
# receiver left, then takes the copies routed to it out of the topic's messages_out for good, at
# a chance of about copy interval / GC interval: 25% at 30 s and 2 min (4% at RabbitMQ's 5 s).
# Hourly, under 1%; the GC only tidies up after deletions whose events were missed
# (docs/storage.md, "Lag"). advanced.config is read by the pool's nodes too.
advanced=/etc/rabbitmq/advanced.config
GC_MS=3600000
if [ -w /etc/rabbitmq ] && ! grep -q "core_metrics_gc_interval, $GC_MS}" "$advanced" 2>/dev/null; then
  if [ -s "$advanced" ] && ! grep -q '^%% MaaS:' "$advanced"; then
    log "$advanced is not MaaS's: add {rabbit, [{core_metrics_gc_interval, $GC_MS}]} to it"
  else
    printf '%%%% MaaS: the core metrics GC hourly (deploy/local/services.sh)\n[{rabbit, [{core_metrics_gc_interval, %s}]}].\n' \
      "$GC_MS" > "$advanced"
  fi
fi
# Prometheus: rabbitmq_prometheus answers without a login and names every vhost, queue and its
# depth (/metrics/per-object): on loopback only, for the Prometheus of this machine.
if [ -w /etc/rabbitmq ] && ! grep -q '^prometheus.tcp.ip' "$conf" 2>/dev/null; then
  printf 'prometheus.tcp.ip = 127.0.0.1\n' >> "$conf"
fi
# The management API: HTTP with basic auth (the platform logs in as guest), so on loopback only,
# as every other listener of this machine's RabbitMQ (docs/security.md, "Internal links").
if [ -w /etc/rabbitmq ] && ! grep -q '^management.tcp.ip' "$conf" 2>/dev/null; then
  printf 'management.tcp.ip = 127.0.0.1\n' >> "$conf"
fi
# TLS: the platform's internal links to RabbitMQ (the routers' connectors, the relays) check its
# certificate against the platform's internal CA, so that no login crosses them in clear text.
# The CA is var/internal-tls/{ca.pem,ca-key.pem} (MAAS_INTERNAL_TLS_DIR), made here or by the
# router agent (workers/agents/router/certificates.py), whichever comes first: both EC P-256,
# the key in PKCS8, and either uses the other's. RabbitMQ's certificate is for localhost and
# 127.0.0.1, the address also as a DNS name (qpid-proton 0.37 compares a peer's name with DNS
# names only); it is made again when missing, signed by another CA (a new var/) or 30 days
# before it expires. The broker reads it as the rabbitmq user; the pool's nodes serve the same
# files (deploy/local/rabbitmq-nodes.sh).
need_pkg openssl openssl
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
internal_tls="${MAAS_INTERNAL_TLS_DIR:-$repo/var/internal-tls}"
if [ ! -s "$internal_tls/ca.pem" ] || [ ! -s "$internal_tls/ca-key.pem" ]; then
  log "making the platform's internal CA in $internal_tls"
  mkdir -p "$internal_tls"
  (umask 077; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$internal_tls/ca-key.pem.tmp")
  openssl req -new -x509 -sha256 -days 3650 -key "$internal_tls/ca-key.pem.tmp" -out "$internal_tls/ca.pem.tmp" \
    -config <(printf '%s\n' '[req]' 'prompt = no' 'distinguished_name = dn' 'x509_extensions = ca' \
      '[dn]' 'CN = maas-internal-ca' \
      '[ca]' 'basicConstraints = critical, CA:true, pathlen:0' 'keyUsage = critical, keyCertSign, cRLSign' \
      'subjectKeyIdentifier = hash')
  mv "$internal_tls/ca-key.pem.tmp" "$internal_tls/ca-key.pem"  # the key first: the pair is whole once ca.pem is
  mv "$internal_tls/ca.pem.tmp" "$internal_tls/ca.pem"
fi
rabbitmq_tls=/etc/rabbitmq/maas-tls
tls_renewed=""
# ca.pem is the trust bundle: the signing CA first, then, while a rotation is under way
# (manage.py rotate_secrets --internal-ca), the one before it. RabbitMQ's certificate must be
# the signing CA's: one of the previous CA is signed again.
signing_ca=$(mktemp)
trap 'rm -f "$signing_ca"' EXIT
openssl x509 -in "$internal_tls/ca.pem" -out "$signing_ca"
if [ -w /etc/rabbitmq ]; then
  [ -d "$rabbitmq_tls" ] || install -d -o rabbitmq -g rabbitmq -m 0750 "$rabbitmq_tls"
  cmp -s "$internal_tls/ca.pem" "$rabbitmq_tls/ca.pem" ||
    install -o rabbitmq -g rabbitmq -m 0644 "$internal_tls/ca.pem" "$rabbitmq_tls/ca.pem"
  if ! { [ -s "$rabbitmq_tls/cert.pem" ] && [ -s "$rabbitmq_tls/key.pem" ] &&
         openssl verify -CAfile "$signing_ca" "$rabbitmq_tls/cert.pem" >/dev/null 2>&1 &&
         openssl x509 -checkend $((30 * 86400)) -noout -in "$rabbitmq_tls/cert.pem" >/dev/null &&
         [ "$(openssl x509 -noout -pubkey -in "$rabbitmq_tls/cert.pem")" = "$(openssl pkey -pubout -in "$rabbitmq_tls/key.pem" 2>/dev/null)" ]; }; then
    log "signing RabbitMQ's certificate with the internal CA ($rabbitmq_tls)"
    tls_tmp=$(mktemp -d)
    # (openssl's chatter is shown only when it fails)
    if ! out=$( { openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
          -keyout "$tls_tmp/key.pem" -out "$tls_tmp/req.pem" &&
        openssl x509 -req -sha256 -days 825 -in "$tls_tmp/req.pem" -out "$tls_tmp/cert.pem" \
          -CA "$signing_ca" -CAkey "$internal_tls/ca-key.pem" -CAserial "$tls_tmp/ca.srl" -CAcreateserial \
          -extfile <(printf '%s\n' 'basicConstraints = critical, CA:false' 'keyUsage = critical, digitalSignature' \
            'extendedKeyUsage = serverAuth' 'subjectAltName = DNS:localhost, IP:127.0.0.1, DNS:127.0.0.1'); } 2>&1 ); then
      log "RabbitMQ's certificate could not be made: $out"; rm -rf "$tls_tmp"; exit 1
    fi
    install -o rabbitmq -g rabbitmq -m 0600 "$tls_tmp/key.pem" "$rabbitmq_tls/key.pem"
    install -o rabbitmq -g rabbitmq -m 0644 "$tls_tmp/cert.pem" "$rabbitmq_tls/cert.pem"
    rm -rf "$tls_tmp"
    tls_renewed=1
  fi
fi
# The listeners, on loopback only: AMQPS (AMQP 0-9-1 and 1.0) and the MQTT plugin's MQTTS, with
# RabbitMQ's TLS settings (verify_none: clients show no certificate, they log in). Not written
# while another program holds a port: the broker would not start again.
tls_conf="listeners.ssl.default = 127.0.0.1:$RABBITMQ_AMQPS_PORT
ssl_options.cacertfile = $rabbitmq_tls/ca.pem
ssl_options.certfile = $rabbitmq_tls/cert.pem
ssl_options.keyfile = $rabbitmq_tls/key.pem
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
mqtt.listeners.ssl.default = 127.0.0.1:$RABBITMQ_MQTTS_PORT"
tls_keys='^(listeners\.ssl\.default|ssl_options\.(cacertfile|certfile|keyfile|verify|fail_if_no_peer_cert)|mqtt\.listeners\.ssl\.default) '
if [ -w /etc/rabbitmq ] && [ -s "$rabbitmq_tls/cert.pem" ] &&
    [ "$(grep -E "$tls_keys" "$conf" 2>/dev/null)" != "$tls_conf" ]; then
  for port in "$RABBITMQ_AMQPS_PORT" "$RABBITMQ_MQTTS_PORT"; do
    if listening "$port" && ! ss -ltnpH "sport = :$port" 2>/dev/null | grep -q '"beam.smp"'; then
      log "port $port is taken by something else: give RabbitMQ another (MAAS_RABBITMQ_AMQPS_PORT, MAAS_RABBITMQ_MQTTS_PORT)"
      exit 1
    fi
  done
  sed -i -E -e '/^# MaaS: TLS listeners/d' -e "/$tls_keys/d" "$conf" 2>/dev/null || true
  { echo "# MaaS: TLS listeners, a certificate of the internal CA (deploy/local/services.sh)"; echo "$tls_conf"; } >> "$conf"
fi
# Open files: RabbitMQ keeps two open per started vhost (its message stores) besides a socket
# per connection, so Debian's default of 1024 runs out at a few hundred spaces
# (docs/scale.md). rabbitmq-env.conf, which every start sources as the rabbitmq user (after
# su's pam_limits has set the default back), raises it to MAAS_RABBITMQ_NOFILE or the hard
# limit; a running broker with fewer is restarted once (its definitions and messages are on disk).
RABBITMQ_NOFILE="${MAAS_RABBITMQ_NOFILE:-65536}"
env_conf=/etc/rabbitmq/rabbitmq-env.conf
if [ -w /etc/rabbitmq ] && ! grep -q 'MaaS: open files' "$env_conf" 2>/dev/null; then
  printf 'ulimit -S -n %s 2>/dev/null || ulimit -S -n "$(ulimit -H -n)"  # MaaS: open files (deploy/local/services.sh)\n' \
    "$RABBITMQ_NOFILE" >> "$env_conf"
fi
restart_rabbitmq() {  # its definitions and messages are on disk
  local pid
  pid=$(rabbitmqctl -q eval 'os:getpid().' 2>/dev/null | tr -d '"' || true)
  if [ -d /run/systemd/system ] && systemctl is-active -q rabbitmq-server 2>/dev/null; then
    systemctl restart rabbitmq-server  # its unit's LimitNOFILE is the hard limit
  else
    rabbitmqctl -q stop >/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    rabbitmq-server -detached
  fi
  wait_port 5672 120
  rabbitmqctl -q await_startup >/dev/null 2>&1 || true
}
if ! listening 5672; then
  log "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672 120
fi
rabbitmqctl -q await_startup >/dev/null 2>&1 || true
beam_pid=$(rabbitmqctl -q eval 'os:getpid().' 2>/dev/null | tr -d '"' || true)
read -r soft hard < <(awk '/^Max open files/ {print $4, $5}' "/proc/$beam_pid/limits" 2>/dev/null || true) || true
want=$RABBITMQ_NOFILE
[ "${hard:-unlimited}" != unlimited ] && [ "$hard" -lt "$want" ] && want=$hard
if [ -n "${soft:-}" ] && [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
  if [ "$(id -u)" = 0 ] && grep -q 'MaaS: open files' "$env_conf" 2>/dev/null; then
    log "restarting RabbitMQ to raise its open files from $soft to $want"
    restart_rabbitmq
  else
    log "RabbitMQ may open $soft files: raise it (ulimit -n $RABBITMQ_NOFILE) for many spaces"
  fi
fi
if ! listening 15672 || ! listening "$RABBITMQ_MQTT_PORT" || ! listening 15692; then
  # The running broker read rabbitmq.conf before the line above existed: give the MQTT plugin
  # its port in the node's environment. Loading the app first keeps enabling it from putting
  # back the default port (1883, Mosquitto's); a second try covers a broker that did anyway.
  mqtt_env="application:load(rabbitmq_mqtt), application:set_env(rabbitmq_mqtt, tcp_listeners, [{\"127.0.0.1\", $RABBITMQ_MQTT_PORT}])."
  for attempt in 1 2; do
    rabbitmqctl -q eval "$mqtt_env" >/dev/null
    rabbitmq-plugins -q enable rabbitmq_management rabbitmq_amqp1_0 rabbitmq_mqtt \
      rabbitmq_prometheus rabbitmq_shovel rabbitmq_shovel_management >/dev/null 2>&1 && break
    [ "$attempt" = 2 ] && { log "RabbitMQ's plugins could not be enabled"; exit 1; }
    log "enabling RabbitMQ's plugins again"
  done
  wait_port 15672 60
  wait_port 15692 60   # rabbitmq_prometheus (deploy/monitoring scrapes it)
fi
# A broker started before the statistics lines above were in rabbitmq.conf (Debian's package
# starts it on install) reads them at its next start: restart it once. Its collectors take
# their interval when they start, and restarting them alone would count totals twice.
# The same for the metrics GC's interval in advanced.config.
stats_want=$(sed -n 's/^management.sample_retention_policies.basic.minute = //p' "$conf" 2>/dev/null | tail -n 1)
stats_now=$(rabbitmqctl -q eval 'P = rabbit_mgmt_agent_config:get_env(sample_retention_policies), [lists:min([I || {_, I} <- proplists:get_value(S, P)]) || S <- [global, basic, detailed]].' 2>/dev/null | tr -d ' ' || true)
gc_want=$(sed -n 's/.*core_metrics_gc_interval, \([0-9]*\)}.*/\1/p' "$advanced" 2>/dev/null | tail -n 1)
gc_now=$(rabbitmqctl -q eval 'application:get_env(rabbit, core_metrics_gc_interval, 120000).' 2>/dev/null || true)
why=""
if [ -n "$stats_want" ] && [ -n "$stats_now" ] && [ "$stats_now" != "[$stats_want,$stats_want,$stats_want]" ]; then
  why="to copy its statistics every $stats_want s (global, basic, detailed now: $stats_now s)"
fi
if [ -n "$gc_want" ] && [ -n "$gc_now" ] && [ "$gc_now" != "$gc_want" ]; then
  why="${why:+$why, }to run its metrics GC every $gc_want ms (now $gc_now)"
fi
if grep -q '^prometheus.tcp.ip = 127.0.0.1' "$conf" 2>/dev/null \
    && ss -ltnH 'sport = :15692' 2>/dev/null | grep -qv '127.0.0.1:15692'; then
  why="${why:+$why, }to serve its Prometheus figures on loopback only"
fi
if grep -q '^management.tcp.ip = 127.0.0.1' "$conf" 2>/dev/null \
    && ss -ltnH 'sport = :15672' 2>/dev/null | grep -qv '127.0.0.1:15672'; then
  why="${why:+$why, }to serve its management API on loopback only"
fi
# The same for the TLS listeners: a broker started before their lines were in rabbitmq.conf.
tls_ports=""
grep -q '^listeners\.ssl\.default' "$conf" 2>/dev/null && tls_ports="$RABBITMQ_AMQPS_PORT $RABBITMQ_MQTTS_PORT"
for port in $tls_ports; do
  if ! listening "$port"; then
    why="${why:+$why, }to open its TLS listeners (AMQPS $RABBITMQ_AMQPS_PORT, MQTTS $RABBITMQ_MQTTS_PORT)"
    break
  fi
done
if [ -n "$why" ] && [ "$(id -u)" = 0 ]; then
  log "restarting RabbitMQ $why"
  restart_rabbitmq
  wait_port 15672 60
  for port in $tls_ports; do wait_port "$port" 60; done
fi
# A certificate made again above: the running nodes, the pool's too, serve it from their next TLS
# connection on (Erlang's ssl keeps the files it read in a cache of its own).
if [ -n "$tls_renewed" ]; then
  node_host=$(rabbitmqctl -q eval 'node().' 2>/dev/null | tr -d "'\"" || true)
  for name in $(epmd -names 2>/dev/null | awk '$1 == "name" && $2 !~ /^rabbitmqcli/ {print $2}'); do
    rabbitmqctl -n "$name@${node_host#*@}" -q eval 'ssl:clear_pem_cache().' >/dev/null 2>&1 || true
  done
fi
# MaaS's topic exchange type x-maas-topic (deploy/rabbitmq/rabbitmq_maas_topic, docs/storage.md):
# compiled against the running RabbitMQ into its plugins directory and enabled; a changed source
# is compiled again and loaded into the running broker.
need_pkg erlc erlang-base
plugin_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../rabbitmq/rabbitmq_maas_topic" && pwd)"
erl_path() { rabbitmqctl -q eval "$1" | tr -d '"'; }
plugin_dir="$(erl_path 'hd(string:split(rabbit_plugins:plugins_dir(), ":")).')/rabbitmq_maas_topic-1.0.0"
common_ebin="$(erl_path 'code:lib_dir(rabbit_common, ebin).')"
source_sum=$(cat "$plugin_src"/src/*.erl "$plugin_src"/*.app | sha256sum | cut -d' ' -f1)
if [ "$(cat "$plugin_dir/source.sha256" 2>/dev/null)" != "$source_sum" ]; then
  log "building RabbitMQ's x-maas-topic exchange type"
  mkdir -p "$plugin_dir/ebin"
  erlc -pa "$common_ebin" -I "$(dirname "$(dirname "$common_ebin")")" -o "$plugin_dir/ebin" "$plugin_src"/src/*.erl
  cp "$plugin_src/rabbitmq_maas_topic.app" "$plugin_dir/ebin/"
  echo "$source_sum" > "$plugin_dir/source.sha256"
  # a no-op where the plugin is not running yet; else the new code replaces the old
  rabbitmqctl -q eval 'code:purge(rabbit_exchange_type_maas_topic), code:load_file(rabbit_exchange_type_maas_topic).' >/dev/null
fi
rabbitmq-plugins -q enable rabbitmq_maas_topic >/dev/null
# Placement: MAAS_RABBITMQ_NODES brokers in all on this machine, the default node and extra,
# independent nodes maas1..maas<N-1> (deploy/local/rabbitmq-nodes.sh has their ports).
MAAS_RABBITMQ_NODES="${MAAS_RABBITMQ_NODES:-1}"
if [ "$MAAS_RABBITMQ_NODES" -gt 1 ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/rabbitmq-nodes.sh" start "$MAAS_RABBITMQ_NODES"
fi
# A broker that survives a node: MAAS_RABBITMQ_CLUSTER=A-B clusters maasA..maasB (docs/storage.md).
if [ -n "${MAAS_RABBITMQ_CLUSTER:-}" ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/rabbitmq-nodes.sh" cluster "${MAAS_RABBITMQ_CLUSTER%-*}" "${MAAS_RABBITMQ_CLUSTER#*-}"
fi
log "PostgreSQL, Redis and RabbitMQ are up"

# --- kubectl (issue 7): tests/infra renders deploy/ with `kubectl kustomize`. ------------------
# Debian's kubernetes-client provides kubectl; any kubectl already on PATH is used as it is.
need_pkg kubectl kubernetes-client

# --- Prometheus (deploy/monitoring): promtool checks and tests the alert rules, and the tests
# run a Prometheus of their own. None is started here: the package's service (where systemd
# runs) is stopped and disabled right after installing it, and its recommended node exporter
# is left out.
if ! command -v promtool >/dev/null 2>&1; then
  need_pkg promtool --no-install-recommends prometheus
  if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi

# --- mosquitto_pub/sub: the MQTT gateway's tests use them as real MQTT clients (tests/mqtt) ------
need_pkg mosquitto_sub mosquitto-clients

# --- tshark: what crosses loopback, read as the wire has it (that an internal link is TLS, not
# plain AMQP or MQTT). wireshark-common asks whether users other than root may capture: answered
# "no" beforehand, so that no installer stops to ask it.
if ! command -v tshark >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
fi
need_pkg tshark tshark

# --- Java for Spark (usage jobs) and Chromium for the browser tests ------------------------------
need_pkg java openjdk-17-jre-headless
need_pkg chromium chromium

# --- node and npm for the test OpenID Connect provider (tests/identity, deploy/local/oidc) -------
need_pkg node nodejs
need_pkg npm npm
