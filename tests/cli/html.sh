#!/usr/bin/env bash
# CLI test: `--html FILE` writes one self-contained page a person can read, checked as a person
# sees it: rendered by headless Chromium (Debian's `chromium`), which takes a screenshot (kept in
# the scratch directory: html-report.png, the README's picture) and dumps the DOM after layout.
# Asserted: every plot drew something (the page's own check, after layout, marks each figure
# data-drawn); no console error (a page with a planted one shows the check can see it); nothing
# is fetched (no src=, href= or url() to anything outside the page); the figures shown equal
# the JSON report's (each carries its key and exact value); the screenshot is not blank. A run
# that fails, or is interrupted, still writes its page saying so; an unwritable path is a usage
# error before anything runs. diagnose --html adds the controlled runs and the what-if table;
# --accelerators N sums the accelerators over time.
#
# usage: html.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
run_timeout=120

chromium=$(command -v chromium || true)
if [[ -z $chromium ]]; then
  echo "FAIL: chromium is not installed (apt-get install chromium: scripts/install-deps.sh --test)"
  exit 1
fi

files_ds=$scratch/files
must_gen "$files_ds" --format files --samples 6000 --sample-size 16KiB

# render PAGE STEM: STEM.dom (the DOM after load and layout), STEM.png (a screenshot of
# 1400 x 2600), STEM.log (Chromium's log, with the page's console messages).
render() {
  local page=$1 stem=$2
  local flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
               --user-data-dir="$scratch/chromium-profile" --enable-logging=stderr --v=0)
  timeout 90 "$chromium" "${flags[@]}" --dump-dom "file://$page" >"$stem.dom" 2>"$stem.log" || true
  timeout 90 "$chromium" "${flags[@]}" --window-size=1400,2600 --screenshot="$stem.png" \
    "file://$page" >/dev/null 2>>"$stem.log" || true
}

cat >"$scratch/check_html.py" <<'PY'
import html.parser, json, re, struct, sys, zlib
page, dom, log, png = sys.argv[1:5]
report = json.load(open(sys.argv[5])) if len(sys.argv) > 5 and sys.argv[5] != "-" else None
want_plots = sys.argv[6].split(",") if len(sys.argv) > 6 and sys.argv[6] else []
bad = []
src = open(page, encoding="utf-8").read()
# Nothing fetched: no external script, style, image or font.
for m in re.finditer(r'''(?:src|href)\s*=\s*["']([^"']*)|url\(([^)]*)\)''', src):
    target = m.group(1) or m.group(2) or ""
    if not target.startswith("#") and not target.startswith("data:"):
        bad.append("the page refers to %r: it must be self-contained" % target)
text = open(dom, encoding="utf-8").read()
if not text.strip():
    bad.append("Chromium dumped no DOM")

class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.root = {}; self.figures = []; self.values = []; self.stack = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html": self.root = a
        if tag == "figure" and "plot" in (a.get("class") or ""): self.figures.append(a)
        if "data-key" in a: self.values.append([a["data-key"], a.get("data-value"), ""]); self.stack.append(len(self.values) - 1)
        elif tag not in ("br", "meta", "img", "input", "link", "rect", "line", "circle", "path"): self.stack.append(None)
    def handle_endtag(self, tag):
        if self.stack: self.stack.pop()
    def handle_data(self, d):
        for i in self.stack:
            if i is not None: self.values[i][2] += d
p = P(); p.feed(text)
plots = [f.get("data-plot") for f in p.figures]
if p.root.get("data-plots") != str(len(p.figures)):
    bad.append("the page's check did not run after layout (data-plots=%r, %d figures)" % (p.root.get("data-plots"), len(p.figures)))
for f in p.figures:
    if f.get("data-drawn") != "true":
        bad.append("plot %r drew nothing (data-drawn=%r)" % (f.get("data-plot"), f.get("data-drawn")))
for w in want_plots:
    if w not in plots: bad.append("no %r plot (plots: %s)" % (w, ", ".join(map(str, plots))))
# Console errors: Chromium logs the page's console messages as CONSOLE lines.
for line in open(log, errors="replace"):
    if "CONSOLE" in line or "Uncaught" in line:
        bad.append("console: " + line.strip()[:200])
# The figures shown equal the report's.
def lookup(doc, key):
    cur = doc
    parts = key.split(".")
    if parts[0] == "stages":
        for s in doc.get("stages", []):
            if s.get("name") == parts[1]: return s.get(parts[2])
        return KeyError
    for k in parts:
        if isinstance(cur, list): cur = cur[int(k)]
        elif isinstance(cur, dict) and k in cur: cur = cur[k]
        else: return KeyError
    return cur
