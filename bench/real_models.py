#!/usr/bin/env python3
"""real_models.py — qgen's sparse selectors against dense attention on real pretrained
models: RULER-style retrieval accuracy, and free-running agreement.

    # CPU, small (the reference backend; a 2K trial with the 9 --quick configs took 18-40 s here)
    QGEN_LIBRARY=$PWD/build/libqgen.so PYTHONPATH=$PWD/python:/root/pylib/gguf /usr/bin/python3 \\
        bench/real_models.py --model smollm2 --contexts 2K --trials 2 --quick --backend cpu --out /tmp/rm
    # GPU, the grid (docs/real-models-eval.md has the sized commands)
    python3 bench/real_models.py --model smollm2 --backend gpu --out out/rm-smollm2 --max-seconds 450

Grid mode. For each context x task x trial: one exact dense prefill of the trial's prompt
(qgen.models.ruler) less its last token, then a greedy answer decoded from that state once
per selector config, the last prompt token forced through the first decode step so that
every answer token comes from the config's attention; the answer is scored by exact match,
and for every sparse config the pages each global layer's KV heads selected at that first
step are compared with the pages holding the needles (recall). The trials of one
(context, task) are decoded together (--batch states a generate call) so each config
runs once over the batch.

Agreement mode (--agreement). For each context: a natural-text document of (context - 256)
tokens, 256 greedy tokens with exact attention, then every config teacher-forced on those
tokens: top-1 agreement with the exact tokens and mean KL(exact || config) per step.

Configs (names are CACHE/SELECTOR/BUDGET; --list-configs prints them):
  exact                      the model's own attention (the reference of every other row)
  f16/dense                  qgen dense over an f16 cache
  f16/SEL/c50 .. c6.25       SEL at a coverage of 50, 25, 12.5, 6.25 % of the pages
  f16/SEL/b256 .. b1024      SEL at a budget of 256, 512, 1024 tokens
        SEL: quest (8-bit page bounds, the default), quest-f16b (f16 bounds),
             r4, r8, r16 (two-stage: rescore candidates 4, 8, 16 x the budget),
             r8-p0.9 (two-stage r8 with the top-p 0.9 cut)
  q8_0/dense, q4_0/dense     qgen dense over a q8_0 / q4_0 cache (K and V)
  q8_0/SEL/cX, q4_0/SEL/cX   SEL in quest, r8 at the four coverages (budgets and the other
                             selectors are run on f16 only: the quantized caches ask whether
                             the cache type moves the answer, not which selector is best)
Pages are 64 tokens; sink and recent are the spec's defaults (64 and 128 tokens).

Output in --out: raw-MODEL[-iofn].jsonl (one line per trial x config, appended as each
config finishes; a rerun with the same --out skips what is there, so a killed run resumes),
agree-MODEL[-iofn].jsonl, and summary-MODEL.md / summary-MODEL.json rebuilt from every raw
file of the model in --out (all shards) at the end of each run (or alone: --summarize).
"""
import argparse
import fnmatch
import glob
import json
import math
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from qgen.models import ruler  # noqa: E402

MODELS_DIR = os.path.expanduser(os.environ.get("QGEN_MODEL_DIR") or "~/.cache/qgen/models")  # as qgen.models
KNOWN_MODELS = {  # short name -> (file in MODELS_DIR, default contexts, agreement contexts)
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", (2048, 4096, 8192), (4096, 8192)),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", (8192, 16384, 32768), (16384, 32768)),
}
BLOCK = 64
COVERAGES = (0.5, 0.25, 0.125, 0.0625)
BUDGETS = (256, 512, 1024)
SELECTORS = {  # name -> the sparse fields besides block and the budget
    "quest": {},
    "quest-f16b": {"bounds": "f16"},
    "r4": {"rescore": {"candidates": 4}},
    "r8": {"rescore": {"candidates": 8}},
    "r16": {"rescore": {"candidates": 16}},
    "r8-p0.9": {"rescore": {"candidates": 8, "top_p": 0.9}},
}
QUANT_SELECTORS = ("quest", "r8")
QUICK = ("exact", "f16/dense", "f16/quest/c6.25", "f16/r8/c6.25", "f16/r8/c25", "f16/quest/b512", "f16/r8/b512",
         "q8_0/dense", "q8_0/r8/c6.25")
VERDICT_CONFIG = "f16/r8/c6.25"
VERDICT_POINTS = 0.02
ELIGIBLE = 0.8
GEN_RESERVE = 64     # tokens kept free after the prompt for the answer (prompt = context - this)
AGREE_STEPS = 256


def _pct(x):
    return f"{x * 100:g}"


def all_configs():
    """Every config: dict(name, k_type, selector, budget, sparse) in the grid's order."""
    out = [dict(name="exact", k_type=None, selector="exact", budget="dense", sparse=None)]
    for kt in ("f16", "q8_0", "q4_0"):
        out.append(dict(name=f"{kt}/dense", k_type=kt, selector="dense", budget="dense", sparse=None))
        sels = SELECTORS if kt == "f16" else {s: SELECTORS[s] for s in QUANT_SELECTORS}
        for sel, extra in sels.items():
            budgets = [(f"c{_pct(c)}", {"coverage": c}) for c in COVERAGES]
            if kt == "f16":
                budgets += [(f"b{b}", {"budget": b}) for b in BUDGETS]
            for bname, bfield in budgets:
                sparse = {"block": BLOCK, **bfield, **json.loads(json.dumps(extra))}
                out.append(dict(name=f"{kt}/{sel}/{bname}", k_type=kt, selector=sel, budget=bname, sparse=sparse))
    return out


