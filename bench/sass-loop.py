#!/usr/bin/env python3
# sass-loop.py — opcode counts of the loops that hold HMMA in one kernel of a cuobjdump -sass
# listing: the per-sub-tile instruction budget of attend's consumers (what bounds them when issue-bound).
#   cuobjdump -sass FILE.cubin > k.sass   (the cubin: a .qgc cache entry from its ELF header on)
#   python3 bench/sass-loop.py k.sass [KERNEL]   (KERNEL defaults to qg_attend)
import collections, re, sys

text, kernel = open(sys.argv[1]).read(), sys.argv[2] if len(sys.argv) > 2 else "qg_attend"
parts = re.split(r"\n\s*Function : (\S+)\n", "\n" + text)
body = dict(zip(parts[1::2], parts[2::2])).get(kernel)
if body is None: sys.exit(f"sass-loop.py: no function {kernel} in {sys.argv[1]}")
ins = []
for line in body.splitlines():
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", line)
    if m: ins.append((int(m.group(1), 16), m.group(3), line.strip()))
at = {a: i for i, (a, _, _) in enumerate(ins)}
for i, (a, op, t) in enumerate(ins):
    m = re.search(r"BRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", t) if op.startswith("BRA") else None
    if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at: continue
    loop = ins[at[int(m.group(1), 16)]:i + 1]
    if not any(o.startswith("HMMA") for _, o, _ in loop): continue
    c = collections.Counter(o.split(".")[0] for _, o, _ in loop)
    print(f"{kernel} loop {loop[0][0]:#x}-{a:#x}: {len(loop)} instructions: " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
