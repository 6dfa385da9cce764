#!/usr/bin/env bash
# Installs (where missing) and starts the services MaaS needs on one machine:
# PostgreSQL, Redis and RabbitMQ with its management, AMQP 1.0, MQTT and Prometheus plugins and
# MaaS's topic exchange type; and installs Prometheus's tools (started by no one here).
# Services already running are used as they are. Safe to run again.
set -euo pipefail

DB_NAME="${MAAS_DB_NAME:-maas}"
RABBITMQ_MQTT_PORT="${MAAS_RABBITMQ_MQTT_PORT:-1884}"   # 1883 usually belongs to Mosquitto

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
      rabbitmq_prometheus >/dev/null 2>&1 && break
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
if [ -n "$why" ] && [ "$(id -u)" = 0 ]; then
  log "restarting RabbitMQ $why"
  restart_rabbitmq
  wait_port 15672 60
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

# --- Java for Spark (usage jobs) and Chromium for the browser tests ------------------------------
need_pkg java openjdk-17-jre-headless
need_pkg chromium chromium

# --- node and npm for the test OpenID Connect provider (tests/identity, deploy/local/oidc) -------
need_pkg node nodejs
need_pkg npm npm
