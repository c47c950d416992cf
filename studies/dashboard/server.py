"""`Dashboard` and `serve`: the live, read-only view of the studies in one storage.

One WSGI application serves two things over the same read-only reads:

- optuna-dashboard (``/dashboard``, its ``/api``, ``/static``, ``/csv``), unchanged, over
  `studies.dashboard.optuna_storage.OptunaView`: trial table with filters, history, Pareto front,
  parallel coordinates, slice, importances... as Optuna users know them;
- this project's page (``/rt/``, the landing page): the views optuna-dashboard cannot show
  (`studies.dashboard.views`): rule priors, the learned structure and the surrogate in use,
  running trials with their heartbeats, failures with their errors, the time split, and what the
  application's `Hooks` add (the rewrite study's held-out validation).

Read-only by construction: the storage is opened with `ReadOnlyStorage`, the Optuna view refuses
writes, and any request that is not ``GET`` or ``HEAD`` is answered ``405`` before it reaches
either. No error shows a traceback page: storage errors are the page's banner (the page keeps
polling, so a study that does not exist yet appears once a driver creates it), other errors a
one-line JSON or text answer (the traceback goes to the server's log).
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from studies.dashboard import views
from studies.dashboard.hooks import Hooks
from studies.dashboard.page import plotly_js, render_page
from studies.dashboard.panels import learned_html
from studies.dashboard.readonly import ReadOnlyStorage
from studies.dashboard.snapshot import Snapshot, Watcher
from studies.dashboard.structure_fits import StructureFits
from studies.errors import StorageNotFoundError, StudyError, StudyNotFoundError
from studies.weights import SIMPLEX

__all__ = ["Dashboard", "DashboardError", "serve"]

logger = logging.getLogger(__name__)


class DashboardError(StudyError):
    """The dashboard cannot start (its port is taken, a dependency is missing...)."""


def _needs(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise DashboardError(
            f"The dashboard needs {module.split('.')[0]}, which is not installed: "
            "pip install 'rewrite-tuner[dashboard]'."
        ) from None


class Dashboard:
    """The read-only views of one storage's studies (module docstring).

    Args:
        url: The storage URL.
        name: Show this study only (the landing page opens it), or every study (None).
        hooks: The application's additions (`Hooks`).
    """

    def __init__(self, url: str, name: str | None = None, hooks: Hooks | None = None) -> None:
        self.storage = ReadOnlyStorage(url)
        self.name = name
        self.hooks = hooks or Hooks()
        self._watchers: dict[str, Watcher] = {}
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="rt-dashboard-")
        self.fits = StructureFits(url, self._tmp.name)

    def close(self) -> None:
        """Stop background fits and remove their files."""
        self.fits.close()
        self._tmp.cleanup()
        self.storage.close()

    # ------------------------------------------------------------------ reads
    def snapshot(self, name: str) -> Snapshot:
        """The study ``name`` as stored now (`Watcher.snapshot`)."""
        with self._lock:
            watcher = self._watchers.get(name)
            if watcher is None:
                watcher = self._watchers[name] = Watcher(self.storage, name)
        return watcher.snapshot()

    def waiting(self) -> str | None:
        """Why the page will wait (no database or no such study yet), or None when the study
        (or, without a name, the storage) can be shown now.

        Raises:
            StudyError: For what waiting cannot fix: a foreign, damaged or newer database.
        """
        try:
            names = self.storage.study_names()
        except StorageNotFoundError as err:  # the driver may not have created it yet
            return str(err)
        if self.name is not None and self.name not in names:
            return (
                f"no study named {self.name!r} in {self.storage.url} yet (it holds {names}); "
                "the page shows it once a driver creates it."
            )
        return None

    def names(self) -> list[str]:
        """The studies shown (the one named, else every study of the storage)."""
        if self.name is not None:
            return [self.name]
        return self.storage.study_names()

    def views(self, name: str, since: int = -1) -> dict[str, Any]:
        """The page's payload (`views.build`), ``{"unchanged": True}`` when the study's version
        is still ``since``, or ``{"error", "state"}`` when it cannot be read (``state``:
        ``waiting`` for a study or database that does not exist yet, else ``error``)."""
        try:
            snap = self.snapshot(name)
            if snap.version == since:
                out: dict[str, Any] = {"unchanged": True, "version": snap.version}
            else:
                out = dict(views.build(snap, self.hooks))
        except StudyError as err:
            waiting = isinstance(err, StorageNotFoundError | StudyNotFoundError)
            out = {"error": str(err), "state": "waiting" if waiting else "error"}
        out["server_now"] = time.time()
        return out

    def trial(self, name: str, number: int) -> dict[str, Any]:
        """One trial's view, or ``{"error"}``."""
        try:
            return views.trial_detail(self.snapshot(name), number, self.hooks)
        except KeyError:
            return {"error": f"study {name!r} has no trial {number}"}
        except StudyError as err:
            return {"error": str(err)}

    def structure(self, name: str) -> dict[str, Any]:
        """The learned structure's view (starting a background fit when it is out of date)."""
        try:
            fit = self.fits.get(self.snapshot(name))
        except StudyError as err:
            fit = {"state": "error", "error": str(err)}
        return {"state": fit.get("state"), "html": learned_html(fit)}

    def studies(self) -> list[dict[str, Any]]:
        """One summary per study: name, id and `views.headline`."""
        out = []
        for name in self.names():
            try:
                snap = self.snapshot(name)
            except StudyNotFoundError:
                continue
            out.append({"name": name, "id": snap.record.id, **views.headline(snap)})
        return out

    def note(self, snap: Snapshot) -> str:
        """optuna-dashboard's study note: what this view adds, with links (Markdown)."""
        base = f"/rt/study/{urllib.parse.quote(snap.name, safe='')}/"
        words = self.hooks.weights_of or SIMPLEX
        n = views.headline(snap)
        links = " · ".join(
            f"[{title}]({base}#{tab})"
            for tab, title in (
                ("overview", "overview"),
                ("priors", words.heading.lower()),
                ("structure", "structure and surrogate"),
                ("running", "running trials"),
                ("failures", "failures"),
                ("time", "time split"),
            )
        )
        return (
            f"**Read-only view** of the rewrite-tuner study storage `{snap.url}`: "
            f"{n['finished']} trials finished, {n['running']} running, {n['failed']} failed. "
            f"Parameters: one column per knob, and one per {words.part} of each Simplex. "
            f"Views optuna-dashboard does not have: {links}."
        )

    def figures(self, snap: Snapshot) -> dict[str, dict[str, Any]]:
        """The figures optuna-dashboard draws on the study's page: this view's hypervolume, the
        exported trial's weights (`studies.weights.WeightsOf`) and the time split, titled."""
        words = self.hooks.weights_of or SIMPLEX
        what = words.heading.lower()
        titles = {  # short, left: optuna-dashboard's tool bar is on the right
            "hist-hv": ("hypervolume", "hypervolume over completed trials"),
            "priors-0": (what.replace(" ", "-"), f"exported {what}"),
            "time-split": ("time-split", "time split (s)"),
        }
        out = {}
        for panel in views.build(snap, self.hooks)["panels"]:
            for fig in panel["figures"]:
                if fig["id"] in titles:
                    key, title = titles[fig["id"]]
                    layout = {**fig["layout"], "title": {"text": title, "x": 0.01}}
                    layout["margin"] = {**layout.get("margin", {}), "t": 70}
                    out[key] = {"data": fig["data"], "layout": layout}
        return out

    # ------------------------------------------------------------------ WSGI
    def app(self) -> Callable[..., Any]:
        """The WSGI application (optuna-dashboard plus this project's page)."""
        bottle = _needs("bottle")
        od = _needs("optuna_dashboard._app")
        from studies.dashboard.optuna_storage import OptunaView

        view = OptunaView(self.snapshot, self.names, self.note, self.figures)
        app = od.create_app(view)
        _guard(app, bottle)
        self._routes(app, bottle)
        return app  # type: ignore[no-any-return]

    def _routes(self, app: Any, bottle: Any) -> None:
        js = plotly_js()

        def page_url(name: str) -> str:
            return f"/rt/study/{urllib.parse.quote(name, safe='')}/"

        @app.get("/")
        def root() -> Any:
            target = page_url(self.name) if self.name is not None else "/rt/"
            return bottle.redirect(target, 302)

        @app.get("/rt")
        def index() -> Any:
            if self.name is not None:
                return bottle.redirect(page_url(self.name), 302)
            return _index_page(self)

        @app.get("/rt/static/plotly.min.js")
        def plotly() -> Any:
            bottle.response.content_type = "application/javascript"
            bottle.response.set_header("Cache-Control", "max-age=86400")
            return js

        def api(fn: Callable[[], Any]) -> Any:
            bottle.response.content_type = "application/json"
            bottle.response.set_header("Cache-Control", "no-store")
            try:
                return json.dumps(fn(), allow_nan=False, default=float)
            except Exception as err:  # noqa: BLE001 - answered in one line, logged in full
                logger.error("dashboard request failed", exc_info=True)
                return json.dumps({"error": f"internal error ({type(err).__name__}: {err})"})

        @app.get("/rt/study/<name:path>/api/views")
        def api_views(name: str) -> Any:
            since = bottle.request.query.get("since", "-1")
            return api(lambda: self.views(name, int(since) if since.lstrip("-").isdigit() else -1))

        @app.get("/rt/study/<name:path>/api/trial/<number:int>")
        def api_trial(name: str, number: int) -> Any:
            return api(lambda: self.trial(name, number))

        @app.get("/rt/study/<name:path>/api/structure")
        def api_structure(name: str) -> Any:
            return api(lambda: self.structure(name))

        @app.get("/rt/api/studies")
        def api_studies() -> Any:
            return api(lambda: {"studies": self.studies()})

        @app.get("/rt/study/<name:path>")
        def page(name: str) -> Any:
            return render_page(
                name,
                api=page_url(name) + "api",
                optuna="/dashboard/studies/",
                plotly_src="/rt/static/plotly.min.js",
            )

        for code in (404, 405, 500):
            app.error(code)(_error_page)


