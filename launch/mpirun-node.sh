#!/usr/bin/env bash
# One node, P MPI ranks x k workers each: the P x k grid of a USL study on one machine.
#
#   launch/mpirun-node.sh [OUT_DIR]            (defaults below; override with env vars)
#   P_LIST="1 2 4" K_LIST="1,2,4" FRAMES=1000 SCHEDULERS=dynamic launch/mpirun-node.sh out/
#
# Every P gets its own file (hybridsched-P<P>.h5); P=1 also runs the serial baseline
# (T_serial of Eq. 4). Then it merges them and fits the USL over N = P x k.
# Works with MPICH's and Open MPI's launcher alike and says which MPI runs. Ranks on one
# node split its CPUs between them (each pins its k workers to its share), so the launcher
# must not bind ranks itself: MPICH's hydra binds nothing by default; to Open MPI's mpirun
# the script passes --bind-to none, and says so when it also passes --allow-run-as-root
# (run as root, e.g. in a container) or --oversubscribe (more ranks than CPUs).
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
# Which MPI runs: the library mpi4py loads (it must be the launcher's), and the launcher.
lib=$(python3 -m mpi4py --mpi-lib-version 2>/dev/null || echo "unknown (is mpi4py installed?)")
read -r -a words <<< "${lib%%$'\n'*}"  # its first line, blanks squeezed
echo "mpirun-node.sh: MPI library: ${words[*]}"
launcher=$("$MPIEXEC" --version 2>&1 || true)
openmpi=no
case "$launcher" in *"Open MPI"*) openmpi=yes ;; esac
common=(-k "$K_LIST" -L "$FRAMES" --height "$SIDE" --width "$SIDE" --reps "$REPS" --overwrite)
files=()
for P in $P_LIST; do
    f="$OUT/hybridsched-P$P.h5"
    if [ "$P" = 1 ]; then
        # no launcher: P = 1 without MPI; the serial runs give T_serial
        hybridsched run -s "serial,$SCHEDULERS" "${common[@]}" -o "$f"
    else
        flags=()
        if [ "$openmpi" = yes ]; then
            flags=(--bind-to none)  # Open MPI binds each rank to a core by default
            if [ "$(id -u)" = 0 ]; then
                echo "mpirun-node.sh: running as root: passing --allow-run-as-root to Open MPI"
                flags+=(--allow-run-as-root)
            fi
            if [ "$P" -gt "$(nproc)" ]; then
                echo "mpirun-node.sh: P = $P > $(nproc) CPUs: passing --oversubscribe to Open MPI"
                flags+=(--oversubscribe)
            fi
        fi
        # shellcheck disable=SC2086
        "$MPIEXEC" ${flags[@]+"${flags[@]}"} $MPIEXEC_FLAGS -n "$P" \
            hybridsched run -s "$SCHEDULERS" --split "$SPLIT" "${common[@]}" -o "$f"
    fi
    files+=("$f")
done
hybridsched merge "${files[@]}" -o "$OUT/all.h5" --overwrite
hybridsched fit "$OUT/all.h5" --model usl --scheduler "${SCHEDULERS%%,*}" --plot "$OUT/usl.png"
