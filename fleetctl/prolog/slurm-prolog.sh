#!/bin/sh
# Slurm Prolog and Epilog: fleetctl's checks on the node a job is about to start on, and on
# the node a job just ended on (a node that broke during a long job takes no other).
#
# slurm.conf:
#   Prolog=/path/to/slurm-prolog.sh
#   Epilog=/path/to/slurm-prolog.sh           # the same script: slurmd's SLURM_SCRIPT_CONTEXT
#                                             # (epilog_slurmd) makes it the epilog
#   PrologFlags=Alloc                         # run on every node of the job, at allocation
#   SchedulerParameters=nohold_on_prolog_fail # requeue the job, not hold it, when this fails
#   JobRequeue=1                              # (or sbatch --requeue) batch jobs may be requeued
#   BatchStartTimeout=150                     # above FLEETCTL_PROLOG_TIMEOUT_S: Slurm's default 10 s
#                                             # requeues a job whose prolog takes longer, over and
#                                             # over, and never drains the node
#
# Runs `fleetctl node prolog` (`node epilog` after the job; a short suite, default `prejob`).
# On a failed check fleetctl drains the node through its capacity guard with the check as
# cause and this exits 1: Slurm drains the node too and (prolog) requeues the job onto other
# nodes. Anything else (passed,
# the guard kept the node, a check that could not be judged, fleetctl unreachable) exits 0
# and the job starts: an outage of fleetctl must not drain a cluster. What fleetctl said
# goes to slurmd's log.
#
# slurmd gives a prolog almost no environment: fleetctl's settings come from its config
# file or from the variables below, set in a wrapper that execs this script.
#   FLEETCTL                   the fleetctl program (default: fleetctl on PATH)
#   FLEETCTL_PROLOG_SUITE      the suite (default: prejob)
#   FLEETCTL_EPILOG_SUITE      the suite after a job (default: prejob)
#   FLEETCTL_PROLOG_TIMEOUT_S  the most seconds the checks may take, 1 to 3600 (default: 120);
#                              the epilog's too (the node stays completing, taking no
#                              job, until its epilog ends)
#   FLEETCTL_DB_URL, TEMPORAL_ADDRESS, FLEETCTL_TASK_QUEUE, FLEETCTL_FLEET, ...: fleetctl's own
#                              settings, as its workers have them (a node labelled with a fleet
#                              is drained through that fleet's capacity guard)
set -u

fleetctl="${FLEETCTL:-fleetctl}"
case "${SLURM_SCRIPT_CONTEXT:-}" in
    epilog_slurmd) gate=epilog; suite="${FLEETCTL_EPILOG_SUITE:-prejob}" ;;
    *) gate=prolog; suite="${FLEETCTL_PROLOG_SUITE:-prejob}" ;;
esac
limit="${FLEETCTL_PROLOG_TIMEOUT_S:-120}"
node="${SLURMD_NODENAME:-}"
job="${SLURM_JOB_ID:-}"

if [ -z "$node" ]; then
    echo "fleetctl $gate: SLURMD_NODENAME is not set; not checking" >&2
    exit 0
fi
# Whole seconds from 1 to 3600: `timeout 0` never times out, and a number too long for the
# shell's arithmetic would be an error at the comparison.
case "$limit" in
    ''|*[!0-9]*|??????*) bad=1 ;;
    *) bad=0; [ "$limit" -ge 1 ] && [ "$limit" -le 3600 ] || bad=1 ;;
esac
if [ "$bad" -eq 1 ]; then
    echo "fleetctl $gate: FLEETCTL_PROLOG_TIMEOUT_S must be whole seconds from 1 to 3600, not '$limit'; using 120" >&2
    limit=120
fi

timeout "$limit" "$fleetctl" --as "$gate@$node" node "$gate" "$node" --job "$job" --suite "$suite"
status=$?
if [ "$status" -eq 3 ]; then
    exit 1
fi
exit 0