def _guard(app: Any, bottle: Any) -> None:
    """Answer every request but ``GET`` / ``HEAD`` with 405 before any route runs; strip the
    trailing slash optuna-dashboard strips (its own hook) from this project's routes too."""

    @app.hook("before_request")
    def read_only() -> None:
        if bottle.request.method not in ("GET", "HEAD"):
            raise bottle.HTTPResponse(
                json.dumps(
                    {
                        "reason": "This dashboard is read-only: it never changes a study (no "
                        "note, rename, delete or told trial). Use the tuner commands."
                    }
                ),
                status=405,
                headers={"Content-Type": "application/json", "Allow": "GET, HEAD"},
            )


def _error_page(error: Any) -> str:
    """A one-line error page (never a traceback)."""
    from html import escape

    status = getattr(error, "status_line", "error")
    body = getattr(error, "body", "") or ""
    return f"<!doctype html><title>{escape(status)}</title><p>{escape(status)}: {escape(str(body))}</p>"


def _index_page(dash: Dashboard) -> str:
    """The list of the storage's studies (refreshed every few seconds)."""
    from html import escape

    from studies.dashboard import markup as h

    try:
        rows = [
            [
                f'<a href="/rt/study/{urllib.parse.quote(s["name"], safe="")}/">{escape(s["name"])}</a>',
                str(s["trials"]), str(s["complete"]), str(s["failed"]), str(s["running"]),
                f'<a href="/dashboard/studies/{s["id"]}">optuna-dashboard</a>',
            ]
            for s in dash.studies()
        ]  # fmt: skip
        body = h.table(
            ["study", "trials", "COMPLETE", "FAILED", "RUNNING", ""], rows,
            empty="no study in this storage yet",
        )  # fmt: skip
    except StudyError as err:
        body = h.note(str(err), "warn")
    return (
        '<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">'
        f"<title>studies - rewrite-tuner</title><style>body{{font:14px system-ui;margin:24px}}"
        "table{border-collapse:collapse}td,th{padding:4px 12px;border-bottom:1px solid #ddd}"
        f"</style></head><body><h1>Studies in {escape(dash.storage.url)}</h1>{body}</body></html>"
    )


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = False


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        logger.debug("%s %s", self.address_string(), format % args)


def make(dash: Dashboard, host: str = "127.0.0.1", port: int = 8080) -> WSGIServer:
    """A server for ``dash`` bound to ``host:port`` (0: a free port), not started yet.

    Raises:
        DashboardError: If the port is taken or the host cannot be bound.
    """
    app = dash.app()
    try:
        return make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise DashboardError(
                f"Port {port} on {host} is in use (another dashboard or server?). Pass another "
                "--port, or --port 0 for any free one."
            ) from None
        if isinstance(err, socket.gaierror) or err.errno in (errno.EADDRNOTAVAIL,):
            raise DashboardError(
                f"Cannot listen on {host}:{port}: {err}. Pass another --host."
            ) from None
        raise


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def serve(
    dash: Dashboard,
    host: str = "127.0.0.1",
    port: int = 8080,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``dash`` until interrupted (Ctrl-C); ``on_ready`` gets the page's URL once the port
    is bound."""
    server = make(dash, host, port)
    if threading.current_thread() is threading.main_thread():  # SIGTERM stops it as Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupt)
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "") else host
    url = f"http://{shown}:{server.server_port}/"
    if on_ready is not None:
        on_ready(url)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        dash.close()
