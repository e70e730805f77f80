#!/usr/bin/env bash
# Renders an HTML report in headless Chromium and checks that it really renders: a screenshot
# that is not blank, and the DOM after rendering with every chart and table in it.
#
#   scripts/dev/check_html.sh GPUBENCH_EXE RESULT_FILE...
#   scripts/dev/check_html.sh --hostile GPUBENCH_EXE HOSTILE_RESULT_FILE
#
# --hostile (ctest: HostileHtmlReportIsInertInChromium, on tests/hostile/hostile-report.json):
# records whose names, devices and messages hold <script>, event handlers, </style>, </table>,
# ANSI and C1 escapes and 20000-byte names. Checks that nothing executes (no script element, no
# handler, no data-pwned mark the payloads would set), the text shows escaped, and the layout
# holds: the page is not wider than the window (the tables scroll in their own box).
#
# ctest runs it as HtmlReportRendersInChromium on the golden fixture (tests/golden/inputs/).
# Exit 0: renders; 1: does not, or no Chromium; 77: skipped (GPUBENCH_SKIP_BROWSER_TESTS=1).
# GPUBENCH_CHROMIUM=/path picks the browser (default: chromium, chromium-browser or
# google-chrome from PATH).
set -euo pipefail

if [ "${GPUBENCH_SKIP_BROWSER_TESTS:-0}" = 1 ]; then
  echo "check_html: skipped (GPUBENCH_SKIP_BROWSER_TESTS=1)"
  exit 77
fi
hostile=0
if [ "${1:-}" = --hostile ]; then hostile=1; shift; fi
[ $# -ge 2 ] || { echo "usage: $0 [--hostile] GPUBENCH_EXE RESULT_FILE..." >&2; exit 1; }
exe=$1
shift

browser=${GPUBENCH_CHROMIUM:-}
if [ -z "$browser" ]; then
  for candidate in chromium chromium-browser google-chrome; do
    if command -v "$candidate" >/dev/null 2>&1; then browser=$candidate; break; fi
  done
fi
if [ -z "$browser" ] || ! command -v "$browser" >/dev/null 2>&1; then
  cat >&2 <<'MSG'
check_html: FAILED: no Chromium to render the HTML report in.
  Install it: sudo apt-get install chromium (Debian's package; scripts/test.sh installs it),
  or point GPUBENCH_CHROMIUM at a Chromium or Chrome binary,
  or skip this check on purpose: GPUBENCH_SKIP_BROWSER_TESTS=1
MSG
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_html: FAILED: $*" >&2; exit 1; }

"$exe" report "$@" --format html --output "$work/report.html" 2>"$work/report.err" ||
  fail "gpubench report exited with $?: $(cat "$work/report.err")"

# --no-sandbox: CI and containers run as root, where Chromium's sandbox refuses to start.
render() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$work/profile" "$@" 2>>"$work/chromium.log"
}
size() { wc -c <"$1" | tr -d ' '; }

if [ "$hostile" = 1 ]; then
  render --dump-dom "file://$work/report.html" >"$work/dom.html" ||
    fail "chromium could not load the hostile report: $(tail -5 "$work/chromium.log")"
  for markup in '<script' '<img' '<iframe' '<svg onload' 'data-pwned' '<h1 style' \
    '<style>body{display:none'; do
    if grep -qiF -- "$markup" "$work/dom.html"; then
      fail "hostile content became markup in the rendered DOM: $markup"
    fi
  done
  # An event handler inside a tag (the payloads' "onerror=" shown as text is fine).
  if grep -qiE '<[a-z][^<>]*[[:space:]]on[a-z]+=' "$work/dom.html"; then
    fail "an event handler attribute in the rendered DOM: $(grep -oiE '<[a-z][^<>]*[[:space:]]on[a-z]+=' "$work/dom.html" | head -1)"
  fi
  for text in '&lt;script&gt;document.body.dataset.pwned=1&lt;/script&gt;' \
    '&lt;/style&gt;&lt;style&gt;' 'bytes cut'; do
    grep -qF -- "$text" "$work/dom.html" || fail "missing from the rendered DOM (escaped): $text"
  done
  tables=$(grep -o '<table>' "$work/dom.html" | wc -l | tr -d ' ')
  [ "$tables" -ge 3 ] || fail "expected the report's tables in the DOM, found $tables"
  # The layout: measured inside the page by a wrapper that frames it (same origin with
  # --allow-file-access-from-files), written into the wrapper's DOM for --dump-dom to show.
  cat >"$work/wrapper.html" <<'HTML'
<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="report.html" style="width:1400px;height:3000px;border:0"></iframe>
<script>
document.getElementById('f').addEventListener('load', function () {
  var d = this.contentDocument, w = this.contentWindow;
  var out = document.createElement('pre');
  out.id = 'measure';
  out.textContent = 'width=' + d.documentElement.scrollWidth +
    ' pwned=' + (d.body.dataset.pwned ? 1 : 0) +
    ' scripts=' + d.getElementsByTagName('script').length +
    ' h1=' + d.getElementsByTagName('h1').length +
    ' bodyvisible=' + (w.getComputedStyle(d.body).display !== 'none' ? 1 : 0);
  document.body.appendChild(out);
});
</script></body></html>
HTML
  render --allow-file-access-from-files --virtual-time-budget=10000 --window-size=1400,3000 \
    --dump-dom "file://$work/wrapper.html" >"$work/wrapper-dom.html" ||
    fail "chromium could not load the wrapper page: $(tail -5 "$work/chromium.log")"
  measure=$(grep -o 'width=[0-9]* pwned=[0-9] scripts=[0-9]* h1=[0-9]* bodyvisible=[0-9]' \
    "$work/wrapper-dom.html" || true)
  [ -n "$measure" ] || fail "the wrapper could not measure the report (see $work)"
  width=${measure#width=}; width=${width%% *}
  [ "$width" -le 1400 ] || fail "the hostile report is ${width}px wide: a name broke the layout"
  case "$measure" in
    *"pwned=0 scripts=0 h1=1 bodyvisible=1"*) ;;
    *) fail "the hostile report is not inert or its layout broke: $measure" ;;
  esac
  render --screenshot="$work/report.png" --window-size=1400,3000 "file://$work/report.html" \
    >/dev/null || fail "chromium could not take a screenshot of the hostile report"
  [ "$(wc -c <"$work/report.png" | tr -d ' ')" -gt 20000 ] || fail "the hostile report renders blank"
  echo "check_html: OK: the hostile report is inert in $browser ($measure; escaped text shown)"
  exit 0
