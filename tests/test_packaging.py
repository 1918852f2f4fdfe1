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
