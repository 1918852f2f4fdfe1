"""The package layout: every package folder is installed, nothing generic lands at the top level."""

import importlib.util
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def listed_packages():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(data["tool"]["setuptools"]["packages"]), data["tool"]["setuptools"]["package-dir"]


def test_every_package_folder_is_listed_in_pyproject():
    packages, mapping = listed_packages()
    found = set()
    for top, name in [("specverify", "specverify"), ("reference", "specverify.reference"), ("kernels", "specverify.kernels")]:
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    missing = found - packages
    assert not missing, f"package folders missing from [tool.setuptools] packages: {sorted(missing)}"
    assert mapping["specverify.reference"] == "reference" and mapping["specverify.kernels"] == "kernels"


def test_no_generic_top_level_modules_are_importable():
    # `reference` and `kernels` live only inside the specverify namespace
    assert importlib.util.find_spec("specverify.reference") is not None
    for generic in ("reference", "kernels"):
        spec = importlib.util.find_spec(generic)
        assert spec is None or "site-packages" not in str(spec.origin or ""), f"{generic} installed at top level"


# ----------------------------------------------------------------------------- the wheel (issue 32)

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def named_install_scripts() -> set:
    """Every install_*.sh that specverify's code or messages name."""
    names = set()
    for top in ("specverify", "reference", "kernels"):
        for path in (ROOT / top).rglob("*.py"):
            names |= set(re.findall(r"install_[a-z0-9_]+\.sh", path.read_text(encoding="utf-8")))
    return names


def test_every_install_script_the_messages_name_is_package_data():
    names = named_install_scripts()
    assert {"install_engines.sh", "install_vllm_cpu.sh", "install_llamacpp.sh"} <= names
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["specverify.findings"]
    for name in names:
        assert (ROOT / "specverify" / "findings" / name).is_file(), name
        assert any(fnmatch.fnmatch(name, g) for g in globs), f"{name} is not in the wheel: {globs}"


def test_the_metadata_has_an_spdx_license_classifiers_and_triton_in_its_own_extra():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert not any(c.startswith("License ::") for c in project["classifiers"])    # PEP 639: the expression only
    assert any(c.startswith("Programming Language :: Python :: 3") for c in project["classifiers"])
    extras = project["optional-dependencies"]
    assert not any(d.startswith("triton") for d in extras["engine"]), "the CPU engine path does not need triton"
    assert any(d.startswith("triton") for d in extras["triton"]) and extras["gpu"] == ["specverify[triton]"]
    assert any(d.startswith("triton") for d in extras["test"]), "the test suite runs the Triton kernels (interpreted)"
    assert "signatures.json" in PYPROJECT["tool"]["setuptools"]["package-data"]["specverify.zoo"]


def build_wheel(out) -> pathlib.Path:
    """The wheel of this checkout (setuptools of this environment, no isolation: seconds, no network)."""
    pytest.importorskip("build", reason="the build frontend is not installed: pip install build")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 (the SPDX license needs 77)")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "License classifiers are deprecated" not in proc.stderr and "project.license` as a TOML table" not in proc.stderr
    (wheel,) = out.glob("specverify-*.whl")
    return wheel


def test_the_wheel_holds_the_scripts_data_and_license(tmp_path):
    wheel = build_wheel(tmp_path)
    files = set(zipfile.ZipFile(wheel).namelist())
    for name in named_install_scripts():
        assert f"specverify/findings/{name}" in files, name
    for data in ("specverify/zoo/signatures.json", "specverify/models/prompts.json", "specverify/reference/__init__.py",
                 "specverify/kernels/__init__.py"):
        assert data in files, data
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files)
    assert not any(f.startswith(("reference/", "kernels/", "tests/")) for f in files)
    meta = zipfile.ZipFile(wheel).read(next(f for f in files if f.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "Classifier: Framework :: Pytest" in meta


@pytest.mark.slow      # a fresh venv and its dependencies: minutes
def test_the_wheel_without_extras_audits_the_reference_and_lists_what_it_skipped(tmp_path):
    """`pip install specverify-*.whl` (no extras: no torch, no triton) into a clean venv, then
    `specverify audit reference` passes, with rank_agreement (torch.distributed) listed as not covered,
    and naming that check is exit 2 with the install line."""
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=1500)
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    cli = [str(venv / "bin" / "specverify"), "audit", "reference", "--samples", "20000", "--jobs", "2"]
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "reference: PASS" in proc.stdout
    assert "rank_agreement: needs torch: pip install 'specverify[engine]'" in proc.stdout
    named = subprocess.run(cli + ["--checks", "marginal,rank_agreement"], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path)
    assert named.returncode == 2 and "check rank_agreement needs torch: pip install 'specverify[engine]'" in named.stderr
    assert "Traceback" not in named.stderr
    shutil.rmtree(venv)