fi

# 1. The screenshot: a PNG of the window's size, far bigger than the same window left blank
#    (a white 1400x3000 PNG compresses to a few KB; charts and tables do not).
printf '<!DOCTYPE html>\n<html><body></body></html>\n' >"$work/blank.html"
render --screenshot="$work/blank.png" --window-size=1400,3000 "file://$work/blank.html" >/dev/null ||
  fail "chromium could not take a screenshot of a blank page: $(tail -5 "$work/chromium.log")"
render --screenshot="$work/report.png" --window-size=1400,3000 "file://$work/report.html" >/dev/null ||
  fail "chromium could not take a screenshot of the report: $(tail -5 "$work/chromium.log")"
[ -s "$work/report.png" ] || fail "no screenshot written"
[ "$(head -c 8 "$work/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "the screenshot is not a PNG"
read -r width height < <(od -An -tu1 -j16 -N8 "$work/report.png" |
  awk '{print $1*16777216 + $2*65536 + $3*256 + $4, $5*16777216 + $6*65536 + $7*256 + $8}')
[ "$width" = 1400 ] && [ "$height" = 3000 ] || fail "screenshot is ${width}x${height}, not 1400x3000"
blank=$(size "$work/blank.png")
shot=$(size "$work/report.png")
[ "$shot" -gt 40000 ] && [ "$shot" -gt $((4 * blank)) ] ||
  fail "the screenshot looks blank: $shot bytes (a blank page: $blank bytes)"

# 2. The DOM after parsing and layout: the charts are there as SVG with their accessible
#    titles and bars, every table is there, and record text stayed text (escaped).
render --dump-dom "file://$work/report.html" >"$work/dom.html" ||
  fail "chromium could not load the report: $(tail -5 "$work/chromium.log")"
count() { { grep -o "$1" "$work/dom.html" || true; } | wc -l | tr -d ' '; }
svgs=$(count '<svg ')
rects=$(count '<rect ')
tables=$(count '<table>')
[ "$svgs" -ge 3 ] || fail "expected at least 3 charts (<svg>) in the DOM, found $svgs"
[ "$rects" -ge 30 ] || fail "expected at least 30 bars (<rect>) in the DOM, found $rects"
[ "$tables" -ge 5 ] || fail "expected at least 5 tables in the DOM, found $tables"
# The charts (issues 43 and 46): one per workload, the family means, the precision gain per card,
# per joule (the fixture's H200 fp32 records have energy, none has a price: the per-dollar note),
# the memory tiers.
for text in '<title id="chart-image-nasnet-large-title">' \
  '<title id="chart-language-bert-base-title">' '<title id="chart-summary-title">' \
  '<title id="chart-precision-gain-title">' '<title id="chart-per-joule-title">' \
  'No record has a price per hour, so there is no per-dollar chart' \
  '<title id="chart-memory-tiers-1-title">' 'id="normalized"' 'id="max-batch"' 'id="measured"' \
  'id="memory-tiers-1"' 'emulated: the cap stands for the whole card'; do
  grep -qF "$text" "$work/dom.html" || fail "missing from the rendered DOM: $text"
done
if grep -qi '<sigsegv' "$work/dom.html"; then
  fail "a message became markup: '<SIGSEGV>' was not escaped"
fi
grep -qF '&lt;SIGSEGV&gt;' "$work/dom.html" || fail "the crashed job's message is not shown"

echo "check_html: OK: $browser rendered the report ($shot-byte screenshot, blank page $blank;" \
  "$svgs charts, $rects bars, $tables tables in the DOM)"
