#!/usr/bin/env bash
# Starts, stops or resets the EXTRA RabbitMQ nodes MaaS places tenants' spaces on when one machine
# runs several brokers ("placement"): maas1@<host> .. maas8@<host>, besides the default node
# rabbit@<host> that deploy/local/services.sh starts (and which is never touched here). Each extra
# node is an independent broker, not clustered with any other: its own vhost / and guest user,
# its own data (/var/lib/rabbitmq/mnesia/maas<k>@<host>) and log (/var/log/rabbitmq/maas<k>@<host>.log).
#
#   bash deploy/local/rabbitmq-nodes.sh start N   # nodes maas1..maas<N-1> run (a running one is left alone, if it has TLS)
#   bash deploy/local/rabbitmq-nodes.sh stop N    # nodes maas1..maas<N-1> stopped
#   bash deploy/local/rabbitmq-nodes.sh reset N   # stopped, their data and files deleted: they next start empty
#   bash deploy/local/rabbitmq-nodes.sh test      # the test suite's own node maastest@<host> runs
#   bash deploy/local/rabbitmq-nodes.sh cluster A B      # nodes maasA..maasB run as ONE cluster
#   bash deploy/local/rabbitmq-nodes.sh reset-nodes A B  # nodes maasA..maasB killed, data deleted
#
# A cluster (MAAS_RABBITMQ_CLUSTER=A-B, config_service/brokers.py) is one broker of the pool whose
# queues are quorum queues, replicated on every node: one node lost loses no acknowledged
# message (docs/storage.md, "A broker that survives a node"). maasB..maasA+1 join maasA; a node
# already in the cluster is left alone, one with data of its own is reset first.
#
# N is the TOTAL number of brokers, the default node included (N=1: nothing to do; at most 9).
# The test node (k=9: AMQP 5689, AMQPS 5669, management 15689, MQTT 1899, MQTTS 8879,
# Prometheus 15709) is the same kind of broker with its statistics emitted every second and
# copied every 5 s instead of 30, so that a test reads a change through the management API
# within about 6 s; the suite starts it (tests/broker.py) and leaves it running, apart from
# `make run`'s broker.
# Node k listens on 127.0.0.1 only: AMQP 5680+k, AMQPS 5660+k, management 15680+k, MQTT 1890+k,
# MQTTS 8870+k, Prometheus 15700+k; Erlang distribution 25680+k (RabbitMQ's AMQP+20000). Its
# settings are /etc/rabbitmq/maas<k>.conf, the default node's rabbitmq.conf without its
# listeners (its ssl_options stay) plus these ports, and its plugins
# /etc/rabbitmq/maas<k>.enabled_plugins (management, AMQP 1.0, MQTT, Prometheus and MaaS's
# x-maas-topic exchange type, built by services.sh into the plugins dir); both are written again
# at every start. The TLS listeners serve the default node's certificate, signed by the
# platform's internal CA (/etc/rabbitmq/maas-tls, services.sh), so that the platform's links to
# every broker can check it; where the default node has no TLS, neither has node k. A node that
# runs without its TLS listeners (started before they existed) is restarted once by start, test
# and cluster: its data is on disk. The node name, ports and files reach the broker through
# RABBITMQ_* variables, which Debian's rabbitmq-server wrapper keeps across its `su rabbitmq` and
# which win over rabbitmq-env.conf's NODENAME; rabbitmq-env.conf (open files) applies to all nodes.
# After each action var/monitoring/rabbitmq-nodes.json lists the Prometheus endpoints of the pool
# nodes then running, which deploy/monitoring/prometheus.yml reads (file_sd_configs).
set -euo pipefail

log() { printf '[rabbitmq-nodes] %s\n' "$*" >&2; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 "${2:-60}"); do listening "$1" && return 0; sleep 1; done
  log "port $1 did not open"; return 1
}

