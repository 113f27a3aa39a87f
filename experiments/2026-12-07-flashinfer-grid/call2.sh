# device call 2 of E89: qgen's own cells of the full grid (bench/run.sh's qgen step), then the
# merge with call 1's peers (carried back in .carry/fg) and the targets, into $OUT/fg.
mkdir -p $OUT/fg
[ -d .carry/fg ] && cp -r .carry/fg/. $OUT/fg/
t0=$(date +%s)
QGEN_TEMPLATE_DIR=.carry/tbase STEPS="qgen merge" timeout 570 bash bench/run.sh .carry/b $OUT/fg full > $OUT/fg/run-qgen.log 2>&1
echo "qgen+merge rc $? in $(($(date +%s) - t0)) s"; tail -n 30 $OUT/fg/targets.txt 2>/dev/null || tail -n 5 $OUT/fg/run-qgen.log
tar czf $OUT/fg.tgz -C $OUT fg && rm -rf $OUT/fg # one file back (a call returns a limited count)