def pick_configs(patterns, quick):
    cfgs = all_configs()
    if patterns:
        pats = [p.strip() for p in patterns.split(",") if p.strip()]
        chosen = [c for c in cfgs if any(fnmatch.fnmatchcase(c["name"], p) for p in pats)]
        bad = [p for p in pats if not any(fnmatch.fnmatchcase(c["name"], p) for c in cfgs)]
        if bad:
            raise SystemExit(f"--configs: {', '.join(bad)} match no config (see --list-configs)")
    elif quick:
        chosen = [c for c in cfgs if c["name"] in QUICK]
    else:
        chosen = cfgs
    return chosen


def parse_tokens(s):
    s = s.strip().upper()
    try:
        return int(float(s[:-1]) * 1024) if s.endswith("K") else int(s)
    except ValueError:
        raise SystemExit(f"bad token count {s!r} (e.g. 2K, 8K, 4096)")


# ---- the model runner (the thin adapter over qgen.models) ---------------------------------

class Runner:
    """What the grid needs from qgen.models, in one place: load, prefill, greedy decode of a
    batch of states under one config (with the first step's page selections), and a
    teacher-forced run that returns per-step logits.

    The answer must come from decode attention, so a trial's prompt is prefilled without
    its last token and that token is forced through the first decode step: every answer
    token, the first included, is chosen after a step through the config's attention
    (prefilling the whole prompt would take the first answer token from the exact
    prefill's logits whatever the config).

    One QgenAttention per (cache type, selector) serves every budget of it: the budget is
    its per-attend option (attend_opts). Configs come grouped that way, and only the
    group in use is kept open: one set of caches (batch x context x global layers) at a
    time, which at 8K x 30 layers is gigabytes a set."""

    def __init__(self, path, backend, batch, model=None):
        try:
            import qgen.models as qm
        except ImportError as e:
            raise SystemExit(f"qgen.models is not importable here ({e}); it is the real-model runner "
                             "(branch models) that this driver needs") from e
        if not hasattr(qm, "load"):
            raise SystemExit("qgen.models has no load(): the real-model runner (branch models) is not here")
        self.qm = qm
        self.backend = backend
        self.model = model if model is not None else qm.load(path, device="cuda" if backend == "gpu" else "cpu")
        self.tok = self.model.tokenizer
        self.config = self.model.config
        self.batch = batch
        self._atts = {}

    def describe(self):
        c = self.config
        keys = ("arch", "n_layer", "n_head", "n_head_kv", "head_dim", "global_layers", "sliding_window",
                "context_length")
        return {k: (list(getattr(c, k)) if isinstance(getattr(c, k, None), (list, tuple)) else getattr(c, k, None))
                for k in keys}

    def attention(self, cfg):
        """The QgenAttention of cfg (None for exact), its budget set for this config."""
        if cfg["k_type"] is None:
            return None
        sp = cfg["sparse"]
        if sp is None:
            key = (cfg["k_type"], "dense")
        else:
            key = (cfg["k_type"], json.dumps({k: v for k, v in sp.items() if k not in ("coverage", "budget")},
                                             sort_keys=True))
        att = self._atts.get(key)
        if att is None:
            self.close()
            if sp is None:
                sparse = False
            else:  # the spec's own budget is a placeholder: every attend passes the config's
                sparse = {k: v for k, v in sp.items() if k not in ("coverage", "budget")}
                sparse["coverage"] = 0.25
            att = self.qm.QgenAttention(self.model, backend=self.backend, sparse=sparse, k_type=cfg["k_type"],
                                        v_type=cfg["k_type"])
            self._atts[key] = att
        if sp is None:
            att.attend_opts = {}
        elif "budget" in sp:
            att.attend_opts = {"budget": sp["budget"]}
        else:
            att.attend_opts = {"coverage": sp["coverage"]}
        return att

    def prefill(self, ids):
        """The state of the prompt less its last token (see the class comment)."""
        return self.model.prefill(list(ids[:-1])), int(ids[-1])

    def release(self, state):
        pass  # the state's arrays go with the last reference

    def close(self):
        for att in self._atts.values():
            att.close()
        self._atts = {}

    def decode(self, states, att, max_new):
        """Greedy answer tokens (stopped at a stop token) for each (state, last prompt token),
        and with a sparse config each state's page selections {layer: (lists, counts)} at
        the first decode step (the one that chooses the first answer token)."""
        first = {}
        if att is not None and att.fields.get("sparse") is not False:
            orig = att.step

            def step(layer, q, k, v):  # read the selection back after the first step only
                out = orig(layer, q, k, v)
                if layer not in first:
                    first[layer] = [att.caches[layer].selection(i) for i in range(q.shape[0])]
                return out
            att.step = step
        try:
            res = self.model.generate([s for s, _ in states], max_new + 1, attention=att,
                                      force=[[last] for _, last in states])
        finally:
            if att is not None:
                att.__dict__.pop("step", None)
        out = []
        for i, r in enumerate(res):
            toks = list(r.ids[1:])  # ids[0] is the forced last prompt token
            if r.stopped and toks:
                toks = toks[:-1]
            out.append((toks, {layer: sel[i] for layer, sel in first.items()} if first else None))
        return out

    def forced_logits(self, state, att, tokens):
        """Logits [len(tokens), vocab] of a teacher-forced run over tokens, each row the
        distribution the token at that position was chosen from."""
        st, last = state
        r = self.model.generate(st, len(tokens) + 1, attention=att, force=[last] + list(tokens),
                                return_logits=True, stop=False)
        return list(r.ids[1:]), _np64(r.logits[1:])

    def free_logits(self, state, n):
        st, last = state
        r = self.model.generate(st, n + 1, attention=None, force=[last], return_logits=True, stop=False)
        return list(r.ids[1:]), _np64(r.logits[1:])


def _np64(x):
    import numpy as np

    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


