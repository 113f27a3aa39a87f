/* eval_report.c — what `qgen eval` reports: the selectors' names, the table of
 * qgen_eval_print and the JSON document of qgen_eval_write_json (eval.h).
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "harness/eval_int.h"

static const char *const SEL_NAMES[QGEN_SEL_COUNT] = {"quest",    "oracle",   "meanpool", "quest-i8",
                                                       "rescore2", "rescore4", "rescore8", "rescore16"};
const char *qgen_eval_selector_name(int s) { return s >= 0 && s < QGEN_SEL_COUNT ? SEL_NAMES[s] : "?"; }

const char *qgen_eval_row_selector(int sel, int rescore, double top_p, char *buf, size_t n) {
  if (rescore_r(sel) && top_p < 1) snprintf(buf, n, "%s-p%g", qgen_eval_selector_name(sel), top_p);
  else if (sel == QGEN_SEL_QUEST && rescore > 1 && top_p < 1) snprintf(buf, n, "2stage-r%d-p%g", rescore, top_p);
  else if (sel == QGEN_SEL_QUEST && rescore > 1) snprintf(buf, n, "2stage-r%d", rescore);
  else return qgen_eval_selector_name(sel);
  return buf;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void fmt_ctx(char *b, size_t n, long long x) {
  if (x >= 1048576 && x % 1048576 == 0) snprintf(b, n, "%lldM", x / 1048576);
  else if (x >= 1024 && x % 1024 == 0) snprintf(b, n, "%lldK", x / 1024);
  else snprintf(b, n, "%lld", x);
}

void qgen_eval_print(const qgen_eval_result *r, FILE *f) {
  char sn[48];
  fprintf(f, "%-16s %6s %-6s %7s %-9s %6s %6s %7s %7s %7s %7s %9s %9s %9s %7s %7s %7s %7s\n", "task", "ctx", "k_type", "cov",
          "selector", "margin", "trials", "recall", "needle", "mass", "mass_lo", "rel_err", "err_max", "err_tot", "pages",
          "need", "need_hi", "n_mass");
  for (int i = 0; i < r->n_rows; i++) {
    const qgen_eval_row *w = &r->rows[i];
    char c[32], e1[16], e2[16], e3[16];
    fmt_ctx(c, sizeof c, w->ctx);
    if (w->rel_err == w->rel_err) snprintf(e1, sizeof e1, "%.2e%s", w->rel_err, w->err_fp64 ? "" : "*");
    else snprintf(e1, sizeof e1, "-");
    if (w->rel_err_max == w->rel_err_max) snprintf(e2, sizeof e2, "%.2e", w->rel_err_max);
    else snprintf(e2, sizeof e2, "-");
    if (w->rel_err_total == w->rel_err_total) snprintf(e3, sizeof e3, "%.2e", w->rel_err_total);
    else snprintf(e3, sizeof e3, "-");
    fprintf(f, "%-16s %6s %-6s %7.4g %-9s %6.3g %6d %7.3f %7.3f %7.4f %7.4f %9s %9s %9s %7.1f %7.4f %7.4f %7.4f\n",
            qgen_wl_task_name(w->task), c, w->k_type, w->coverage, qgen_eval_row_selector(w->selector, w->rescore, w->top_p, sn, sizeof sn), w->margin,
            w->trials, w->recall, w->needle_recall, w->mass_recall, w->mass_min, e1, e2, e3, w->pages, w->need, w->need_max, w->needle_mass);
  }
  int any_dense = 0;
  for (int i = 0; i < r->n_rows; i++) any_dense |= r->rows[i].rel_err == r->rows[i].rel_err && !r->rows[i].err_fp64;
  if (any_dense) fprintf(f, "(* error against the backend's dense output, not the fp64 reference)\n");
  int sweep = 0;
  for (int i = 0; i < r->n_thr; i++) sweep |= r->thr[i].below == r->thr[i].below;
  if (r->n_thr && sweep) {
    fprintf(f, "\nmargin below which recall < 1 (largest failing margin -> smallest margin with recall 1 above it):\n");
    fprintf(f, "%-16s %6s %-6s %7s %-9s %8s %10s\n", "task", "ctx", "k_type", "cov", "selector", "fails_at", "full_from");
    for (int i = 0; i < r->n_thr; i++) {
      const qgen_eval_threshold *t = &r->thr[i];
      char c[32], a[16], b[16];
      fmt_ctx(c, sizeof c, t->ctx);
      if (t->below == t->below) snprintf(a, sizeof a, "%.3g", t->below);
      else snprintf(a, sizeof a, "none");
      if (t->full_from == t->full_from) snprintf(b, sizeof b, "%.3g", t->full_from);
      else snprintf(b, sizeof b, "never");
      fprintf(f, "%-16s %6s %-6s %7.4g %-9s %8s %10s\n", qgen_wl_task_name(t->task), c, t->k_type, t->coverage,
              qgen_eval_row_selector(t->selector, t->rescore, t->top_p, sn, sizeof sn), a, b);
    }
  }
  fprintf(f, "\n%lld workloads in %.1f s on %d threads (haystack %.1f, statistics %.1f, planting %.1f, host selectors %.1f, "
          "%s %.1f, fp64 reference %.1f)\n",
          r->workloads, r->seconds, r->threads, r->t_haystack, r->t_stats, r->t_plant, r->t_host_sel, r->backend,
          r->t_backend, r->t_ref);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    const unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}
static void json_num(FILE *f, double x) {
  if (x == x && isfinite(x)) fprintf(f, "%.6g", x);
  else fprintf(f, "null");
}

/* ", "name": x" with x a JSON number (null when not finite). */
static void json_field(FILE *f, const char *name, double x) {
  fprintf(f, ", \"%s\": ", name);
  json_num(f, x);
}

