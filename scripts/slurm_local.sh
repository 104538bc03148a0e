#!/usr/bin/env bash
# A one-node SLURM cluster on 127.0.0.1, for the integration test (tests/test_slurm.py) and for trying
# the `slurm` profile on one machine. Debian/Ubuntu, as root.
#
#   scripts/slurm_local.sh start    apt-get install munge/slurmctld/slurmd/slurm-client if missing, write a
#                                   one-node slurm.conf from `slurmd -C`, start munged, slurmctld, slurmd
#                                   (each only if not already running) and wait until the node is idle
#   scripts/slurm_local.sh stop     cancel this cluster's jobs, then stop exactly the daemons `start`
#                                   started, by the pids it recorded; remove the slurm.conf it wrote
#   scripts/slurm_local.sh status   which recorded daemons are alive, the node state, what is enforced
#
# What it enforces, as a production cluster does (`start` says which are in force):
#   memory   cgroup memory limits (task/cgroup, ConstrainRAMSpace): a job that uses more than its --mem
#            is killed by the kernel's OOM killer and ends OUT_OF_MEMORY
#   network  slurmd, and so every job, runs in a network namespace joined to this machine by one veth
#            link and no route beyond it: jobs reach the controller and nothing else, as compute nodes
#            without internet do (SIEVE_SLURM_NETWORK=host keeps the host's network)
#   time     partition '$PARTITION' (the default) caps jobs at SIEVE_SLURM_MAXTIME minutes (INFINITE),
#            partition 'short' at SIEVE_SLURM_SHORT_MAXTIME (3): a job past its limit ends TIMEOUT
# Where the kernel offers no memory cgroup or no network namespace, `start` says so and runs without
# it; $STATE/enforced records what is in force (tests that need it skip on its absence).
#
# Exit status: 0 ok; 3 this machine cannot run it (not root, no apt-get, packages not installable,
# a foreign /etc/slurm/slurm.conf); 4 another cluster of this script is running (a state folder other
# than $STATE): stop it first. Tests skip on 3 and fail on anything else, 4 included.
# State (config copy, spool, logs, pids): ${SIEVE_SLURM_STATE:-/tmp/sieve-slurm}.
# The cluster has no accounting database (accounting_storage/none): `sacct` cannot report jobs, so
# Snakemake must poll with `squeue` (profile setting slurm-status-command: squeue); MinJobAge=7200
# keeps finished jobs visible to squeue for 2 hours (the rehearsal reads every job's final state).
set -euo pipefail

STATE=${SIEVE_SLURM_STATE:-/tmp/sieve-slurm}
CONF=/etc/slurm/slurm.conf          # where every client (sbatch, squeue, srun inside jobs) looks
MARKER="# written by sieve scripts/slurm_local.sh"
CTLD_PORT=${SIEVE_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SIEVE_SLURMD_PORT:-6818}
PARTITION=${SIEVE_SLURM_PARTITION:-local}
MAXTIME=${SIEVE_SLURM_MAXTIME:-INFINITE}
SHORT_MAXTIME=${SIEVE_SLURM_SHORT_MAXTIME:-3}
NETWORK=${SIEVE_SLURM_NETWORK:-isolated}
NETNS=sieve-slurm
HOST_ADDR=10.213.0.1      # this machine's end of the link into the jobs' namespace
NODE_ADDR=10.213.0.2      # slurmd's end: the only address jobs have besides loopback
CGROUP_ROOT=/sys/fs/cgroup
PACKAGES=(munge slurmctld slurmd slurm-client)
NEEDED_BINARIES=(munged munge unmunge slurmctld slurmd sbatch squeue scontrol sinfo srun scancel)

say() { echo "slurm_local: $*" >&2; }
cannot() { say "cannot run here: $*"; exit 3; }
busy() { say "busy: $*"; exit 4; }
die() { say "error: $*"; exit 1; }

# ---- recorded pids: a pid counts as ours only while /proc/<pid>/comm still names the daemon ----------

pidfile() { echo "$STATE/pids/$1.pid"; }

