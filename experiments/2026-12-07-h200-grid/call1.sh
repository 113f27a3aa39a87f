# device call 1 of E91: the full grid of bench/run.sh on whatever GPU comes (the H200 run
# issue 44 owes), peers with FlashInfer (wheels carried in .whl/fi) and qgen in one call,
# each step under its own timeout so a slow one leaves the other's results; .carry/b is
# main's Release build. Everything is packed into one file (a call returns a limited count).
mkdir -p $OUT/g
t0=$(date +%s)
FLASHINFER_WHEELS=.whl/fi STEPS=peers timeout 330 bash bench/run.sh .carry/b $OUT/g full > $OUT/g/run-peers.log 2>&1
echo "peers rc $? in $(($(date +%s) - t0)) s"; tail -n 3 $OUT/g/run-peers.log
t1=$(date +%s)
STEPS="qgen merge" timeout 240 bash bench/run.sh .carry/b $OUT/g full > $OUT/g/run-qgen.log 2>&1
echo "qgen+merge rc $? in $(($(date +%s) - t1)) s"; tail -n 30 $OUT/g/targets.txt 2>/dev/null || tail -n 5 $OUT/g/run-qgen.log
grep -iE "group|RuntimeError|skip|refus" $OUT/g/run-peers.log | tail -n 8
tar czf $OUT/g.tgz -C $OUT g && rm -rf $OUT/g