/* The run's own fields: backend, device, date, command, the configuration, the workload
   knobs and the phases' times. */
static void json_run(FILE *f, const qgen_eval_cfg *c, const qgen_eval_result *r) {
  char date[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char wl[2048];
  qgen_wl_params_json(&c->wl, wl, sizeof wl);
  fprintf(f, "{\n  \"backend\": ");
  json_str(f, r->backend);
  fprintf(f, ",\n  \"gpu\": ");
  if (r->device[0]) json_str(f, r->device);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"date\": ");
  json_str(f, date);
  fprintf(f, ",\n  \"command\": ");
  json_str(f, c->command ? c->command : "");
  fprintf(f, ",\n  \"spec\": ");
  json_str(f, c->spec);
  fprintf(f, ",\n  \"seed\": %llu, \"trials\": %d, \"ref_ctx\": %lld, \"haystack\": \"%s\", \"proj_dim\": %d, \"threads\": %d,\n",
          (unsigned long long)c->seed, c->trials, c->ref_ctx, c->fresh_haystack ? "per-trial" : "per-context", c->proj_dim,
          r->threads);
  if (c->top_p < 1) fprintf(f, "  \"top_p\": %.17g,\n", c->top_p);
  if (c->steps > 1) fprintf(f, "  \"steps\": %d, \"reselect\": %d,\n", c->steps, c->reselect);
  fprintf(f, "  \"workload\": %s,\n", wl);
  fprintf(f, "  \"timing_s\": {\"total\": %.3f, \"haystack\": %.3f, \"statistics\": %.3f, \"planting\": %.3f, "
          "\"host_selectors\": %.3f, \"backend\": %.3f, \"fp64_reference\": %.3f, \"workloads\": %lld},\n",
          r->seconds, r->t_haystack, r->t_stats, r->t_plant, r->t_host_sel, r->t_backend, r->t_ref, r->workloads);
}

/* One row as a JSON object (no separator). */
static void json_row(FILE *f, const qgen_eval_row *w) {
  char sn[48];
  fprintf(f, "    {\"task\": \"%s\", \"ctx\": %lld, \"k_type\": ", qgen_wl_task_name(w->task), w->ctx);
  json_str(f, w->k_type);
  fprintf(f, ", \"variant\": ");
  json_str(f, w->variant);
  json_field(f, "coverage", w->coverage);
  fprintf(f, ", \"selector\": \"%s\", \"rescore\": %d", qgen_eval_row_selector(w->selector, w->rescore, w->top_p, sn, sizeof sn),
          w->rescore);
  json_field(f, "margin", w->margin);
  fprintf(f, ", \"trials\": %d", w->trials);
  json_field(f, "recall", w->recall);
  json_field(f, "needle_recall", w->needle_recall);
  json_field(f, "mass_recall", w->mass_recall);
  json_field(f, "mass_recall_min", w->mass_min);
  json_field(f, "rel_err", w->rel_err);
  json_field(f, "rel_err_max", w->rel_err_max);
  json_field(f, "rel_err_total", w->rel_err_total);
  json_field(f, "rel_err_total_max", w->rel_err_total_max);
  fprintf(f, ", \"err_ref\": %s", w->rel_err == w->rel_err ? (w->err_fp64 ? "\"fp64\"" : "\"dense\"") : "null");
  json_field(f, "pages", w->pages);
  json_field(f, "needle_mass", w->needle_mass);
  json_field(f, "cov_needed", w->need);
  json_field(f, "cov_needed_max", w->need_max);
  fprintf(f, "}");
}

/* One margin threshold as a JSON object (no separator). */
static void json_threshold(FILE *f, const qgen_eval_threshold *t) {
  char sn[48];
  fprintf(f, "    {\"task\": \"%s\", \"ctx\": %lld, \"k_type\": ", qgen_wl_task_name(t->task), t->ctx);
  json_str(f, t->k_type);
  json_field(f, "coverage", t->coverage);
  fprintf(f, ", \"selector\": \"%s\"", qgen_eval_row_selector(t->selector, t->rescore, t->top_p, sn, sizeof sn));
  json_field(f, "recall_below_1_at", t->below);
  json_field(f, "full_recall_from", t->full_from);
  fprintf(f, "}");
}

int qgen_eval_write_json(const qgen_eval_cfg *c, const qgen_eval_result *r, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "qgen: eval: cannot write %s: %s\n", path, strerror(errno));
    return QGEN_EXIT_WRITE;
  }
  json_run(f, c, r);
  fprintf(f, "  \"rows\": [\n");
  for (int i = 0; i < r->n_rows; i++) {
    json_row(f, &r->rows[i]);
    fprintf(f, "%s\n", i + 1 < r->n_rows ? "," : "");
  }
  fprintf(f, "  ],\n  \"thresholds\": [\n");
  for (int i = 0; i < r->n_thr; i++) {
    json_threshold(f, &r->thr[i]);
    fprintf(f, "%s\n", i + 1 < r->n_thr ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return qgen_harness_close_output("eval", f, path);
}
