#!/usr/bin/env bash
# Start/stop a real single-node Slurm cluster on this machine (Debian, root, no systemd).
# Settings follow shared/docs/slurm-single-node.md.
#
# Usage: scripts/slurm-cluster.sh start|stop [--force]|status
#   start   idempotent; returns at once if the cluster already answers
#   stop    stops only the daemons this script started (recorded in $STATE_FILE), and only
#           while `squeue` lists no job (pending, running, completing, ...) of anyone: the
#           cluster is shared, and stopping it strands another user's sweep (or your own).
#           Otherwise it refuses, exit 1, with one line naming the jobs by user (the caller is
#           $SUDO_USER under sudo, else `id -un`; their jobs are marked "yours"). A controller
#           that runs but cannot list its queue is a refusal too. `stop --force` skips the check.
#   status  prints sinfo (exit 0) or "slurm: down" (exit 1)
set -euo pipefail

MARKER="# written by gb scripts/slurm-cluster.sh"
CONF_DIR=/etc/slurm
SLURM_CONF_FILE="$CONF_DIR/slurm.conf"
CGROUP_CONF="$CONF_DIR/cgroup.conf"
STATE_DIR=/run/gb-slurm
STATE_FILE="$STATE_DIR/started"
LOG_DIR=/var/log/slurm
WAIT_SECS="${GB_SLURM_WAIT_SECS:-30}"

log() { echo "slurm-cluster: $*" >&2; }
die() { echo "slurm-cluster: $*" >&2; exit 1; }

# False if the controller port named in slurm.conf refuses connections (sinfo would
# retry for ~9 s before failing); true if it accepts or the conf cannot be parsed.
# Skipped while a local slurmctld runs: each probe logs a "Zero Bytes" error there.
controller_reachable() {
    local host port
    [[ -z "$(running_pid slurmctld)" ]] || return 0
    [[ -r "$SLURM_CONF_FILE" ]] || return 0
    host="$(sed -n 's/^[[:space:]]*SlurmctldHost=\([^[:space:]#]*\).*/\1/Ip' "$SLURM_CONF_FILE" | head -1)"
    port="$(sed -n 's/^[[:space:]]*SlurmctldPort=\([0-9]*\).*/\1/Ip' "$SLURM_CONF_FILE" | head -1)"
    [[ -n "$host" ]] || return 0
    # "name(addr)" -> addr
    if [[ "$host" == *"("*")"* ]]; then host="${host#*(}"; host="${host%)*}"; fi
    timeout 2 bash -c "exec 3<>/dev/tcp/$host/${port:-6817}" 2>/dev/null
}

# Compact node states of the cluster, one per line; empty if no controller answers.
node_states() {
    command -v sinfo >/dev/null 2>&1 || return 0
    controller_reachable || return 0
    timeout 3 sinfo -h -N -o %t 2>/dev/null || true
}

# True if every state given (one per line) is usable: idle/mix/alloc/comp, and
# no "*" suffix (= node not responding).
states_up() {
    [[ -n "$1" ]] || return 1
    ! grep -qvE '^(idle|mix|mixed|alloc|allocated|comp|completing)$' <<<"$1"
}

cluster_up() { states_up "$(node_states)"; }

