# old-templates.sh — run here (a git checkout), before call2.sh: 4d3077b's templates (select
# and estimate before select's shape parameter and estimate's share arguments) into
# .carry/told, with this commit's LIST and estsel.cu (empty without estsel=1), so today's
# binary builds the old select and estimate beside the new ones (QGEN_TEMPLATE_DIR).
set -eu
rm -rf .carry/told && mkdir -p .carry/told
for f in $(git ls-tree --name-only 4d3077b templates/); do git show 4d3077b:"$f" > .carry/told/"${f#templates/}"; done
cp templates/LIST templates/estsel.cu .carry/told/
