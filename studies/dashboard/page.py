"""The dashboard's HTML page: one template for the live view and for the report.

Live, the page fetches its views from the server (``api/views``) and polls every
`POLL_SECONDS`: an unchanged study answers with its version only; a changed one with the views,
which the page swaps in place (figures redrawn with ``Plotly.react``, the open tab, the scroll
position and the trial on show kept), so a trial another process writes appears without a
reload. In the report, the views and every trial's view are embedded in the page, and plotly.js
with them, so the single file opens offline.

Nothing here reaches the network but the page's own server: no CDN, no font, no tracker.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from studies.dashboard.markup import esc

__all__ = ["POLL_SECONDS", "plotly_js", "render_page"]

#: Seconds between two polls of the live page.
POLL_SECONDS = 2.0


def plotly_js() -> bytes:
    """plotly.js (minified), from the plotly Python package (the ``dashboard`` extra).

    Raises:
        StudyError: If plotly is not installed (with the install hint).
    """
    from studies.errors import StudyError

    try:
        return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise StudyError(
            "The dashboard draws with plotly.js from the plotly package, which is not installed: "
            "pip install 'rewrite-tuner[dashboard]'."
        ) from None


def _json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=float)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(
    title: str,
    *,
    api: str | None = None,
    optuna: str | None = None,
    payload: dict[str, Any] | None = None,
    trials: dict[int, Any] | None = None,
    inline_plotly: bool = False,
    plotly_src: str = "static/plotly.min.js",
) -> str:
    """The page of one study.

    Args:
        title: The study's name.
        api: The live page's API base URL (``None``: a report, with ``payload`` embedded).
        optuna: Where optuna-dashboard's study pages are (live only; the study's id is
            appended), or None.
        payload: The views (`studies.dashboard.views.build`), embedded in a report.
        trials: Trial number -> its view (`studies.dashboard.views.trial_detail`), embedded in a
            report.
        inline_plotly: Embed plotly.js (the report) instead of loading ``plotly_src``.
        plotly_src: Where the live page loads plotly.js from.
    """
    config = {
        "mode": "live" if api is not None else "report",
        "api": api,
        "optuna": optuna,
        "poll": POLL_SECONDS,
    }
    if inline_plotly:
        script = (
            "<script>" + plotly_js().decode("utf-8").replace("</script", "<\\/script") + "</script>"
        )
    else:
        script = f'<script src="{esc(plotly_src)}"></script>'
    data = (
        f"<script>window.RT_CONFIG={_json(config)};window.RT_PAYLOAD={_json(payload)};"
        f"window.RT_TRIALS={_json(trials or {})};</script>"
    )
    head = _HEAD.replace("{title}", esc(title))
    return (
        head
        + _CSS
        + script
        + data
        + "</head>"
        + _BODY.replace("{title}", esc(title))
        + "<script>"
        + _JS
        + "</script></body></html>"
    )


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - rewrite-tuner</title>
"""

_CSS = """<style>
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212121;background:#f4f6f8}
header{background:#263238;color:#eceff1;padding:10px 18px 0}
header h1{margin:0;font-size:18px;font-weight:600}
header h1 small{font-weight:400;color:#b0bec5;margin-left:8px}
header .meta{font-size:12px;color:#b0bec5;margin:2px 0 8px}
header .meta a{color:#80cbc4}
nav{display:flex;flex-wrap:wrap;gap:2px}
nav button{background:none;border:0;color:#cfd8dc;padding:8px 12px;font:inherit;cursor:pointer;border-bottom:3px solid transparent}
nav button.on{color:#fff;border-bottom-color:#4db6ac}
nav button:hover{color:#fff}
main{padding:14px 18px;max-width:1500px}
section.view{display:none;background:#fff;border-radius:6px;padding:14px 18px;box-shadow:0 1px 3px rgba(0,0,0,.12)}
section.view.on{display:block}
#banner{display:none;margin:12px 18px 0;padding:10px 14px;border-radius:6px;background:#fff3e0;border:1px solid #ffb74d;white-space:pre-wrap}
#banner.error{background:#ffebee;border-color:#e57373}
#banner.on{display:block}
h2{font-size:17px;margin:4px 0 10px}
h3{font-size:14px;margin:16px 0 6px;color:#37474f}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:14px}
.card{background:#eceff1;border-radius:6px;padding:8px 12px;min-width:120px}
.card .label{font-size:11px;color:#607d8b;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:20px;font-weight:600}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:18px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e0e0e0;vertical-align:top}
th{background:#fafafa;font-weight:600;position:sticky;top:0}
table.kv td:first-child{color:#607d8b;width:140px}
td.empty{color:#9e9e9e;font-style:italic}
.scroll{max-height:640px;overflow:auto}
.scroll.short{max-height:360px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:12px}
pre.error{color:#b71c1c;background:#fff8f8;padding:4px 6px;border-radius:4px}
pre.explain{background:#f5f5f5;padding:8px;border-radius:4px}
p.note{color:#546e7a;font-size:13px;margin:6px 0 10px}
p.warn{color:#b71c1c}
p.empty{color:#9e9e9e;font-style:italic}
.age.stale{color:#c62828;font-weight:600}
a.trial{color:#00796b;font-weight:600;text-decoration:none}
a.trial:hover{text-decoration:underline}
img.dag{max-width:100%;border:1px solid #eee;margin-top:8px}
.fig{width:100%}
</style>
"""