# True if pid $1 is a live (not zombie) process named $2.
is_daemon() {
    [[ -n "$1" && "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]] || return 1
    [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]
}

# PID of a running daemon by exact process name (newest live one), empty if none.
running_pid() {
    local pid
    for pid in $(pgrep -x "$1" 2>/dev/null | sort -rn); do
        if is_daemon "$pid" "$1"; then echo "$pid"; return 0; fi
    done
    return 0
}

# Remember that we started daemon $1 with pid $2.
record() {
    mkdir -p "$STATE_DIR"
    sed -i "/^$1 /d" "$STATE_FILE" 2>/dev/null || true
    echo "$1 $2" >>"$STATE_FILE"
}

# PID of a daemon after it forked: from its pid file (~5 s), else by process name.
# (The short-lived pre-fork process has the same name, so the pid file is preferred.)
daemon_pid() {
    local name="$1" pidfile="$2" pid
    for _ in $(seq 1 50); do
        pid="$(cat "$pidfile" 2>/dev/null || true)"
        if is_daemon "$pid" "$name"; then echo "$pid"; return 0; fi
        sleep 0.1
    done
    pid="$(running_pid "$name")"
    [[ -n "$pid" ]] && echo "$pid"
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sinfo >/dev/null && command -v munged >/dev/null; then
        return 0
    fi
    log "installing slurm-wlm and munge with apt-get (1-2 minutes)"
    # Keep package scripts from starting services we would not track.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    local rc=0
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get -o DPkg::Lock::Timeout=60 update -q >/dev/null || rc=$?
    if [[ $rc -eq 0 ]]; then
        timeout 900 apt-get -o DPkg::Lock::Timeout=60 install -y -q \
            --no-install-recommends slurm-wlm munge >/dev/null || rc=$?
    fi
    if [[ $made_policy -eq 1 ]]; then rm -f "$policy"; trap - EXIT; fi
    [[ $rc -eq 0 ]] || die "apt-get failed (rc=$rc) installing slurm-wlm munge"
    command -v slurmctld >/dev/null || die "slurmctld missing after install"
}

setup_munge() {
    id munge >/dev/null 2>&1 || die "user munge missing (munge package broken?)"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    if [[ -z "$(running_pid munged)" ]]; then
        rm -f /run/munge/munged.pid
        runuser -u munge -- munged 9>&- || die "munged failed to start (see /var/log/munge/munged.log)"
        local pid
        pid="$(daemon_pid munged /run/munge/munged.pid)" || die "munged exited right after start (see /var/log/munge/munged.log)"
        record munged "$pid"
    fi
    munge -n | unmunge >/dev/null 2>&1 || die "munge credential round-trip failed"
}

write_configs() {
    local host cpus mem_mb real_mb
    host="$(hostname -s)"
    cpus="$(nproc)"
    mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 ))
    # A bit below the machine's memory, else slurmd drains the node ("Low RealMemory").
    real_mb=$(( mem_mb - (mem_mb / 20 > 512 ? mem_mb / 20 : 512) ))
    mkdir -p "$CONF_DIR" "$LOG_DIR" /var/lib/slurm/slurmctld /var/spool/slurmd

    if [[ -e "$SLURM_CONF_FILE" ]] && ! grep -qF "$MARKER" "$SLURM_CONF_FILE"; then
        log "foreign $SLURM_CONF_FILE present; leaving it as is"
    elif [[ ! -e "$SLURM_CONF_FILE" ]]; then
        cat >"$SLURM_CONF_FILE" <<EOF
$MARKER
# Single-node cluster for tests; see shared/docs/slurm-single-node.md.
ClusterName=gb
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=10
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
        log "wrote $SLURM_CONF_FILE (CPUs=$cpus RealMemory=$real_mb)"
    fi

    if [[ -e "$CGROUP_CONF" ]] && ! grep -qF "$MARKER" "$CGROUP_CONF"; then
        log "foreign $CGROUP_CONF present; leaving it as is"
    elif [[ ! -e "$CGROUP_CONF" ]]; then
        cat >"$CGROUP_CONF" <<EOF
$MARKER
CgroupPlugin=cgroup/v1
IgnoreSystemd=yes
EOF
    fi
}

# Start daemon $1 (args after it) unless one already runs; record it if we started it.
start_daemon() {
    local name="$1" pidfile="$2"; shift 2
    [[ -z "$(running_pid "$name")" ]] || return 0
    rm -f "$pidfile"
    "$@" 9>&- || die "$name failed to start (see $LOG_DIR/$name.log)"
    local pid
    pid="$(daemon_pid "$name" "$pidfile")" || die "$name exited right after start (see $LOG_DIR/$name.log)"
    record "$name" "$pid"
}

# With our own conf the daemons are local: a dead slurmd shows "idle" for up to
# SlurmdTimeout, so also require live local processes.
local_daemons_ok() {
    grep -qF "$MARKER" "$SLURM_CONF_FILE" 2>/dev/null || return 0
    [[ -n "$(running_pid slurmctld)" && -n "$(running_pid slurmd)" ]]
}

# Serialize start/stop of concurrent callers (e.g. CI and a developer).
# Daemons are started with fd 9 closed so they do not inherit the lock.
take_lock() {
    mkdir -p "$STATE_DIR"
    exec 9>"$STATE_DIR/lock"
    flock -w 300 9 || die "another slurm-cluster.sh start/stop holds $STATE_DIR/lock"
}

