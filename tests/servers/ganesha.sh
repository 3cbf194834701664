#!/usr/bin/env bash
# A user-space NFSv4 server (nfs-ganesha, VFS backend) on 127.0.0.1 for the tests and benchmarks.
# NFSv4 needs no rpcbind. The server runs in the background with its pid recorded; `stop` waits
# until that pid is gone (ganesha takes more than 2 s to exit after SIGTERM), so a restart never
# finds the port still taken.
#
# usage: ganesha.sh start STATE_DIR EXPORT_DIR [PORT]   serve EXPORT_DIR as /export on PORT
#                                                        (default 20490) and wait until it answers
#        ganesha.sh stop STATE_DIR [SIGNAL]              stop it (TERM by default; KILL to crash it)
#        ganesha.sh restart STATE_DIR [SIGNAL]           stop, then start again with the same settings
#        ganesha.sh url STATE_DIR [PATH]                 print nfs://127.0.0.1/export/PATH?version=4&nfsport=PORT
# Besides /export, it serves STATE_DIR/squashed as /squashed with every user mapped to nobody
# (All_Squash), for permission tests: ganesha runs as root and /export does not squash root.
# STATE_DIR holds the config, the log, the pid and NFSv4 recovery state. Needs nfs-ganesha and
# nfs-ganesha-vfs (scripts/install-deps.sh --test) and root (ganesha's VFS backend uses
# open_by_handle_at, which needs CAP_DAC_READ_SEARCH).
set -euo pipefail

die() { echo "ganesha.sh: $*" >&2; exit 1; }
(($# >= 2)) || die "usage: ganesha.sh start|stop|restart|url STATE_DIR ..."
cmd=$1
state=$(realpath -m -- "$2")

running() {  # true while PID runs (a zombie, exited but not yet reaped, does not count)
  kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone) != Z ]]
}

answers() {  # true when the port accepts a TCP connection
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

start() {
  local export_dir port
  export_dir=$(cat "$state/export_dir")
  port=$(cat "$state/port")
  if [[ -f $state/pid ]] && running "$(cat "$state/pid")"; then
    die "already running (pid $(cat "$state/pid")); stop it first"
  fi
  command -v ganesha.nfsd >/dev/null || die "ganesha.nfsd not found: install nfs-ganesha nfs-ganesha-vfs (scripts/install-deps.sh --test)"
  if answers "$port"; then die "port $port is already taken by another process"; fi
  mkdir -p "$state/recov" "$state/squashed"
  cat >"$state/ganesha.conf" <<CONF
NFS_CORE_PARAM { Protocols = 4; Bind_addr = 127.0.0.1; NFS_Port = $port; Enable_NLM = false;
                 Enable_RQUOTA = false; Mount_Path_Pseudo = true; }
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $state/recov; }
EXPORT { Export_Id = 1; Path = $export_dir; Pseudo = /export; Access_Type = RW;
         Squash = No_Root_Squash; SecType = sys; Protocols = 4; Transports = TCP; FSAL { Name = VFS; } }
EXPORT { Export_Id = 2; Path = $state/squashed; Pseudo = /squashed; Access_Type = RW;
         Squash = All_Squash; Anonymous_Uid = 65534; Anonymous_Gid = 65534;
         SecType = sys; Protocols = 4; Transports = TCP; FSAL { Name = VFS; } }
LOG { Default_Log_Level = EVENT; }
CONF
  setsid ganesha.nfsd -F -f "$state/ganesha.conf" -L "$state/ganesha.log" -N NIV_EVENT \
    -p "$state/ganesha.pidfile" </dev/null >>"$state/ganesha.out" 2>&1 &
  local pid=$!
  echo "$pid" >"$state/pid"
  local i
  for ((i = 0; i < 300; i++)); do
    if ! running "$pid"; then
      tail -n 20 "$state/ganesha.log" "$state/ganesha.out" >&2 2>/dev/null || true
      die "ganesha exited at start (log: $state/ganesha.log)"
    fi
    # Listening is not enough: wait for the startup to finish (its grace period is off).
    if answers "$port" && grep -q "NFS SERVER INITIALIZED" "$state/ganesha.log" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  die "ganesha did not answer on port $port within 30 s (log: $state/ganesha.log)"
}

stop() {
  local sig=${1:-TERM} pid i
  [[ -f $state/pid ]] || return 0
  pid=$(cat "$state/pid")
  if running "$pid"; then
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  rm -f "$state/pid"
}

case $cmd in
  start)
    (($# >= 3)) || die "usage: ganesha.sh start STATE_DIR EXPORT_DIR [PORT]"
    mkdir -p "$state" "$3"
    realpath -- "$3" >"$state/export_dir"
    echo "${4:-20490}" >"$state/port"
    start
    ;;
  stop) stop "${3:-TERM}" ;;
  restart) stop "${3:-TERM}"; start ;;
  url) echo "nfs://127.0.0.1/export/${3:-}?version=4&nfsport=$(cat "$state/port")" ;;
  *) die "unknown command '$cmd'" ;;
esac
