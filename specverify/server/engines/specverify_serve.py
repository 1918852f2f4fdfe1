"""Our own server (`specverify serve`) as a launched engine: the reference, and the child of the
launcher's lifecycle tests (it binds the port it is given, answers /v1/models, stops on SIGTERM)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import EngineLauncher

INSTALL = "pip install -e '.[engine,server]' (specverify itself; docs/server-level.md)"


@dataclass(frozen=True)
class SpecverifyLauncher(EngineLauncher):
    def command(self, python, model, port, spec, extra=()):
        # `--spec` is ours verbatim: none, ngram[:N], draft[:LAYERS], uniform, skewed
        return [python, "-m", "specverify", "serve", "--model", str(model), "--spec", str(spec),
                "--host", "127.0.0.1", "--port", str(port), *extra]


LAUNCHER = SpecverifyLauncher(
    name="specverify", install_hint=INSTALL,
    spec_kinds=("none", "ngram[:N]", "draft[:LAYERS]", "uniform", "skewed"),
    env={"OMP_NUM_THREADS": "1"}, ready_timeout_s=180.0, distribution="specverify")
