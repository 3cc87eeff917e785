"""``rewrite explore OUT``: open a job's (or ``rewrite check -o``'s) output in Model Explorer.

Starts Google's Model Explorer server (the ``[explore]`` extra) on the loopback address with
every model OUT/explorer/explorer.json lists (the artifact, the rewritten TF graph, or check's
original graph and plain converter's file) and each one's node data: placement, rules,
int8 error and cosine, range-starved tensors, Vela cycles (:mod:`rewriter.report.explorer`).
It prints the URL and, unless ``--no-open``, opens it in a browser; Ctrl+C stops it (exit 0;
SIGTERM/SIGHUP end it as any command, exit 2 "interrupted").

Model Explorer's own server reads any file this user can for whoever asks (its
``read_text_file`` and ``send_command`` APIs take a path; a command marked
``deleteAfterConversion`` removes the model's directory when the server stops). This command
narrows it (:func:`refusal`, before every request): paths must be the manifest's models and
node data or inside OUT; no uploads, no config changes, nothing deleted; a request from another
web site (``Origin``, ``Sec-Fetch-Site``) or naming another host (DNS rebinding) is refused
with 403. It binds to 127.0.0.1, and to another address only when ``--host`` names one. Model
Explorer's check for a newer release on PyPI/GitHub is turned off (nothing is downloaded at run
time). Exit 2 when OUT has no node data or the extra is missing.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewriter.errors import UserError

HELP = "open a job's output in Model Explorer with its node data (needs rewriter[explore])"
MISSING = ("`rewrite explore` needs Model Explorer: pip install 'rewriter[explore]' "
           "(ai-edge-model-explorer)")
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8080  # Model Explorer's: from it, the first free port up to 8099 is taken


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT",
                        help="a directory written by `rewrite` or `rewrite check -o`")
    parser.add_argument("--port", type=int, default=None,
                        help=f"port (default: the first free one from {DEFAULT_PORT})")
    parser.add_argument("--host", default=None,
                        help=f"address to bind (default {LOOPBACK}); another address lets "
                             "anyone who reaches it read OUT through the server")
    parser.add_argument("--no-open", action="store_true",
                        help="print the URL, do not open a browser")


def explorer_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("model_explorer") is not None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind_host(host: str | None) -> str:
    """The address to serve on: loopback unless ``host`` names another explicitly."""
    if host is None:
        return LOOPBACK
    if not host.strip():
        raise UserError("--host is empty; leave it out to serve on 127.0.0.1")
    return host


def refuse_remote(host: str, explicit: bool) -> None:
    """A non-loopback address is only taken from an explicit ``--host``."""
    if not is_loopback(host) and not explicit:
        raise UserError(f"refusing to serve Model Explorer on {host}: it shows OUT to "
                        f"whoever connects; pass --host {host} to mean it")


def validate(args: argparse.Namespace) -> None:
    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: expected 1..65535")
    if not explorer_available():
        raise UserError(MISSING)
    load_manifest(Path(args.out))


def load_manifest(out: Path) -> list[dict[str, Any]]:
    """The models and node data OUT/explorer/explorer.json lists, as absolute paths."""
    from rewriter.report.explorer import EXPLORER_DIR, MANIFEST

    path = out / EXPLORER_DIR / MANIFEST
    if not out.is_dir():
        raise UserError(f"{out}: no such directory (give the -o directory of a job)")
    if not path.is_file():
        raise UserError(f"{out}: no Model Explorer node data ({EXPLORER_DIR}/{MANIFEST}); "
                        "run `rewrite MODEL -o OUT` or `rewrite check MODEL -o OUT` again with "
                        "this version")
    try:
        models = json.loads(path.read_text())["models"]
        out_models = []
        for m in models:
            model = out / m["model"]
            if not model.exists():
                raise UserError(f"{path}: {m['model']} is missing from {out}")
            out_models.append({"key": m["key"], "model": model.resolve(),
                               "node_data": [(out / f).resolve() for f in m["node_data"]]})
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a node-data manifest ({exc})") from None
    return out_models


@dataclass(frozen=True)
class Allowed:
    """What the server may read: files inside ``out`` and the manifest's files (both resolved),
    asked for through one of ``hosts`` (``host:port``)."""

    out: Path
    files: frozenset[Path]
    hosts: frozenset[str]

    def path_ok(self, path: object) -> bool:
        if not isinstance(path, str) or not path:
            return False
        real = Path(os.path.realpath(os.path.expanduser(path)))
        return real in self.files or real.is_relative_to(self.out)


def allowed(out: Path, models: list[dict[str, Any]], host: str, port: int) -> Allowed:
    named = f"[{host}]" if ":" in host else host  # an IPv6 address, as a Host header has it
    names = {named, LOOPBACK, "localhost", "[::1]"} if is_loopback(host) else {named}
    files = {Path(os.path.realpath(p)) for m in models for p in (m["model"], *m["node_data"])}
    return Allowed(Path(os.path.realpath(out)), frozenset(files),
                   frozenset(f"{h}:{port}" for h in names))


#: Model Explorer routes that change the server (uploads, its config): refused.
_REFUSED_ROUTES = ("/apipost/v1/upload", "/apipost/v1/update_config")
_COMMAND_ROUTES = ("/api/v1/send_command", "/apipost/v1/send_command")


def refusal(route: str, args: Mapping[str, str], body: Any, headers: Mapping[str, str],
            allow: Allowed) -> str | None:
    """Why one request to Model Explorer's server is refused (None: served)."""
    if headers.get("Host", "") not in allow.hosts:
        return f"host {headers.get('Host', '')!r} is not this server's"
    origin = headers.get("Origin")
    if (origin is not None and origin.split("://", 1)[-1] not in allow.hosts) or headers.get(
            "Sec-Fetch-Site") in ("cross-site", "same-site"):
        return "a request from another web site"
    if route in _REFUSED_ROUTES:
        return f"{route} is not served by `rewrite explore`"
    if route == "/api/v1/read_text_file" and not allow.path_ok(args.get("path")):
        return f"{args.get('path')!r} is outside {allow.out} and the models it lists"
    if route in _COMMAND_ROUTES:
        cmd = body if route.startswith("/apipost") else _json_or_none(args.get("json", "{}"))
        if not isinstance(cmd, Mapping) or not allow.path_ok(cmd.get("modelPath")):
            path = cmd.get("modelPath") if isinstance(cmd, Mapping) else None
            return f"model {path!r} is outside {allow.out} and the models it lists"
        if cmd.get("deleteAfterConversion"):
            return "deleteAfterConversion: `rewrite explore` deletes nothing"
    return None


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _guard(server: Any, allow: Allowed) -> None:
    """Make Model Explorer's ``server.start`` build its Flask app with :func:`refusal` run
    before every request (a 403 with the reason in JSON)."""
    import types

    import flask

    def before() -> Any:
        req = flask.request
        why = refusal(req.path, req.args, req.get_json(silent=True) if req.is_json else None,
                      req.headers, allow)
        if why is not None:
            return flask.make_response({"error": f"refused: {why}"}, 403)
        return None

    class GuardedFlask(flask.Flask):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.before_request(before)

    shim = types.ModuleType("flask")
    shim.__dict__.update(vars(flask))
    shim.Flask = GuardedFlask  # type: ignore[attr-defined]
    server.flask = shim