# ---- needle recall -----------------------------------------------------------------------

def pages_of(spans, block=BLOCK):
    pages = set()
    for s, e in spans:
        pages.update(range(s // block, (max(e, s + 1) - 1) // block + 1))
    return pages


def recall(selection, spans, block=BLOCK):
    """Needle pages a config's selection kept: {mean, min, layers: {layer: mean}} over global
    layers x KV heads (pages holding any token of an answer-bearing needle)."""
    if not selection:
        return None
    want = pages_of(spans, block)
    if not want:
        return None
    per_layer, every = {}, []
    for layer, (lists, counts) in sorted(selection.items()):
        vals = []
        for h in range(len(counts)):
            got = set(int(p) for p in lists[h][:int(counts[h])])
            vals.append(len(want & got) / len(want))
        per_layer[str(layer)] = round(sum(vals) / len(vals), 4)
        every.extend(vals)
    return {"mean": round(sum(every) / len(every), 4), "min": round(min(every), 4), "layers": per_layer}


def _mean_pages(selection):
    if not selection:
        return None
    counts = [int(c) for _, cs in selection.values() for c in cs]
    return round(sum(counts) / len(counts), 2)


# ---- result files ------------------------------------------------------------------------

def model_tag(path):
    base = os.path.basename(path).lower()
    for name, (fname, _, _) in KNOWN_MODELS.items():
        if base == fname.lower():
            return name
    return os.path.splitext(base)[0].replace(".", "_")


def resolve_model(arg):
    if arg in KNOWN_MODELS:
        path = os.path.join(MODELS_DIR, KNOWN_MODELS[arg][0])
    else:
        path = arg
    if not os.path.isfile(path):
        raise SystemExit(f"--model {arg}: no file {path} (short names: {', '.join(KNOWN_MODELS)}, looked up in "
                         f"$QGEN_MODEL_DIR = {MODELS_DIR}; or give a GGUF path)")
    return path


def read_jsonl(paths):
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for ln in f:
                ln = ln.strip()
                if not ln:
                    continue
                try:
                    out.append(json.loads(ln))
                except json.JSONDecodeError:
                    pass  # a line cut by a kill: the resume reruns that config
    return out


class Writer:
    def __init__(self, path):
        self.path = path
        self.f = open(path, "a", encoding="utf-8")

    def write(self, rec):
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.f.flush()

    def sync(self):  # once a config's batch is written: a kill loses at most the config in flight
        os.fsync(self.f.fileno())

    def close(self):
        self.f.close()


def prompt_style(arg, path, tok=None):
    if arg != "auto":
        return arg
    if tok is not None and hasattr(tok, "chat_template"):
        return "chat" if tok.chat_template else "completion"
    try:  # an instruct GGUF carries a chat template; a base model gets a completion prompt
        import gguf

        r = gguf.GGUFReader(path)
        return "chat" if "tokenizer.chat_template" in r.fields else "completion"
    except Exception:  # noqa: BLE001 — no gguf package: judge by the name
        return "chat" if "instruct" in os.path.basename(path).lower() else "completion"


# ---- trial making, ahead of the model in worker processes ---------------------------------

_TOK = None  # the tokenizer the workers inherit through fork


def _make_job(job):
    task, n, seed, style, text = job
    tr = ruler.make(task, _TOK, n, seed, style=style, text_path=text)
    return tr


def start_workers(tok, workers):
    """The prompt-making processes, forked before the model is loaded (no CUDA state, no
    weights in them), each with the tokenizer; None for workers = 0."""
    global _TOK
    _TOK = tok
    if workers <= 0:
        return None
    import multiprocessing as mp

    return mp.get_context("fork").Pool(workers)


class Trials:
    """Makes the trials of every job in order; with a pool, in worker processes that run
    ahead of the GPU (a 32K prompt takes seconds of pure-Python tokenizing)."""

    def __init__(self, tok, jobs, pool):
        global _TOK
        _TOK = tok
        self.jobs = jobs
        self.pool = pool
        if pool is not None and jobs:
            self.it = pool.imap(_make_job, jobs, chunksize=1)
        else:
            self.it = map(_make_job, jobs)

    def take(self, n):
        return [next(self.it) for _ in range(n)]

    def close(self):
        self.pool = None  # the pool is main's: it ends it


# ---- the grid ----------------------------------------------------------------------------

def run_grid(args, runner, cfgs, tag, shard, t0):
    i_shard, n_shard = shard
    suffix = f"-{i_shard}of{n_shard}" if n_shard > 1 else ""
    raw_path = os.path.join(args.out, f"raw-{tag}{suffix}.jsonl")
    done = set()
    for r in read_jsonl([raw_path] if os.path.exists(raw_path) else []):
        if r.get("kind") == "trial":
            done.add((r["ctx"], r["task"], r["trial"], r["config"]))
    w = Writer(raw_path)
    style = prompt_style(args.prompt, args.model_path, runner.tok)
    tasks = args.task_list
    # Work units: (batch of trials, context, task), trial batches outermost, so a run cut
    # short has every cell at about the same number of trials.
    units = []
    for b0 in range(0, args.trials, args.batch):
        for ctx in args.ctx_list:
            for task in tasks:
                units.append((list(range(b0, min(args.trials, b0 + args.batch))), ctx, task))
    units = [u for j, u in enumerate(units) if j % n_shard == i_shard]
    print(f"grid: {tag}, {len(cfgs)} configs, tasks {','.join(tasks)}, contexts "
          f"{','.join(map(str, args.ctx_list))}, {args.trials} trials (batches of {args.batch}), prompt style {style}, "
          f"{len(units)} work units in shard {i_shard}/{n_shard}; raw -> {raw_path}", flush=True)
    plan = []
    for trial_ids, ctx, task in units:
        todo = {t: [c for c in cfgs if (ctx, task, t, c["name"]) not in done] for t in trial_ids}
        trial_ids = [t for t in trial_ids if todo[t]]
        if trial_ids:
            plan.append((trial_ids, ctx, task, todo))
    jobs = [(task, ctx - GEN_RESERVE, args.seed + t, style, args.text) for trial_ids, ctx, task, _ in plan
            for t in trial_ids]
    maker = Trials(runner.tok, jobs, args.pool)
    unit_secs = {}
    stopped = False
    for ui, (trial_ids, ctx, task, todo) in enumerate(plan):
        el = time.time() - t0
        est = unit_secs.get(ctx, 0.0)
        if args.max_seconds and el + est > args.max_seconds:
            print(f"[{el:7.1f}s] stop: the next unit (~{est:.0f} s) would pass --max-seconds {args.max_seconds}",
                  flush=True)
            stopped = True
            break
        tu = time.time()
        made = maker.take(len(trial_ids))
        make_s = time.time() - tu
        trials, states, prefill_s = [], [], []
        for t, tr in zip(trial_ids, made):
            tp = time.time()
            states.append(runner.prefill(tr.prompt_ids))
            prefill_s.append(time.time() - tp)
            trials.append((t, args.seed + t, tr))
        max_new = min(args.max_new, max(tr.meta["max_new"] for _, _, tr in trials))
        tally = {}
        for cfg in cfgs:
            need = [k for k, (t, _, _) in enumerate(trials) if cfg in todo[t]]
            if not need:
                continue
            if args.max_seconds and time.time() - t0 > args.max_seconds:
                stopped = True
                break
            tc = time.time()
            att = runner.attention(cfg)
            outs = runner.decode([states[k] for k in need], att, max_new)
            secs = (time.time() - tc) / len(need)
            del att
            for k, (toks, sel) in zip(need, outs):
                t, seed, tr = trials[k]
                text = runner.tok.decode(toks)
                hits = ruler.answer_hits(ruler.answer_part(text, tr.answers), tr.answers)
                rec = {"kind": "trial", "model": tag, "ctx": ctx, "task": task, "trial": t, "seed": seed,
                       "config": cfg["name"], "k_type": cfg["k_type"], "selector": cfg["selector"],
                       "budget": cfg["budget"], "correct": all(hits), "hits": hits, "output": text,
                       "n_new": len(toks), "max_new": max_new, "prompt_tokens": len(tr.prompt_ids),
                       "depth": tr.meta.get("depth"), "answers": tr.answers,
                       "recall": recall(sel, tr.needle_token_spans) if cfg["sparse"] else None,
                       "recall_answer": recall(sel, tr.meta["answer_token_spans"]) if cfg["sparse"] else None,
                       # the sink page is always selected: 1.0 here says the pages are read right
                       "recall_sink": recall(sel, [(0, 1)])["mean"] if cfg["sparse"] and sel else None,
                       "pages_selected": _mean_pages(sel) if cfg["sparse"] else None,
                       "decode_s": round(secs, 4), "prefill_s": round(prefill_s[k], 3), "backend": args.backend}
                w.write(rec)
                tally.setdefault(cfg["name"], []).append(all(hits))
            w.sync()
        for s in states:
            runner.release(s)
        states = None
        dt = time.time() - tu
        unit_secs[ctx] = dt
        show = [n for n in ("exact", "f16/dense", "f16/quest/c6.25", VERDICT_CONFIG) if n in tally]
        acc = " ".join(f"{n} {sum(tally[n])}/{len(tally[n])}" for n in show)
        print(f"[{time.time() - t0:7.1f}s] {ui + 1}/{len(plan)} ctx {ctx} {task} trials {trial_ids[0]}-"
              f"{trial_ids[-1]}: prompts {make_s:.1f}s, prefill {sum(prefill_s):.1f}s, {len(tally)} configs "
              f"{dt - make_s - sum(prefill_s):.1f}s | {acc}",
              flush=True)
        if stopped:
            print(f"[{time.time() - t0:7.1f}s] stop: --max-seconds {args.max_seconds} reached mid-unit", flush=True)
            break
    maker.close()
    w.close()
    return stopped


# ---- agreement ---------------------------------------------------------------------------

def _log_softmax(x):
    import numpy as np

    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def run_agreement(args, runner, cfgs, tag, shard, t0):
    import numpy as np

    i_shard, n_shard = shard
    suffix = f"-{i_shard}of{n_shard}" if n_shard > 1 else ""
    path = os.path.join(args.out, f"agree-{tag}{suffix}.jsonl")
    done = {(r["ctx"], r["doc"], r["config"]) for r in read_jsonl([path] if os.path.exists(path) else [])
            if r.get("kind") == "agreement"}
    w = Writer(path)
    cfgs = [c for c in cfgs if c["name"] != "exact"]
    units = [(ctx, d) for d in range(args.docs) for ctx in args.agree_ctx_list]
    units = [u for j, u in enumerate(units) if j % n_shard == i_shard]
    steps = args.agree_steps
    print(f"agreement: {tag}, contexts {','.join(map(str, args.agree_ctx_list))}, {args.docs} documents, {steps} "
          f"steps, {len(cfgs)} configs -> {path}", flush=True)
    stopped = False
    for ctx, d in units:
        todo = [c for c in cfgs if (ctx, d, c["name"]) not in done]
        if not todo:
            continue
        if args.max_seconds and time.time() - t0 > args.max_seconds:
            stopped = True
            break
        ids = ruler.document(runner.tok, ctx - steps, args.seed + d, text_path=args.text)
        tp = time.time()
        state = runner.prefill(ids)
        ref_toks, ref_logits = runner.free_logits(state, steps)
        ref_lp = _log_softmax(ref_logits)
        ref_p = np.exp(ref_lp)
        print(f"[{time.time() - t0:7.1f}s] ctx {ctx} doc {d}: prefill + {steps} exact steps {time.time() - tp:.1f}s",
              flush=True)
        for cfg in todo:
            if args.max_seconds and time.time() - t0 > args.max_seconds:
                stopped = True
                break
            tc = time.time()
            att = runner.attention(cfg)
            _, lg = runner.forced_logits(state, att, ref_toks)
            del att
            lp = _log_softmax(lg)
            kl = (ref_p * (ref_lp - lp)).sum(axis=-1)
            agree = (lg.argmax(axis=-1) == np.asarray(ref_toks)).astype(float)
            rec = {"kind": "agreement", "model": tag, "ctx": ctx, "doc": d, "seed": args.seed + d,
                   "config": cfg["name"], "k_type": cfg["k_type"], "selector": cfg["selector"],
                   "budget": cfg["budget"], "steps": len(ref_toks), "agree": round(float(agree.mean()), 5),
                   "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
                   "first_disagree": int(np.argmin(agree)) if agree.min() < 1 else None,
                   "seconds": round(time.time() - tc, 3), "backend": args.backend}
            w.write(rec)
            w.sync()
            print(f"    {cfg['name']:<22} agree {rec['agree']:.3f} KL {rec['kl_mean']:.4g} ({rec['seconds']:.1f}s)",
                  flush=True)
        runner.release(state)
        if stopped:
            break
    w.close()
    return stopped


# ---- the summary -------------------------------------------------------------------------

def _acc(xs):
    k, n = sum(xs), len(xs)
    lo, hi = ruler.wilson(k, n)
    return k, n, lo, hi


def _cell(xs):
    k, n, lo, hi = _acc(xs)
    return f"{k / n:.2f} [{lo:.2f},{hi:.2f}]" if n else "—"


FORCED_PAGES = 1 + 128 // BLOCK + 1  # sink page, the recent window's pages, the partial last page: at most


def budget_pages(budget, tokens):
    """Pages a budget name asks for over a sequence of tokens (the budget rule of qgen.h);
    None for dense."""
    n = -(-tokens // BLOCK)
    if budget.startswith("c"):
        return math.ceil(float(budget[1:]) / 100 * n)
    if budget.startswith("b"):
        return -(-int(budget[1:]) // BLOCK)
    return None


def forced_only(budget, tokens):
    """True when the budget is no larger than the pages every selection is forced to keep,
    so the selector picks nothing (a miss there is the budget's, not the selector's)."""
    k = budget_pages(budget, tokens)
    return k is not None and k <= FORCED_PAGES


def _ref(cfg, configs, base):
    """What a config's gap is measured against: its own cache type's dense, else the
    baseline; the dense rows against exact."""
    kt, _, rest = cfg.partition("/")
    if cfg == "exact":
        return cfg
    if rest == "dense":
        return "exact" if "exact" in configs else cfg
    return f"{kt}/dense" if f"{kt}/dense" in configs else base


def summarize(out_dir, tag):
    raws = sorted(glob.glob(os.path.join(out_dir, f"raw-{tag}.jsonl")) + glob.glob(os.path.join(out_dir, f"raw-{tag}-*of*.jsonl")))
    agrees = sorted(glob.glob(os.path.join(out_dir, f"agree-{tag}.jsonl")) + glob.glob(os.path.join(out_dir, f"agree-{tag}-*of*.jsonl")))
    recs = [r for r in read_jsonl(raws) if r.get("kind") == "trial"]
    arecs = [r for r in read_jsonl(agrees) if r.get("kind") == "agreement"]
    # the last record of a (ctx, task, trial, config) wins: a rerun replaces, never doubles
    by = {}
    for r in recs:
        by[(r["ctx"], r["task"], r["trial"], r["config"])] = r
    recs = list(by.values())
    order = {c["name"]: i for i, c in enumerate(all_configs())}
    configs = sorted({r["config"] for r in recs}, key=lambda n: order.get(n, 1e9))
    cells = sorted({(r["ctx"], r["task"]) for r in recs}, key=lambda x: (x[0], ruler.TASKS.index(x[1])
                                                                         if x[1] in ruler.TASKS else 99))
    acc = {}   # (ctx, task, config) -> [bool]
    rec_ = {}  # (ctx, task, config) -> [recall mean]
    ptoks = {}  # ctx -> prompt tokens (the largest seen)
    for r in recs:
        ptoks[r["ctx"]] = max(ptoks.get(r["ctx"], 0), r["prompt_tokens"] + 1)
        acc.setdefault((r["ctx"], r["task"], r["config"]), []).append(bool(r["correct"]))
        if r.get("recall"):
            rec_.setdefault((r["ctx"], r["task"], r["config"]), []).append(r["recall"]["mean"])
    base = "f16/dense" if "f16/dense" in configs else ("exact" if "exact" in configs else None)

    def rate(ctx, task, cfg):
        xs = acc.get((ctx, task, cfg))
        return sum(xs) / len(xs) if xs else None

    eligible = [(c, t) for c, t in cells if base and rate(c, t, base) is not None and rate(c, t, base) >= ELIGIBLE]
    js = {"model": tag, "raw_files": [os.path.basename(p) for p in raws], "trials_records": len(recs),
          "baseline": base, "eligible_threshold": ELIGIBLE, "cells": [], "verdict": None, "agreement": []}
    L = [f"# {tag}: RULER-style retrieval, qgen sparse selectors against dense", ""]
    L.append(f"{len(recs)} trial x config records from {', '.join(js['raw_files']) or 'no raw file'}. "
             f"Accuracy = exact match of the greedy answer (every answer of the trial required), with its 95 % "
             f"Wilson interval in brackets; gap = accuracy minus `{base}` on the same trials, in points. Cells whose "
             f"`{base}` accuracy is below {ELIGIBLE} are shown but left out of the verdict. recall = mean share of "
             f"the needle pages kept at the first answer step, over global layers x KV heads.")
    L.append("")

    # verdict first: what the grid is for
    vlines = []
    for kt in ("f16", "q8_0", "q4_0"):
        vc = f"{kt}/r8/c6.25"
        vb = f"{kt}/dense" if f"{kt}/dense" in configs else base
        if vc not in configs or not vb:
            continue
        elig = [(c, t) for c, t in cells if rate(c, t, vb) is not None and rate(c, t, vb) >= ELIGIBLE
                and rate(c, t, vc) is not None]
        gaps = [(rate(c, t, vc) - rate(c, t, vb), c, t) for c, t in elig]
        if not gaps:
            line = f"{vc}: no verdict (no cell with {vb} >= {ELIGIBLE} measured)"
            ok = None
        else:
            worst = min(gaps)
            ok = all(g >= -VERDICT_POINTS - 1e-9 for g, _, _ in gaps)
            fails = [f"{t}@{c} {g * 100:+.0f}" for g, c, t in sorted(gaps) if g < -VERDICT_POINTS - 1e-9]
            forced = sorted({c for _, c, _ in gaps if forced_only("c6.25", ptoks[c])})
            line = (f"{vc} within {VERDICT_POINTS * 100:g} points of {vb} on every cell where {vb} >= {ELIGIBLE}: "
                    f"**{'YES' if ok else 'NO'}** ({len(gaps)} cells; worst {worst[2]}@{worst[1]} "
                    f"{worst[0] * 100:+.1f} points" + (f"; failing: {', '.join(fails)}" if fails else "") + ")"
                    + (f". At {', '.join(map(str, forced))} tokens 6.25 % is no more pages than the sink, recent "
                       f"and last pages (≤ {FORCED_PAGES}): the selector picks nothing there" if forced else ""))
        vlines.append(line)
        if kt == "f16":
            js["verdict"] = {"config": vc, "baseline": vb, "pass": ok, "cells": len(gaps),
                             "gaps": [{"ctx": c, "task": t, "gap": g} for g, c, t in gaps]}
    L.append("## Verdict")
    L.append("")
    L.extend(f"- {v}" for v in vlines or ["not measured: no f16/r8/c6.25 records"])
    L.append("")

    # overview: each config pooled over every cell, and its gaps over the eligible cells
    if configs:
        L.append(f"## Overview ({len(cells)} cells, {len(eligible)} eligible)")
        L.append("")
        L.append("Pooled accuracy over every cell; gaps (points, to the same cache's dense, or to `exact` for the "
                 "dense rows) over the eligible cells only.")
        L.append("")
        L.append("| config | accuracy, all cells | mean gap | worst gap | cells below -2 points | needle recall |")
        L.append("|---|---|---|---|---|---|")
        for cfg in configs:
            ref = _ref(cfg, configs, base)
            xs = [x for c, t in cells for x in acc.get((c, t, cfg), [])]
            gaps = [rate(c, t, cfg) - rate(c, t, ref) for c, t in eligible
                    if ref and rate(c, t, cfg) is not None and rate(c, t, ref) is not None] if ref != cfg else []
            rs = [x for c, t in cells for x in rec_.get((c, t, cfg), [])]
            L.append(f"| {cfg} | {_cell(xs) if xs else '—'} | "
                     + (f"{sum(gaps) / len(gaps) * 100:+.1f} | {min(gaps) * 100:+.1f} | "
                        f"{sum(g < -VERDICT_POINTS - 1e-9 for g in gaps)} | " if gaps else "— | — | — | ")
                     + (f"{sum(rs) / len(rs):.3f} |" if rs else "— |"))
        L.append("")

    # per cell: selectors side by side (Quest beside two-stage), rows = budgets
    for ctx, task in cells:
        b = acc.get((ctx, task, base), [])
        head = f"### {task} @ {ctx} tokens"
        k, n, lo, hi = _acc(b) if b else (0, 0, 0, 1)
        elig = (ctx, task) in eligible
        cellj = {"ctx": ctx, "task": task, "eligible": elig, "configs": {}}
        for cfg in configs:
            xs = acc.get((ctx, task, cfg))
            if xs:
                kk, nn, l2, h2 = _acc(xs)
                rs = rec_.get((ctx, task, cfg), [])
                cellj["configs"][cfg] = {"correct": kk, "n": nn, "acc": kk / nn, "wilson": [l2, h2],
                                         "recall": (sum(rs) / len(rs)) if rs else None}
        js["cells"].append(cellj)
        L.append(head)
        L.append("")
        ex = acc.get((ctx, task, "exact"))
        L.append(f"{base}: {_cell(b) if b else '—'} (n = {n})" + (f"; exact: {_cell(ex)}" if ex and base != "exact" else "")
                 + ("" if elig else f" — **not eligible** ({base} < {ELIGIBLE})"))
        L.append("")
        for kt in ("f16", "q8_0", "q4_0"):
            sels = [s for s in SELECTORS if any(c.startswith(f"{kt}/{s}/") for c in configs)]
            if not sels:
                continue
            budgets = [bn for bn in [f"c{_pct(c)}" for c in COVERAGES] + [f"b{x}" for x in BUDGETS]
                       if any(f"{kt}/{s}/{bn}" in configs for s in sels)]
            kb = f"{kt}/dense" if f"{kt}/dense" in configs else base
            kbs = f"; {kb}: {_cell(acc[(ctx, task, kb)])}" if (ctx, task, kb) in acc and kb != base else ""
            bk = acc.get((ctx, task, kb), [])
            L.append(f"{kt} cache{kbs}. Cells: accuracy [Wilson 95 %] gap to {kb} in points / needle recall; "
                     f"† = the budget is no more than the {FORCED_PAGES} forced pages (sink, recent, last)")
            L.append("")
            L.append("| budget | " + " | ".join(sels) + " |")
            L.append("|---|" + "---|" * len(sels))
            for bn in budgets:
                row = []
                for s in sels:
                    xs = acc.get((ctx, task, f"{kt}/{s}/{bn}"))
                    if not xs:
                        row.append("—")
                        continue
                    g = (sum(xs) / len(xs) - sum(bk) / len(bk)) * 100 if bk else float("nan")
                    rs = rec_.get((ctx, task, f"{kt}/{s}/{bn}"), [])
                    row.append(f"{_cell(xs)} {g:+.0f} / {sum(rs) / len(rs):.2f}" if rs else f"{_cell(xs)} {g:+.0f} / —")
                mark = " †" if forced_only(bn, ptoks.get(ctx, ctx)) else ""
                L.append(f"| {bn}{mark} | " + " | ".join(row) + " |")
            L.append("")

    # agreement
    if arecs:
        ab = {}
        for r in arecs:
            ab[(r["ctx"], r["doc"], r["config"])] = r
        actx = sorted({r["ctx"] for r in ab.values()})
        acfg = sorted({r["config"] for r in ab.values()}, key=lambda n: order.get(n, 1e9))
        L.append("## Free-running agreement")
        L.append("")
        nsteps = sorted({r["steps"] for r in ab.values()})
        L.append(f"{'/'.join(map(str, nsteps))} greedy steps of exact attention after a natural-text prefix of (context - steps) "
                 "tokens; each config teacher-forced on those tokens. Cells: top-1 agreement with exact / mean "
                 "KL(exact || config) in nats, averaged over documents (n = documents).")
        L.append("")
        L.append("| config | " + " | ".join(f"{c} tokens" for c in actx) + " |")
        L.append("|---|" + "---|" * len(actx))
        for cfg in acfg:
            row = []
            for c in actx:
                rs = [r for (cc, _, cf), r in ab.items() if cc == c and cf == cfg]
                if not rs:
                    row.append("—")
                    continue
                a = sum(r["agree"] for r in rs) / len(rs)
                kl = sum(r["kl_mean"] for r in rs) / len(rs)
                row.append(f"{a:.3f} / {kl:.3g} (n={len(rs)})")
                js["agreement"].append({"ctx": c, "config": cfg, "agree": a, "kl_mean": kl, "docs": len(rs)})
            L.append(f"| {cfg} | " + " | ".join(row) + " |")
        L.append("")

    if recs:
        sec = {}
        for r in recs:
            sec.setdefault((r["ctx"], r["config"]), []).append(r["decode_s"])
        L.append("## Time per trial and config (decode of the answer, seconds)")
        L.append("")
        ctxs = sorted({c for c, _ in sec})
        L.append("| config | " + " | ".join(str(c) for c in ctxs) + " |")
        L.append("|---|" + "---|" * len(ctxs))
        for cfg in configs:
            L.append(f"| {cfg} | " + " | ".join(
                f"{sum(sec[(c, cfg)]) / len(sec[(c, cfg)]):.3f}" if (c, cfg) in sec else "—" for c in ctxs) + " |")
        pf = {}
        seen = set()
        for r in recs:
            if (r["ctx"], r["task"], r["trial"]) not in seen:
                seen.add((r["ctx"], r["task"], r["trial"]))
                pf.setdefault(r["ctx"], []).append(r["prefill_s"])
        L.append("")
        L.append("Prefill per trial: " + ", ".join(f"{c}: {sum(v) / len(v):.2f} s" for c, v in sorted(pf.items())))
        L.append("")
    md = os.path.join(out_dir, f"summary-{tag}.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write("\n".join(L) + "\n")
    with open(os.path.join(out_dir, f"summary-{tag}.json"), "w", encoding="utf-8") as f:
        json.dump(js, f, indent=1)
    return md, vlines


# ---- main --------------------------------------------------------------------------------

def main(argv=None, model=None):
    """The command line; model: an already loaded qgen.models model for --model (tests)."""
    ap = argparse.ArgumentParser(
        prog="bench/real_models.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default="smollm2",
                    help=f"a GGUF path or a short name ({', '.join(KNOWN_MODELS)}) in $QGEN_MODEL_DIR (default smollm2)")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                    help="qgen backend and where the model runs (gpu = torch on cuda:0)")
    ap.add_argument("--contexts", help="comma list, e.g. 2K,4K,8K (default: the model's: smollm2 2K,4K,8K; "
                                       "gemma3 8K,16K,32K)")
    ap.add_argument("--tasks", default="all", help=f"comma list or all: {', '.join(ruler.TASKS)}")
    ap.add_argument("--trials", type=int, help="trials per (context, task) (default 50 on gpu, 2 on cpu)")
    ap.add_argument("--batch", type=int, help="trials prefilled and decoded together (default 10 on gpu, 1 on cpu)")
    ap.add_argument("--workers", type=int, help="processes making prompts ahead of the model (default: cores - 2, "
                                                "at most 12, on gpu; 0 on cpu)")
    ap.add_argument("--seed", type=int, default=0, help="trial i uses seed SEED + i (default 0)")
    ap.add_argument("--configs", help="comma list of config names or shell patterns (e.g. 'exact,f16/dense,f16/r8/*'); "
                                      "default all (--list-configs)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} (when --configs is not given)")
    ap.add_argument("--list-configs", action="store_true", help="print the config names and exit")
    ap.add_argument("--max-new", type=int, default=GEN_RESERVE,
                    help=f"cap on answer tokens (default {GEN_RESERVE}; each trial needs its answer's tokens + 6)")
    ap.add_argument("--prompt", choices=("auto", "chat", "completion"), default="auto",
                    help="prompt style (auto: chat when the GGUF has a chat template)")
    ap.add_argument("--text", help=f"natural-text file for the *-text tasks and --agreement (default ${ruler.TEXT_ENV}, "
                                   f"else Debian's {ruler.TEXT_PACKAGE})")
    ap.add_argument("--out", help="output folder (created)")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop before work that would pass this many seconds of wall time (0 = no limit); "
                         "what is done is written, and a rerun resumes")
    ap.add_argument("--shard", default="0/1", help="i/n: run work unit j only when j %% n == i (default 0/1)")
    ap.add_argument("--agreement", action="store_true", help="run free-running agreement instead of the grid")
    ap.add_argument("--agree-contexts", help="comma list (default: smollm2 4K,8K; gemma3 16K,32K)")
    ap.add_argument("--agree-steps", type=int, default=AGREE_STEPS, help=f"greedy steps (default {AGREE_STEPS})")
    ap.add_argument("--docs", type=int, default=1, help="documents per agreement context (default 1)")
    ap.add_argument("--summarize", action="store_true", help="only rebuild the summary from --out's files")
    args = ap.parse_args(argv)

    if args.list_configs:
        for c in all_configs():
            print(c["name"] + ("   [quick]" if c["name"] in QUICK else ""))
        return 0
    if not args.out:
        ap.error("--out DIR is required")
    os.makedirs(args.out, exist_ok=True)
    if args.summarize:  # the model file need not be here: only its tag names the files
        tag = model_tag(KNOWN_MODELS[args.model][0] if args.model in KNOWN_MODELS else args.model)
        md, v = summarize(args.out, tag)
        print("\n".join(v) or "no verdict")
        print(f"summary: {md}")
        return 0
    args.model_path = resolve_model(args.model)
    tag = model_tag(args.model_path)
    try:
        i, n = (int(x) for x in args.shard.split("/"))
        assert n >= 1 and 0 <= i < n
    except (ValueError, AssertionError):
        ap.error(f"--shard {args.shard!r}: give i/n with 0 <= i < n")
    known = KNOWN_MODELS.get(tag)
    args.ctx_list = [parse_tokens(s) for s in args.contexts.split(",")] if args.contexts else \
        list(known[1] if known else (4096,))
    args.agree_ctx_list = [parse_tokens(s) for s in args.agree_contexts.split(",")] if args.agree_contexts else \
        list(known[2] if known else args.ctx_list[-1:])
    if args.tasks == "all":
        args.task_list = list(ruler.TASKS)
    else:
        args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
        bad = [t for t in args.task_list if t not in ruler.TASKS]
        if bad:
            ap.error(f"--tasks: unknown {', '.join(bad)}; tasks: {', '.join(ruler.TASKS)}")
    if not ruler.has_text(args.text):
        skipped = [t for t in args.task_list if ruler.task_needs_text(t)]
        try:
            ruler.text_source(args.text)
        except ruler.TextUnavailable as e:
            if skipped:
                print(f"skipping {', '.join(skipped)}: {e}", flush=True)
            if args.agreement:
                raise SystemExit(f"--agreement needs the natural text: {e}")
        args.task_list = [t for t in args.task_list if not ruler.task_needs_text(t)]
    if not args.task_list and not args.agreement:
        raise SystemExit("no task left to run")
    gpu = args.backend == "gpu"
    args.trials = args.trials if args.trials is not None else (50 if gpu else 2)
    args.batch = max(1, args.batch if args.batch is not None else (10 if gpu else 1))
    if args.workers is None:
        args.workers = max(0, min(12, (os.cpu_count() or 1) - 2)) if gpu else 0
    cfgs = pick_configs(args.configs, args.quick)
    for c in args.ctx_list + args.agree_ctx_list:
        if c - GEN_RESERVE < 256:
            ap.error(f"context {c} is too short (at least {256 + GEN_RESERVE} tokens)")

    t0 = time.time()
    print(f"real_models: {args.model_path} backend {args.backend} on {platform.node()}, python {platform.python_version()}",
          flush=True)
    args.pool = None
    if args.workers > 0 and not args.agreement:
        import qgen.models as qm

        args.pool = start_workers(qm.load_tokenizer(args.model_path) if hasattr(qm, "load_tokenizer") else
                                  qm.load(args.model_path).tokenizer, args.workers)
    runner = Runner(args.model_path, args.backend, args.batch, model)
    print(f"[{time.time() - t0:7.1f}s] loaded: {json.dumps(runner.describe())}", flush=True)
    with open(os.path.join(args.out, f"run-{tag}.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": "run", "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv[1:],
                            "model": tag, "model_path": args.model_path, "backend": args.backend,
                            "config": runner.describe(), "configs": [c["name"] for c in cfgs],
                            "host": platform.node()}) + "\n")
    try:
        if args.agreement:
            stopped = run_agreement(args, runner, cfgs, tag, (i, n), t0)
        else:
            stopped = run_grid(args, runner, cfgs, tag, (i, n), t0)
    except KeyboardInterrupt:
        runner.close()
        stopped = True
        print("interrupted: what was written stays; a rerun resumes", flush=True)
    except Exception:
        traceback.print_exc()
        md, v = summarize(args.out, tag)
        print(f"failed; partial summary: {md}", flush=True)
        return 2
    runner.close()
    if args.pool is not None:
        args.pool.terminate()
    md, v = summarize(args.out, tag)
    print("\n".join(v) or "no verdict yet")
    print(f"[{time.time() - t0:7.1f}s] {'stopped early' if stopped else 'done'}; summary: {md}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
