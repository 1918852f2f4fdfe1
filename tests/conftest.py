import os

# Triton kernels run on the CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist (the README's test command runs two workers on two cores) each worker keeps to one
# intra-op thread, so two workers do not oversubscribe the cores with four busy OpenMP threads. Set
# before torch is imported; worker processes the tests start inherit it. A test that wants more threads
# asks for them explicitly (torch.set_num_threads / --threads).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


import pytest  # noqa: E402


@pytest.fixture
def audit_needs_install():
    """`check(module, engine, script)`: without `module` installed, `specverify audit ENGINE` exits 2 with
    one line naming the install script (skipped where the module is installed)."""
    import subprocess
    import sys

    from specverify import installed

    def check(module: str, engine: str, script: str) -> None:
        if installed.available(module):
            pytest.skip(f"{module} is installed here: the not-installed path cannot be shown")
        proc = subprocess.run([sys.executable, "-m", "specverify", "audit", engine], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "not installed" in lines[0] and script in lines[0], proc.stderr

    return check