if report is not None:
    seen = set()
    for key, value, shown in p.values:
        if key.startswith("what_if"): continue
        want = lookup(report, key)
        if want is KeyError: bad.append("%s: not in the JSON report" % key); continue
        got = json.loads(value) if value is not None else None
        if got != want: bad.append("%s: the page says %r, the report %r" % (key, got, want))
        seen.add(key)
        if key == "samples_per_second" and shown.strip() != "%.0f" % want:
            bad.append("samples/s shown as %r, the report says %.0f" % (shown, want))
        if key == "consumer_wait.fraction" and shown.strip() != "%.1f%%" % (want * 100):
            bad.append("consumer wait shown as %r, the report says %.1f%%" % (shown, want * 100))
    for k in ("samples_per_second", "consumer_wait.fraction", "bottleneck.stage", "io.latency_ns.p50",
              "io.latency_ns.p9999", "data_paths.0.copy_amplification"):
        if k not in seen: bad.append("the page does not show %s" % k)
# The screenshot: a PNG of the requested size with more than a few colours in it.
try:
    data = open(png, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n": raise ValueError("not a PNG")
    w, h = struct.unpack(">II", data[16:24])
    idat = b""; i = 8
    while i < len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]; kind = data[i + 4:i + 8]
        if kind == b"IDAT": idat += data[i + 8:i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(idat)
    if (w, h) != (1400, 2600): bad.append("screenshot is %dx%d, asked 1400x2600" % (w, h))
    if len(set(raw[::97])) < 40: bad.append("the screenshot looks blank (%d distinct byte values)" % len(set(raw[::97])))
except Exception as e:
    bad.append("screenshot %s: %s" % (png, e))
if bad:
    print("\n".join(bad)); sys.exit(1)
print("%d plots drawn (%s), %d figures checked against the report" % (len(p.figures), ", ".join(map(str, plots)), len(p.values)))
PY

# check_page NAME PAGE REPORT PLOTS: renders PAGE and checks it (REPORT "-": no report).
check_page() {
  local name=$1 page=$2 report=$3 plots=$4
  checks=$((checks + 1))
  local bad=()
  if [[ ! -s $page ]]; then
    fail "$name: no page at $page"
    return
  fi
  render "$page" "$scratch/$name"
  if ! "$py" "$scratch/check_html.py" "$page" "$scratch/$name.dom" "$scratch/$name.log" \
    "$scratch/$name.png" "$report" "$plots" >"$scratch/$name.check" 2>&1; then
    bad+=("$(cat "$scratch/$name.check")")
  fi
  conclude "$name: the page as Chromium renders it" "$name: $(tail -n 1 "$scratch/$name.check")" \
    "chromium log" "$scratch/$name.log" || true
}

timeline_plots=throughput,storage,consumer-wait,queues,stages,read-latency

# 1. A run's page.
if must_run "run --html" run "$files_ds" --epochs 6 --compute-time 100us --html "$scratch/run.html" \
  --json "$scratch/run.json"; then
  check_page run "$scratch/run.html" "$scratch/run.json" "$timeline_plots"
  cp "$scratch/run.png" "$scratch/html-report.png"
fi

# 2. The check sees a console error when there is one (else its silence proves nothing).
checks=$((checks + 1))
cat >"$scratch/planted.html" <<'EOF'
<!DOCTYPE html><html><body><p>x</p><script>console.error("planted error");</script></body></html>
EOF
render "$scratch/planted.html" "$scratch/planted"
if grep -q "planted error" "$scratch/planted.log"; then
  echo "ok: a console error in a page shows in Chromium's log (the check can fail)"
else
  fail "a planted console.error did not show in Chromium's log: the console check is blind"
  show "chromium log" "$scratch/planted.log"
fi

# 3. Unwritable paths: a usage error before anything runs.
expect_fail "html in a missing directory" 2 "--html" "$scratch/nodir/r.html" -- \
  run "$files_ds" --html "$scratch/nodir/r.html"
expect_fail "html onto a directory" 2 "--html" -- run "$files_ds" --html "$scratch"

# 4. A failed run still writes its page, saying why (a truncated file: the run's error).
bad_ds=$scratch/bad
must_gen "$bad_ds" --format tar --samples 400 --sample-size 8KiB --samples-per-shard 100
shard=$(find "$bad_ds" -name '*.tar' | sort | sed -n 2p)
truncate -s 20000 "$shard"
checks=$((checks + 1))
run run "$bad_ds" --no-index --html "$scratch/failed.html" --json "$scratch/failed.json"
bad=()
((rc == 1)) || bad+=("exit code $rc, expected 1 (the data error)")
check_no_crash "$out" "$err"
grep -q 'id="run-error"' "$scratch/failed.html" 2>/dev/null || bad+=("the page does not say the run failed")
grep -q "$(basename "$shard")" "$scratch/failed.html" 2>/dev/null || bad+=("the page does not name the broken shard")
conclude "a failed run's page" "a failed run writes its page, with the error naming the shard" stderr "$err" || true
if [[ -s $scratch/failed.html ]]; then
  render "$scratch/failed.html" "$scratch/failed"
  checks=$((checks + 1))
  if grep -q "CONSOLE\|Uncaught" "$scratch/failed.log"; then
    fail "the failed run's page logs console errors"
    show "chromium log" "$scratch/failed.log"
  else
    echo "ok: the failed run's page renders without console errors"
  fi
fi

# 5. Ctrl-C: the page up to the stop.
checks=$((checks + 1))
"${as_terminal[@]}" "$bin" run "$files_ds" --epochs 1000 --html "$scratch/stopped.html" \
  >"$scratch/int.out" 2>"$scratch/int.err" &
pid=$!
bad=()
if started "$pid" 2; then
  interrupt_pid "$pid"
  check_sigint_exit "$scratch/int.out" "$scratch/int.err"
  grep -q "Interrupted" "$scratch/stopped.html" 2>/dev/null || bad+=("no page, or it does not say the run was interrupted")
  grep -q 'data-plot="throughput"' "$scratch/stopped.html" 2>/dev/null || bad+=("the interrupted run's page has no throughput plot")
else
  bad+=("the run ended (exit $early) before it could be interrupted")
fi
conclude "Ctrl-C and --html" "an interrupted run writes its page up to the stop" stderr "$scratch/int.err" || true

# 6. diagnose --html: the baseline as a run's page, and what diagnose adds.
if must_run "diagnose --html" diagnose "$files_ds" --duration 1s --verify \
  --what-if decode-threads=1 --html "$scratch/diagnose.html" --json "$scratch/diagnose.json"; then
  check_page diagnose "$scratch/diagnose.html" - "$timeline_plots,controlled-runs,predicted-vs-achieved"
  checks=$((checks + 1))
  if "$py" - "$scratch/diagnose.html" "$scratch/diagnose.json" <<'PY'
import json, re, sys
page = open(sys.argv[1]).read(); d = json.load(open(sys.argv[2]))
rows = re.findall(r'data-key="what_if.predicted_samples_per_second" data-value="([^"]+)"', page)
want = [w["predicted_samples_per_second"] for w in d["what_if"]]
if [json.loads(r) for r in rows] != want:
    print("what-if rows %r, the report's %r" % (rows, want)); sys.exit(1)
for r in d["controlled_runs"]:
    if ">%s<" % r["name"] not in page: print("controlled run %r not on the page" % r["name"]); sys.exit(1)
PY
  then
    echo "ok: diagnose's page lists every controlled run and every what-if's prediction"
  else
    fail "diagnose's page does not match its report"
  fi
fi

# 7. Two accelerators: their figures summed over time. 2 ms of compute a step keeps the run over
# the timeline's 100 ms sampling a few times (376 steps each, ~0.75 s) however fast storage is:
# 4 epochs of reads alone took 60 ms on a fast machine, one point, and no queue plot to draw.
if must_run "accelerators --html" run "$files_ds" --epochs 4 --accelerators 2 --compute-time 2ms \
  --html "$scratch/acc.html"; then
  check_page accelerators "$scratch/acc.html" - "throughput,consumer-wait,queues,read-latency"
fi

# 8. A saved report (feedline report FILE --html PAGE): the page of run 1's JSON document, every
# figure equal to it, the latency CDF drawn through its percentiles, no plots over time (the
# document has none: the page says so); a file that is not a report is exit 1 naming it.
if [[ -s $scratch/run.json ]] && must_run "report --html" report "$scratch/run.json"   --html "$scratch/saved.html"; then
  check_page saved "$scratch/saved.html" "$scratch/run.json" "stages,read-latency"
  checks=$((checks + 1))
  if grep -q 'id="no-timeline"' "$scratch/saved.html" && ! grep -q 'data-plot="throughput"' "$scratch/saved.html"; then
    echo "ok: the saved report's page says it has no samples over time, and draws none"
  else
    fail "the saved report's page: no note in place of the plots over time, or an empty plot"
  fi
fi
printf '{"schema": 1, "samples": ' >"$scratch/broken.json"
expect_fail "report of broken JSON" 1 "broken.json at offset 25" "not a JSON document" -- \
  report "$scratch/broken.json" --html "$scratch/broken.html"
echo '{"samples": 1}' >"$scratch/other.json"
expect_fail "report of another document" 1 "other.json" "not a feedline run report" -- \
  report "$scratch/other.json" --html "$scratch/other.html"
expect_fail "report of a missing file" 1 "missing.json" "not found" -- \
  report "$scratch/missing.json" --html "$scratch/missing.html"
expect_fail "report into a missing directory" 2 "--html" "nodir" -- \
  report "$scratch/run.json" --html "$scratch/nodir/r.html"

finish html