_BODY = """<body>
<header>
<h1>rewrite-tuner <small id="study-name">{title}</small></h1>
<div class="meta" id="meta"></div>
<nav id="tabs"></nav>
</header>
<div id="banner" role="status"></div>
<main id="views"></main>
"""

_JS = r"""
(function(){
const C = window.RT_CONFIG, tabs = document.getElementById('tabs'), views = document.getElementById('views');
const banner = document.getElementById('banner'), meta = document.getElementById('meta');
let version = 0, offset = 0, current = null, shownTrial = null, seen = {}, structureTimer = null;
const pending = {};  // figures of views not on show yet: drawn when their tab opens
const plotCfg = {displaylogo:false, responsive:true, modeBarButtonsToRemove:['sendDataToCloud']};

function now(){ return Date.now()/1000 + offset; }
function dur(s){ s = Math.max(0, s); if (s < 90) return s.toFixed(0)+' s'; if (s < 5400) return (s/60).toFixed(0)+' min';
  if (s < 172800) return (s/3600).toFixed(1)+' h'; return (s/86400).toFixed(1)+' d'; }
function tickAges(){ const t = now(); document.querySelectorAll('.age').forEach(e => {
  const a = t - parseFloat(e.dataset.t); e.textContent = dur(a);
  if (e.dataset.warn) e.classList.toggle('stale', a > parseFloat(e.dataset.warn)); }); }
function say(text, kind){ banner.textContent = text || ''; banner.className = text ? 'on ' + (kind||'') : ''; }

function tab(id){
  current = id;
  document.querySelectorAll('nav button').forEach(b => b.classList.toggle('on', b.dataset.tab === id));
  document.querySelectorAll('section.view').forEach(s => s.classList.toggle('on', s.id === 'view-' + id));
  if (pending[id]) { const figs = pending[id]; delete pending[id]; draw(figs); }
  const sec = document.getElementById('view-' + id);
  if (sec) sec.querySelectorAll('.fig').forEach(f => { if (f.data) Plotly.Plots.resize(f); });
  if (id === 'structure') loadStructure();
  if (id !== 'trial' && location.hash !== '#' + id) history.replaceState(null, '', '#' + id);
}
function ensure(id, title){
  let sec = document.getElementById('view-' + id);
  if (!sec) {
    sec = document.createElement('section'); sec.className = 'view'; sec.id = 'view-' + id; views.appendChild(sec);
    const b = document.createElement('button'); b.dataset.tab = id; b.onclick = () => tab(id); tabs.appendChild(b);
  }
  tabs.querySelector('button[data-tab="' + id + '"]').textContent = title;
  return sec;
}
function draw(figs){ (figs || []).forEach(f => { const el = document.getElementById(f.id); if (!el) return;
  Plotly.react(el, f.data, f.layout, plotCfg);
  if (!el.dataset.clicks) { el.dataset.clicks = 1; el.on('plotly_click', ev => {
    const p = ev.points && ev.points[0]; if (p && p.customdata !== undefined && p.customdata !== null) openTrial(p.customdata); }); } }); }

function render(p){
  version = p.version; document.body.dataset.version = p.version; window.RT_STATE = p.numbers; window.RT_STATE_ID = p.study_id;
  document.getElementById('study-name').textContent = p.study;
  document.title = p.study + ' - rewrite-tuner';
  let links = 'storage ' + p.url + ' &middot; ' + (C.mode === 'live' ? 'live, refreshed every ' + C.poll + ' s' : 'report written <span class="age" data-t="' + p.read_at + '"></span> ago');
  if (C.optuna) links += ' &middot; <a id="optuna-link" href="' + C.optuna + p.study_id + '">open in optuna-dashboard</a> (trial table, filters, importances)';
  meta.innerHTML = links;
  p.panels.forEach(panel => {
    const sec = ensure(panel.id, panel.title);
    if (seen[panel.id] !== panel.html) {
      const keep = panel.id === 'structure' ? sec.querySelector('#structure-fit') : null;
      sec.innerHTML = panel.html; seen[panel.id] = panel.html;
      if (keep && keep.dataset.filled) { const fresh = sec.querySelector('#structure-fit'); if (fresh) { fresh.innerHTML = keep.innerHTML; fresh.dataset.filled = 1; } }
    }
    if (current === panel.id) draw(panel.figures); else pending[panel.id] = panel.figures;
  });
  if (!current) { const want = location.hash.slice(1); if (want.startsWith('trial-')) { tab('overview'); openTrial(parseInt(want.slice(6))); }
    else tab(document.getElementById('view-' + want) ? want : 'overview'); }
  else if (current !== 'trial') tab(current);
  if (shownTrial !== null && C.mode === 'live') openTrial(shownTrial, true);
  tickAges();
}

async function openTrial(n, quiet){
  n = parseInt(n); shownTrial = n;
  const sec = ensure('trial', 'Trial ' + n);
  let t = null;
  if (C.mode === 'report') t = window.RT_TRIALS[n];
  else { try { const r = await fetch(C.api + '/trial/' + n); t = await r.json(); } catch (e) { t = {error: String(e)}; } }
  if (!t || t.error) { sec.innerHTML = '<p class="warn">Trial ' + n + ': ' + ((t && t.error) || 'not in this study') + '</p>'; }
  else {
    let html = t.html;
    if (C.optuna && C.mode === 'live') html += '<p class="note"><a href="' + C.optuna + (window.RT_STATE_ID || '') + '/trials?numbers=' + n + '">this trial in optuna-dashboard</a></p>';
    sec.innerHTML = html; draw(t.figures);
  }
  if (!quiet) { tab('trial'); history.replaceState(null, '', '#trial-' + n); window.scrollTo(0, 0); }
  tickAges();
}
window.addEventListener('hashchange', () => {  // a link or the history: #view or #trial-N
  const want = location.hash.slice(1);
  if (want.startsWith('trial-')) { if (parseInt(want.slice(6)) !== shownTrial || current !== 'trial') openTrial(want.slice(6)); }
  else if (want && want !== current && document.getElementById('view-' + want)) tab(want);
});
document.addEventListener('click', ev => { const a = ev.target.closest('a.trial'); if (!a) return; ev.preventDefault(); openTrial(a.dataset.trial); });

async function loadStructure(){
  const box = document.getElementById('structure-fit'); if (!box) return;
  if (C.mode === 'report' || box.dataset.done) return;
  try { const r = await fetch(C.api + '/structure'); const s = await r.json(); box.innerHTML = s.html; box.dataset.filled = 1;
    clearTimeout(structureTimer); if (s.state === 'running' && current === 'structure') structureTimer = setTimeout(loadStructure, 5000);
  } catch (e) { box.innerHTML = '<p class="warn">' + e + '</p>'; }
}

async function poll(){
  try {
    const r = await fetch(C.api + '/views?since=' + version, {cache: 'no-store'});
    const p = await r.json();
    if (p.server_now) offset = p.server_now - Date.now()/1000;
    if (p.error) { say(p.error, p.state === 'waiting' ? '' : 'error'); document.body.dataset.state = p.state || 'error'; }
    else { say(''); document.body.dataset.state = 'ok'; if (!p.unchanged) render(p); }
  } catch (e) { say('The dashboard server does not answer (' + e + '); retrying every ' + C.poll + ' s.', 'error'); document.body.dataset.state = 'offline'; }
  setTimeout(poll, C.poll * 1000);
}

setInterval(tickAges, 1000);
if (C.mode === 'report') { document.body.dataset.state = 'ok'; render(window.RT_PAYLOAD); }
else poll();
})();
"""