usage() { log "usage: $0 start|stop|reset N   (N: brokers in all, the default node included, 1..9) | test | cluster|reset-nodes A B (1 <= A < B <= 8)"; exit 2; }
TEST_NODE=9  # k of the test suite's node
if [ "${1:-}" = test ] && [ $# = 1 ]; then
  action=test total=1
elif [ "${1:-}" = cluster ] || [ "${1:-}" = reset-nodes ]; then
  [ $# = 3 ] || usage
  action=$1 first=$2 last_node=$3 total=1
  [[ "$first" =~ ^[1-8]$ && "$last_node" =~ ^[1-8]$ && "$first" -lt "$last_node" ]] || usage
else
  [ $# = 2 ] || usage
  action=$1 total=$2
  case "$action" in start|stop|reset) ;; *) usage ;; esac
fi
[[ "$total" =~ ^[1-9][0-9]*$ ]] || usage
if [ "$total" -gt 9 ]; then
  log "N=$total: at most 9 brokers on one machine (the default node and maas1..maas8; their ports are 5681..5688 etc.)"
  exit 1
fi
case "$action" in start|stop|reset) [ "$total" -gt 1 ] || exit 0 ;; esac

# The host part of the nodes' names: the default node's (rabbitmq-env.conf may set it, e.g.
# rabbit@localhost), else what RABBITMQ_NODENAME or rabbitmq-env.conf say, else the short hostname.
host=$(rabbitmqctl -q eval 'node().' 2>/dev/null) || host=""
[[ "$host" =~ ^[^[:space:]]+@[^[:space:]]+$ ]] || host=${RABBITMQ_NODENAME:-$(sed -n 's/^\(RABBITMQ_\)\{0,1\}NODENAME=//p' /etc/rabbitmq/rabbitmq-env.conf 2>/dev/null | tail -n 1 | tr -d "'\"")}
[[ "$host" == *@* ]] || host="rabbit@$(hostname -s)"
host=${host#*@}
host=${host//[\'\"]/}
mnesia=/var/lib/rabbitmq/mnesia

name_of() { if [ "$1" = "$TEST_NODE" ]; then echo maastest; else echo "maas$1"; fi; }
node_of() { echo "$(name_of "$1")@$host"; }
running() { [[ "$(epmd -names 2>/dev/null)" == *"name $(name_of "$1") at port "* ]]; }
# The default node's TLS settings (services.sh): node k then has TLS listeners too.
has_tls() { grep -q '^ssl_options\.certfile' /etc/rabbitmq/rabbitmq.conf 2>/dev/null; }
ports_of() {  # ports_of K: the ports the node listens on
  local k=$1
  echo $((5680 + k)) $((15680 + k)) $((1890 + k)) $((15700 + k))
  if has_tls; then echo $((5660 + k)) $((8870 + k)); fi
}
has_maas_topic() {  # has_maas_topic MGMT_PORT: the node's overview lists the x-maas-topic exchange type
  [[ "$(curl -sf -u guest:guest "http://127.0.0.1:$1/api/overview")" == *'"name":"x-maas-topic"'* ]]
}

write_files() {  # write_files K: the node's rabbitmq.conf and enabled_plugins
  local k=$1
  {
    echo "# $(node_of "$k"): written by deploy/local/rabbitmq-nodes.sh, edits are overwritten."
    echo "# The default node's /etc/rabbitmq/rabbitmq.conf without its listeners:"
    grep -Ev '^[[:space:]]*([a-z0-9_]+\.)*listeners?\.|^[[:space:]]*[a-z0-9_]+\.(tcp|ssl)\.' \
      /etc/rabbitmq/rabbitmq.conf 2>/dev/null |
      if [ "$k" = "$TEST_NODE" ]; then grep -Ev 'sample_retention_policies\.[a-z]+\.minute|statistics copied|one left out'; else cat; fi || true
    if [ "$k" = "$TEST_NODE" ]; then
      echo "# The test node's statistics: emitted every second, copied every 5 s."
      echo "collect_statistics_interval = 1000"
      for policy in global basic detailed; do
        echo "management.sample_retention_policies.$policy.minute = 5"
      done
    fi
    echo "# This node's ports:"
    echo "listeners.tcp.default = 127.0.0.1:$((5680 + k))"
    echo "management.tcp.ip = 127.0.0.1"
    echo "management.tcp.port = $((15680 + k))"
    echo "mqtt.listeners.tcp.default = 127.0.0.1:$((1890 + k))"
    echo "prometheus.tcp.ip = 127.0.0.1"
    echo "prometheus.tcp.port = $((15700 + k))"
    if has_tls; then
      echo "listeners.ssl.default = 127.0.0.1:$((5660 + k))"
      echo "mqtt.listeners.ssl.default = 127.0.0.1:$((8870 + k))"
    fi
  } > "/etc/rabbitmq/$(name_of "$k").conf"
  echo '[rabbitmq_amqp1_0,rabbitmq_maas_topic,rabbitmq_management,rabbitmq_mqtt,rabbitmq_prometheus,rabbitmq_shovel,rabbitmq_shovel_management].' \
    > "/etc/rabbitmq/$(name_of "$k").enabled_plugins"
}

start_node() {  # start_node K: launches the node, detached; waiting for it is check_node's
  local k=$1 node port
  node=$(node_of "$k")
  for port in $(ports_of "$k") $((25680 + k)); do
    if listening "$port"; then log "port $port is taken by something else: $node not started"; exit 1; fi
  done
  write_files "$k"
  log "starting $node"
  RABBITMQ_NODENAME="$node" RABBITMQ_DIST_PORT=$((25680 + k)) \
    RABBITMQ_CONFIG_FILE="/etc/rabbitmq/$(name_of "$k").conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="/etc/rabbitmq/$(name_of "$k").enabled_plugins" \
    rabbitmq-server -detached >/dev/null
}

check_node() {  # check_node K: waits for the node to boot and serve, with x-maas-topic
  local k=$1 node mgmt port tls
  node=$(node_of "$k") mgmt=$((15680 + k))
  for _ in $(seq 1 60); do running "$k" && break; sleep 1; done
  if ! rabbitmqctl -n "$node" -q await_startup >/dev/null 2>&1; then
    log "$node did not start: see /var/log/rabbitmq/$node.log"; exit 1
  fi
  for port in $(ports_of "$k"); do wait_port "$port" 60; done
  if ! has_maas_topic "$mgmt"; then
    log "enabling x-maas-topic on $node"
    rabbitmq-plugins -n "$node" -q enable rabbitmq_maas_topic >/dev/null
    has_maas_topic "$mgmt" || { log "$node has no x-maas-topic exchange type"; exit 1; }
  fi
  tls=""
  has_tls && tls=", AMQPS $((5660 + k)), MQTTS $((8870 + k))"
  log "$node is up: AMQP 127.0.0.1:$((5680 + k)), management $mgmt, MQTT $((1890 + k)), Prometheus $((15700 + k))$tls"
}

stop_node() {  # stop_node K
  local k=$1 node
  node=$(node_of "$k")
  running "$k" || return 0
  log "stopping $node"
  rabbitmqctl -n "$node" -q stop >/dev/null
  for _ in $(seq 1 60); do running "$k" || return 0; sleep 1; done
  log "$node did not stop"; exit 1
}

targets_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/var/monitoring/rabbitmq-nodes.json"
write_targets() {  # the Prometheus endpoints of the pool nodes running now, for prometheus.yml
  local k list=""
  for k in $(seq 1 8); do
    running "$k" && list="$list${list:+, }\"127.0.0.1:$((15700 + k))\""
  done
  mkdir -p "$(dirname "$targets_file")"
  printf '[{"targets": [%s]}]\n' "$list" > "$targets_file.tmp"
  mv "$targets_file.tmp" "$targets_file"  # Prometheus reads it again when it changes
}

without_tls() {  # without_tls K: the node runs, but without its TLS listeners (once it has booted)
  local k=$1
  has_tls && running "$k" || return 1
  rabbitmqctl -n "$(node_of "$k")" -q await_startup >/dev/null 2>&1 || true
  ! { listening $((5660 + k)) && listening $((8870 + k)); }
}
renew_without_tls() {  # renew_without_tls K: such a node is stopped, to be started again with them
  if without_tls "$1"; then
    log "$(node_of "$1") has no TLS listeners (started before them): restarting it"
    stop_node "$1"
  fi
}

kill_node() {  # kill_node K: SIGKILL, for a node whose data is deleted next (no clean stop needed)
  local node pid
  node=$(node_of "$1")
  for pid in $(pgrep -x beam.smp); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "RABBITMQ_NODENAME=$node"; then
      log "killing $node"
      kill -9 "$pid"
    fi
  done
  for _ in $(seq 1 30); do running "$1" || return 0; sleep 1; done
  log "$node did not go"; exit 1
}

delete_data() {  # delete_data K: the stopped node's data and files
  local k=$1 node
  node=$(node_of "$k")
  if compgen -G "$mnesia/$node*" >/dev/null; then
    log "deleting $node's data"
    rm -rf "${mnesia:?}/$node" "$mnesia/$node"[-.]*
  fi
  rm -f "/etc/rabbitmq/maas$k.conf" "/etc/rabbitmq/maas$k.enabled_plugins"
}

in_cluster_of() {  # in_cluster_of K SEED: node K's cluster has SEED as a running member
  [[ "$(rabbitmqctl -n "$(node_of "$1")" -q cluster_status --formatter json 2>/dev/null)" == *"\"$(node_of "$2")\""* ]]
}

last=$((total - 1))
case "$action" in
  cluster)
    # A member running without its TLS listeners is stopped and started again with the others,
    # keeping its data, and with it its place in the cluster. (Restarted so, one node's MQTT
    # plugin waited 100 s for the cluster's client id store, whether all at once or one by one.)
    for k in $(seq "$first" "$last_node"); do renew_without_tls "$k"; done
    for k in $(seq "$first" "$last_node"); do running "$k" || start_node "$k"; done
    for k in $(seq "$first" "$last_node"); do check_node "$k"; done
    for k in $(seq $((first + 1)) "$last_node"); do
      in_cluster_of "$k" "$first" && continue
      log "joining $(node_of "$k") to $(node_of "$first")"
      # (rabbitmqctl logs the node's tables it waits for on stderr meanwhile: not errors)
      if ! { rabbitmqctl -n "$(node_of "$k")" -q stop_app &&
             rabbitmqctl -n "$(node_of "$k")" -q reset &&
             rabbitmqctl -n "$(node_of "$k")" -q join_cluster "$(node_of "$first")" &&
             rabbitmqctl -n "$(node_of "$k")" -q start_app; } >/dev/null 2>&1; then
        log "$(node_of "$k") did not join $(node_of "$first"): see /var/log/rabbitmq/$(node_of "$k").log"
        exit 1
      fi
      check_node "$k"
    done
    log "cluster of $(node_of "$first")..$(node_of "$last_node") is up"
    ;;
  reset-nodes)
    for k in $(seq "$first" "$last_node"); do kill_node "$k"; done
    for k in $(seq "$first" "$last_node"); do delete_data "$k"; done
    ;;
  test)
    renew_without_tls "$TEST_NODE"
    running "$TEST_NODE" || start_node "$TEST_NODE"
    check_node "$TEST_NODE"
    exit 0
    ;;
  start)
    # All launched first, then waited for: their boots overlap.
    for k in $(seq 1 "$last"); do renew_without_tls "$k"; done
    for k in $(seq 1 "$last"); do running "$k" || start_node "$k"; done
    for k in $(seq 1 "$last"); do check_node "$k"; done
    ;;
  stop)
    for k in $(seq 1 "$last"); do stop_node "$k"; done
    ;;
  reset)
    for k in $(seq 1 "$last"); do
      stop_node "$k"
      delete_data "$k"
    done
    ;;
esac
write_targets
