#!/usr/bin/env bash
# ctest wrapper: mpirun -np N BINARY [ARGS] (N = 0: run BINARY alone, as an MPI singleton). Exits 77 (ctest: skipped) only when mpirun itself cannot start because
# of the environment (no loopback interface in a fresh network namespace: "PMIx server's listener thread
# failed to start"; fix with `ip link set lo up`); any failure of the program itself fails the test.
set -uo pipefail
MPIEXEC=$1; NP=$2; BIN=$3
shift 3  # the rest: BINARY's arguments
if [ "$NP" = 0 ]; then
  out=$("$BIN" "$@" 2>&1); rc=$?
else
  out=$("$MPIEXEC" -n "$NP" "$BIN" "$@" 2>&1); rc=$?
fi
printf '%s\n' "$out"
if [ $rc -ne 0 ] && grep -q -e "listener thread failed to start" -e "unable to find network interfaces" <<<"$out"; then
  echo "skipped: mpirun cannot start here (bring the loopback interface up: ip link set lo up)"
  exit 77
fi
exit $rc