our_pid() {  # prints the recorded pid of daemon $1 if that process is alive and still that daemon
    local file pid
    file=$(pidfile "$1")
    [[ -s $file ]] || return 1
    pid=$(<"$file")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/comm && $(</proc/"$pid"/comm) == "$1" ]] || return 1
    echo "$pid"
}

record_pid() { echo "$2" >"$(pidfile "$1")"; }

wait_for() {  # wait_for SECONDS COMMAND...: poll until the command succeeds
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# ---- install ----------------------------------------------------------------------------------------

have_binaries() {
    local b
    for b in "${NEEDED_BINARIES[@]}"; do
        command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || return 1
    done
}

install_packages() {
    [[ $(id -u) == 0 ]] || cannot "needs root (apt-get and the slurm daemons); running as $(id -un)"
    export PATH="$PATH:/usr/sbin:/sbin"
    have_binaries && return 0
    command -v apt-get >/dev/null 2>&1 || cannot "apt-get not found (Debian/Ubuntu only)"
    say "installing ${PACKAGES[*]} (log: $STATE/log/apt.log)"
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${PACKAGES[@]}"; } >"$STATE/log/apt.log" 2>&1; then
        tail -n 5 "$STATE/log/apt.log" >&2
        cannot "apt-get could not install ${PACKAGES[*]}"
    fi
    have_binaries || cannot "packages installed but binaries missing: ${NEEDED_BINARIES[*]}"
}

# ---- enforcement: memory cgroups, the jobs' network namespace ----------------------------------------

# cgroup v1 with writable memory and freezer hierarchies (Slurm's cgroup/v1 plugin), or a unified v2
# hierarchy with the memory controller; anything else: no memory enforcement, said at start-up.
cgroup_plugin() {
    if [[ -w $CGROUP_ROOT/memory && -e $CGROUP_ROOT/memory/memory.limit_in_bytes && -d $CGROUP_ROOT/freezer ]]; then
        echo cgroup/v1
    elif [[ -e $CGROUP_ROOT/cgroup.controllers ]] && grep -qw memory "$CGROUP_ROOT/cgroup.controllers"; then
        echo cgroup/v2
    fi
}

netns_up() { [[ -e /var/run/netns/$NETNS ]] && ip -n "$NETNS" addr show dev veth-sj 2>/dev/null | grep -qF "$NODE_ADDR"; }

# A namespace whose only way out is a /30 link to this machine, with no default route: from a job every
# address but the controller's is unreachable. slurmd enters it with nsenter (`ip netns exec` would
# remount /sys and hide the cgroup hierarchy from slurmd).
make_netns() {
    netns_up && return 0
    command -v ip >/dev/null 2>&1 || return 1
    remove_netns
    { ip netns add "$NETNS" &&
        ip link add veth-sh type veth peer name veth-sj &&
        ip link set veth-sj netns "$NETNS" &&
        ip addr add "$HOST_ADDR/30" dev veth-sh && ip link set veth-sh up &&
        ip -n "$NETNS" addr add "$NODE_ADDR/30" dev veth-sj && ip -n "$NETNS" link set veth-sj up &&
        ip -n "$NETNS" link set lo up; } 2>>"$STATE/log/netns.log" || { remove_netns; return 1; }
}

remove_netns() {
    ip link del veth-sh 2>/dev/null || true
    ip netns del "$NETNS" 2>/dev/null || true
}

# What `start` put in force, for `status`, the tests and the rehearsal: one key=value a line.
write_enforced() {  # write_enforced CGROUP_PLUGIN NETWORK
    printf 'memory=%s\nnetwork=%s\nmaxtime.%s=%s\nmaxtime.short=%s\n' \
        "${1:-none}" "$2" "$PARTITION" "$MAXTIME" "$SHORT_MAXTIME" >"$STATE/enforced"
}

# ---- configuration ----------------------------------------------------------------------------------

node_name() { slurmd -C | sed -n 's/^NodeName=\([^ ]*\).*/\1/p'; }

write_conf() {
    if [[ -e $CONF ]] && ! grep -qF "$MARKER" "$CONF"; then
        cannot "$CONF exists and was not written by this script (a real cluster?); not touching it"
    fi
    local other
    other=$(sed -n 's#^StateSaveLocation=\(.*\)/spool/ctld$#\1#p' "$CONF" 2>/dev/null || true)
    if [[ -n $other && $other != "$STATE" ]] && { STATE=$other our_pid slurmctld || STATE=$other our_pid slurmd; } >/dev/null; then
        busy "another local cluster is running (state $other); stop it first:" \
               "SIEVE_SLURM_STATE=$other $0 stop"
    fi
    local hw node plugin track ctld_addr=127.0.0.1 node_addr=127.0.0.1 network=host
    # `slurmd -C` prints this machine's NodeName/CPUs/sockets/cores/threads/RealMemory line.
    hw=$(slurmd -C | grep '^NodeName=') || die "slurmd -C printed no NodeName line"
    node=$(node_name)
    plugin=$(cgroup_plugin)
    if [[ $NETWORK == isolated ]]; then
        if make_netns; then
            ctld_addr=$HOST_ADDR node_addr=$NODE_ADDR network=isolated
        else
            say "no network namespace here (see $STATE/log/netns.log): jobs keep this machine's network"
        fi
    fi
    mkdir -p "$(dirname "$CONF")"
    if [[ -n $plugin ]]; then
        cat >"$STATE/cgroup.conf" <<EOF
$MARKER
CgroupPlugin=$plugin
CgroupMountpoint=$CGROUP_ROOT
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
ConstrainCores=no
ConstrainDevices=no
EOF
        cp "$STATE/cgroup.conf" "$(dirname "$CONF")/cgroup.conf"
        track="# Memory enforced: each job in its own memory cgroup, OOM-killed past its --mem.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup"
    else
        say "no writable memory cgroup here: --mem is scheduled but not enforced"
        track="# No memory cgroup here: processes tracked through /proc, memory scheduled but not enforced.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none"
    fi
    write_enforced "$plugin" "$network"
    cat >"$STATE/slurm.conf" <<EOF
$MARKER: a one-node test cluster on this machine
ClusterName=sieve
SlurmctldHost=$node($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
$track
# Time limits: a request over its partition's MaxTime (or memory over the node's) is refused at sbatch,
# as production clusters do, rather than left pending forever; a running job past its limit gets TERM,
# then KILL KillWait seconds later (checked every ~30 s).
EnforcePartLimits=ALL
OverTimeLimit=0
KillWait=30
# Cores and memory are consumable, so --cpus-per-task and --mem are really scheduled.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
# No slurmdbd: sacct cannot see jobs, squeue shows finished jobs for MinJobAge seconds.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=7200
ReturnToService=2
$hw NodeAddr=$node_addr State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=$MAXTIME State=UP
PartitionName=short Nodes=$node Default=NO MaxTime=$SHORT_MAXTIME State=UP
EOF
    cp "$STATE/slurm.conf" "$CONF"
}

# ---- daemons ----------------------------------------------------------------------------------------

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munged() {
    if our_pid munged >/dev/null; then return 0; fi
    if munge_works; then
        say "munged already running (not started by this script; it will not stop it)"
        return 0
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    # setpriv execs in place, so $! is munged's own pid; setsid detaches it from the caller's session.
    setsid setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground >"$STATE/log/munged.out" 2>&1 </dev/null 9>&- &
    record_pid munged $!
    wait_for 15 munge_works || { tail -n 5 "$STATE/log/munged.out" /var/log/munge/munged.log >&2 || true
                                 die "munged did not come up"; }
}

start_daemon() {  # start_daemon NAME ARGS...: run NAME in the foreground, detached, pid recorded
    local name=$1 enter=()
    shift
    if our_pid "$name" >/dev/null; then return 0; fi
    # slurmd, and so every job it starts, inside the jobs' network namespace when there is one
    if [[ $name == slurmd ]] && grep -qx "network=isolated" "$STATE/enforced" 2>/dev/null; then
        enter=(nsenter "--net=/var/run/netns/$NETNS")
    fi
    # nsenter execs in place, so $! stays the daemon's own pid
    setsid "${enter[@]}" "$name" -D "$@" >"$STATE/log/$name.out" 2>&1 </dev/null 9>&- &
    record_pid "$name" $!
    sleep 1
    our_pid "$name" >/dev/null || { tail -n 20 "$STATE/log/$name.out" "$STATE/log/$name.log" >&2 || true
                                    die "$name exited at start-up"; }
}

node_idle() { [[ $(sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null) == idle* ]]; }

start() {
    mkdir -p "$STATE"/{log,pids,run,spool/ctld,spool/d}
    install_packages
    if ! our_pid slurmctld >/dev/null; then
        write_conf
    elif ! grep -qF "$MARKER" "$CONF" 2>/dev/null; then
        die "slurmctld is running but $CONF is gone; run '$0 stop' first"
    fi
    start_munged
    # -c: start from a clean controller state; this is a scratch cluster.
    our_pid slurmctld >/dev/null || start_daemon slurmctld -c
    wait_for 30 scontrol ping || die "slurmctld does not answer (see $STATE/log/slurmctld.log)"
    start_daemon slurmd -N "$(node_name)"
    if ! wait_for 60 node_idle; then
        sinfo -N -l >&2 || true
        scontrol show node >&2 || true
        die "node did not become idle (see $STATE/log/slurmd.log)"
    fi
    say "up: $(sinfo -h -N -p "$PARTITION" -o '%c CPUs, %m MB'); enforced: $(paste -sd' ' "$STATE/enforced") (state: $STATE)"
}

stop_pid() {  # stop_pid NAME: TERM, then KILL after 15 s, the recorded daemon NAME
    local name=$1 pid
    if pid=$(our_pid "$name"); then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_for 15 bash -c "! kill -0 $pid"; then
            say "$name ($pid) ignored TERM; sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        say "stopped $name ($pid)"
    fi
    rm -f "$(pidfile "$name")"
}

stop() {
    [[ -d $STATE/pids ]] || { say "nothing recorded in $STATE; nothing to stop"; return 0; }
    if our_pid slurmctld >/dev/null; then
        # Jobs of this private cluster only: their processes would outlive slurmd otherwise.
        local jobs
        jobs=$(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING -o %i 2>/dev/null | tr '\n' ' ') || true
        if [[ -n ${jobs// /} ]]; then
            say "cancelling jobs $jobs"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 30 bash -c '[[ -z $(squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null) ]]' || true
        fi
    fi
    stop_pid slurmd
    stop_pid slurmctld
    stop_pid munged
    # The configuration and the namespace belong to the cluster whose state the config names: a stop
    # for another state folder (a second test session) must not pull them from under a running one.
    if grep -qsF "$MARKER" "$CONF" && grep -qxF "StateSaveLocation=$STATE/spool/ctld" "$CONF"; then
        rm -f "$CONF"
        if grep -qsF "$MARKER" "$(dirname "$CONF")/cgroup.conf"; then rm -f "$(dirname "$CONF")/cgroup.conf"; fi
        if [[ -e /var/run/netns/$NETNS ]]; then remove_netns; fi
    fi
    rm -f "$STATE/enforced"
}

status() {
    local name pid rc=0
    for name in munged slurmctld slurmd; do
        if pid=$(our_pid "$name"); then
            echo "$name: running (pid $pid)"
        elif [[ $name == munged ]] && munge_works; then
            echo "munged: running (not started by this script)"
        else
            echo "$name: not running"
            rc=1
        fi
    done
    if ((rc == 0)); then sinfo -N -o '%N %P %T %c %m %l' || rc=1; fi
    if [[ -s $STATE/enforced ]]; then cat "$STATE/enforced"; fi
    return $rc
}

main() {
    local cmd=${1:-}
    case $cmd in
        start | stop | status) ;;
        *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
    esac
    export PATH="$PATH:/usr/sbin:/sbin"
    mkdir -p "$STATE"
    # One start/stop at a time (two test sessions must not race on the same daemons).
    exec 9>"$STATE/lock"
    flock 9
    "$cmd"
}

main "$@"
