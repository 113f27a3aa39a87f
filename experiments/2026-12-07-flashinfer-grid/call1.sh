# device call 1 of E89: FlashInfer (wheels carried in .whl/fi) and the other peers over the full
# grid of bench/run.sh (its peers step alone), into $OUT/fg; .carry/b is the Release build.
# The qgen step follows in call 2 on the same OUT contents (carried back in .carry/fg).
mkdir -p $OUT/fg
[ -d .carry/fg ] && cp -r .carry/fg/. $OUT/fg/
t0=$(date +%s)
FLASHINFER_WHEELS=.whl/fi STEPS=peers timeout 570 bash bench/run.sh .carry/b $OUT/fg full > $OUT/fg/run-peers.log 2>&1
echo "peers rc $? in $(($(date +%s) - t0)) s"; tail -n 5 $OUT/fg/run-peers.log