cmd_start() {
    if local_daemons_ok && cluster_up; then echo "slurm: up"; return 0; fi
    take_lock
    if local_daemons_ok && cluster_up; then echo "slurm: up"; return 0; fi
    local t0=$SECONDS
    install_packages
    setup_munge
    write_configs
    start_daemon slurmctld /run/slurmctld.pid slurmctld
    start_daemon slurmd /run/slurmd.pid slurmd

    # Poll until the node is usable; resume it if it came up down/drained.
    local host deadline states last_resume=-10
    host="$(hostname -s)"
    deadline=$((SECONDS + WAIT_SECS))
    while (( SECONDS < deadline )); do
        if cluster_up; then
            echo "slurm: up (started in $((SECONDS - t0))s)"
            return 0
        fi
        states="$(node_states)"
        if grep -qE '^(down|drain|drng|fail)$' <<<"$states" && (( SECONDS - last_resume >= 5 )); then
            timeout 5 scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
            last_resume=$SECONDS
        fi
        sleep 0.5
    done
    die "node did not become idle within ${WAIT_SECS}s (state: $(node_states | paste -sd' ' -)); see $LOG_DIR/"
}

# Stop a recorded daemon if it is still the process we started.
stop_one() {
    local name="$1" pid
    pid="$(awk -v n="$name" '$1 == n {print $2}' "$STATE_FILE" 2>/dev/null || true)"
    [[ -n "$pid" ]] || return 0
    if is_daemon "$pid" "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do is_daemon "$pid" "$name" || break; sleep 0.1; done
        if is_daemon "$pid" "$name"; then kill -KILL "$pid" 2>/dev/null || true; fi
        log "stopped $name ($pid)"
    fi
    sed -i "/^$name /d" "$STATE_FILE"
}

# Refuse (exit 1, one line) while squeue lists jobs: "user: id (STATE), ...; ..." per user,
# the caller's marked "(yours)", at most 5 ids per user.
refuse_if_jobs() {
    local caller jobs summary
    caller="${SUDO_USER:-$(id -un)}"
    # no controller process here: nothing for a queue to lose (and squeue would retry for ~9 s)
    [[ -n "$(running_pid slurmctld)" ]] || return 0
    if ! jobs="$(timeout 10 squeue -h -o '%u %i %T' 2>&1)"; then
        die "not stopping: squeue cannot list the queue ($(head -1 <<<"$jobs")); 'stop --force' stops anyway"
    fi
    [[ -n "$jobs" ]] || return 0
    summary="$(awk -v me="$caller" '
        { n[$1]++; if (n[$1] <= 5) ids[$1] = ids[$1] (n[$1] > 1 ? ", " : "") $2 " (" $3 ")" }
        END {
            for (u in n) {
                more = n[u] > 5 ? ", +" (n[u] - 5) " more" : ""
                line = line (line ? "; " : "") u (u == me ? " (yours)" : "") ": " ids[u] more
            }
            print line
        }' <<<"$jobs")"
    die "not stopping: jobs still queued or running: $summary; scancel them, or 'stop --force' stops anyway"
}

cmd_stop() {
    local force=0
    case "${1:-}" in
        "") ;;
        --force) force=1 ;;
        *) echo "usage: $0 start|stop [--force]|status" >&2; exit 2 ;;
    esac
    [[ -f "$STATE_FILE" ]] || { echo "slurm: nothing started by this script"; return 0; }
    take_lock
    [[ $force -eq 1 ]] || refuse_if_jobs
    stop_one slurmd
    stop_one slurmctld
    stop_one munged
    [[ -s "$STATE_FILE" ]] || rm -f "$STATE_FILE"
    echo "slurm: stopped"
}

cmd_status() {
    local states
    states="$(node_states)"
    if [[ -z "$states" ]]; then echo "slurm: down"; return 1; fi
    timeout 3 sinfo || true
    states_up "$states"
}

case "${1:-}" in
    start) [[ $# -eq 1 ]] || { echo "usage: $0 start|stop [--force]|status" >&2; exit 2; }; cmd_start ;;
    stop) [[ $# -le 2 ]] || { echo "usage: $0 start|stop [--force]|status" >&2; exit 2; }; cmd_stop "${2:-}" ;;
    status) [[ $# -eq 1 ]] || { echo "usage: $0 start|stop [--force]|status" >&2; exit 2; }; cmd_status ;;
    *) echo "usage: $0 start|stop [--force]|status" >&2; exit 2 ;;
esac
