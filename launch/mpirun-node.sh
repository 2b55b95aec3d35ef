#!/usr/bin/env bash
# One node, P MPI ranks x k workers each: the P x k grid of a USL study on one machine.
#
#   launch/mpirun-node.sh [OUT_DIR]            (defaults below; override with env vars)
#   P_LIST="1 2 4" K_LIST="1,2,4" FRAMES=1000 SCHEDULERS=dynamic launch/mpirun-node.sh out/
#
# Every P gets its own file (hybridsched-P<P>.h5); P=1 also runs the serial baseline
# (T_serial of Eq. 4). Then it merges them and fits the USL over N = P x k.
# Ranks on one node split its CPUs between them (each pins its k workers to its share),
# so the launcher must not bind ranks itself: MPICH's hydra binds nothing by default;
# with Open MPI add --bind-to none (and --allow-run-as-root inside a root container).
set -euo pipefail
OUT=${1:-hybridsched-node}
P_LIST=${P_LIST:-"1 2"}
K_LIST=${K_LIST:-"1,2"}
FRAMES=${FRAMES:-200}
SIDE=${SIDE:-256}
REPS=${REPS:-5}
SCHEDULERS=${SCHEDULERS:-dynamic}
SPLIT=${SPLIT:-static}
MPIEXEC=${MPIEXEC:-mpiexec}
MPIEXEC_FLAGS=${MPIEXEC_FLAGS:-}
mkdir -p "$OUT"
common=(-k "$K_LIST" -L "$FRAMES" --height "$SIDE" --width "$SIDE" --reps "$REPS" --overwrite)
files=()
for P in $P_LIST; do
    f="$OUT/hybridsched-P$P.h5"
    if [ "$P" = 1 ]; then
        # no launcher: P = 1 without MPI; the serial runs give T_serial
        hybridsched run -s "serial,$SCHEDULERS" "${common[@]}" -o "$f"
    else
        # shellcheck disable=SC2086
        "$MPIEXEC" $MPIEXEC_FLAGS -n "$P" hybridsched run -s "$SCHEDULERS" --split "$SPLIT" \
            "${common[@]}" -o "$f"
    fi
    files+=("$f")
done
hybridsched merge "${files[@]}" -o "$OUT/all.h5" --overwrite
hybridsched fit "$OUT/all.h5" --model usl --scheduler "${SCHEDULERS%%,*}" --plot "$OUT/usl.png"
