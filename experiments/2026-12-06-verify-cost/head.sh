# head.sh — what this experiment's device calls (call2.sh, call3.sh, call5.sh) share; sourced
# from the repository root with OUT set: results gather in R=/tmp/o/r (outside the returned
# folder, so that one archive comes back, not every file), pack puts them in $OUT/r.tgz,
# elapsed prints the seconds since sourcing, and the GPU and driver go to $R/gpu.txt.
set -u
t0=$(date +%s)
DEST=$OUT; R=/tmp/o/r; mkdir -p $R
elapsed() { echo "at $(($(date +%s) - t0)) s"; }
pack() { tar czf $DEST/r.tgz -C /tmp/o r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