def build_config(models: list[dict[str, Any]]) -> Any:
    """A Model Explorer config with every model (a GraphDef through its GraphDef adapter, a
    SavedModel through its direct TF adapter: the node ids the overlays use) and its node
    data."""
    import model_explorer

    config = model_explorer.config()
    for m in models:
        adapter = ("builtin_tf_direct" if m["model"].name == "saved_model.pb" else
                   "builtin_graphdef" if m["model"].suffix == ".pb" else "")
        config.add_model_from_path(str(m["model"]), adapterId=adapter)
        for nd in m["node_data"]:
            config.add_node_data_from_path(str(nd), model_name=m["model"].name)
    return config


def _free_port(host: str, port: int | None) -> int:
    def free(p: int) -> bool:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            try:
                s.bind((host, p))
            except OSError:
                return False
            return True

    if port is not None:
        if not free(port):
            raise UserError(f"port {port} on {host} is in use or not allowed; choose another "
                            "with --port")
        return port
    for p in range(DEFAULT_PORT, DEFAULT_PORT + 20):
        if free(p):
            return p
    raise UserError(f"no free port in {DEFAULT_PORT}..{DEFAULT_PORT + 19}; give one with --port")


def _no_version_check() -> None:
    """Model Explorer asks PyPI and GitHub for a newer release when it starts and when the page
    loads; answer "none" locally instead."""
    from model_explorer import server

    server._check_new_version = lambda print_msg=True: {  # noqa: SLF001
        "version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def run(args: argparse.Namespace, ui: Any) -> int:
    host = bind_host(args.host)
    refuse_remote(host, explicit=args.host is not None)
    models = load_manifest(Path(args.out))
    try:
        from model_explorer import server
    except ImportError:
        raise UserError(MISSING) from None
    port = _free_port(host, args.port)
    config = build_config(models)
    for m in models:
        names = ", ".join(p.name.split(".")[1] for p in m["node_data"]) or "none"
        ui.info(f"{m['model'].name}: node data {names}")
    if not is_loopback(host):
        ui.warn(f"serving on {host}: anyone who reaches {host}:{port} can read {args.out} "
                "through Model Explorer")
    _no_version_check()
    _guard(server, allowed(Path(args.out), models, host, port))
    if hasattr(sys.stdout, "reconfigure"):  # the URL reaches a pipe or log at once
        sys.stdout.reconfigure(line_buffering=True)
    try:
        server.start(host=host, port=port, config=config, no_open_in_browser=args.no_open)
    except KeyboardInterrupt:  # Ctrl+C is how a server is stopped: not an error
        pass
    ui.info("Model Explorer stopped")
    return 0
