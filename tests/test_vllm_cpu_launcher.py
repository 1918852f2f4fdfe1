"""The vllm-cpu server launcher (`server/engines/vllm_cpu.py`): the argv it builds and the speculation it
asks for. Starting the real server needs the vllm-cpu venv (`findings/vllm_cpu_server.py`, the report in
reports/vllm-cpu-server-0.32.0); here only what can be checked without it."""

from __future__ import annotations

import json
import sys

import pytest

from specverify.errors import InputError
from specverify.server.engines import vllm_cpu
from specverify.server.engines.base import EngineLauncher


def _spec_config(argv):
    return json.loads(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else None


def test_the_launcher_fills_the_engine_launcher_interface():
    launcher = vllm_cpu.LAUNCHER
    assert isinstance(launcher, EngineLauncher) and launcher.name == "vllm-cpu"
    assert {"ngram", "draft"} <= {k.split(":")[0].split("[")[0] for k in launcher.spec_kinds}   # "ngram[:K]", "draft:PATH"
    assert launcher.ready_timeout_s > 0 and "install_vllm_cpu.sh" in launcher.install_hint
    assert launcher.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_argv_binds_loopback_on_the_port_and_passes_the_speculative_config():
    argv = vllm_cpu.command("/venv/bin/python", "/m/target-hd64", 43210, "draft:/m/draft-hd64:4", ["--max-model-len", "128"])
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "43210"
    assert argv[argv.index("--model") + 1] == "/m/target-hd64" and argv[-2:] == ["--max-model-len", "128"]
    assert _spec_config(argv) == {"model": "/m/draft-hd64", "num_speculative_tokens": 4}
    assert _spec_config(vllm_cpu.command("p", "m", 1, "none")) is None


@pytest.mark.parametrize("spec, want", [
    ("ngram", {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}),
    ("ngram:5", {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1, "prompt_lookup_max": 3}),
    ("draft:/d", {"model": "/d", "num_speculative_tokens": 3}),
    ("draft-probabilistic:/d:2", {"model": "/d", "num_speculative_tokens": 2, "draft_sample_method": "probabilistic"}),
    ('{"method": "ngram", "num_speculative_tokens": 1}', {"method": "ngram", "num_speculative_tokens": 1}),
])
def test_speculative_config_of_each_spec(spec, want):
    assert vllm_cpu.speculative_config(spec) == want


@pytest.mark.parametrize("spec", ["eagle:/x", "ngram:0", "ngram:x", "draft", "draft:", "none:3", "{not json", "[1]"])
def test_a_bad_spec_is_an_input_error(spec):
    with pytest.raises(InputError):
        vllm_cpu.speculative_config(spec)


def test_version_of_an_interpreter_without_vllm_cpu_is_an_input_error_naming_the_install():
    with pytest.raises(InputError, match="install_vllm_cpu.sh"):
        vllm_cpu.version(sys.executable)


def test_the_server_report_names_a_reproducer_that_uses_only_the_openai_client():
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readme = (root / "reports" / "vllm-cpu-server-0.32.0" / "README.md").read_text()
    for name in ("vllm_cpu_server_spec", "vllm_cpu_server_serving"):       # the server rows', the serving rows'
        repro = root / "specverify" / "findings" / "repro" / f"{name}.py"
        assert f"findings/repro/{name}.py" in readme and repro.with_suffix(".out").is_file()
        tree = ast.parse(repro.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert imported - {"collections", "concurrent", "sys"} == {"openai"}, (name, imported)


def test_driver_refuses_unknown_checks_and_specs_before_any_work(tmp_path):
    from specverify.findings import vllm_cpu_server as driver

    out = tmp_path / "out"
    with pytest.raises(InputError, match="--checks 'server,bogus'"):
        driver.main([sys.executable, str(out), "--checks", "server,bogus"])
    with pytest.raises(InputError, match="--checks ''"):
        driver.main([sys.executable, str(out), "--checks", ""])
    with pytest.raises(InputError, match="--specs"):
        driver.main([sys.executable, str(out), "--specs", "eagle"])
    assert not out.exists()
    assert "--enable-prompt-tokens-details" in driver.EXTRA      # the prefix-cache row needs cache hits reported
    assert set(driver.CHECKS) == {"server", "serving", "preemption"}
    with pytest.raises(InputError, match="preemption runs alone"):
        driver.main([sys.executable, str(out), "--checks", "serving,preemption"])
    for bad in ("0", "-3"):
        with pytest.raises(InputError, match=f"--kv-blocks {bad}:"):
            driver.main([sys.executable, str(out), "--kv-blocks", bad])
    assert driver.server_extra() == driver.EXTRA
    tail = driver.server_extra(32, 5)[len(driver.EXTRA):]
    assert tail == ("--block-size", "32", "--num-gpu-blocks-override", "5")
    for bad in ("10", "16", "0"):                   # vLLM's CPU attention takes multiples of 32 only
        with pytest.raises(InputError, match=f"--block-size {bad}:"):
            driver.main([sys.executable, str(out), "--block-size", bad])
    assert not out.exists()
    with pytest.raises(InputError, match="only ngram"):
        driver.main([sys.executable, str(out), "--model", "smollm2", "--specs", "ngram,draft"])
    assert not out.exists()


def test_preemption_probe_reads_vllms_counter_and_refuses_bad_sizes(tmp_path):
    from specverify.findings import vllm_cpu_preemption_probe as probe

    text = ("# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
            "# TYPE vllm:num_preemptions_total counter\n"
            'vllm:num_preemptions_total{engine="0",model_name="m"} 7.0\n'
            'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9\n'
            'vllm:request_num_preemptions_count{engine="0"} 3.0\n')

    class Client:
        def get(self, url):
            assert url == "http://127.0.0.1:9/metrics"
            return type("R", (), {"text": text})()

    assert probe.preemptions(Client(), "http://127.0.0.1:9/v1") == 7.0
    out = tmp_path / "out"
    for bad in (["--sizes", "12,x"], ["--sizes", "0"], ["--wave", "0"], ["--kv-blocks", "0"]):
        with pytest.raises(InputError):
            probe.main([sys.executable, "model", str(out), *bad])
    assert not out.exists()
